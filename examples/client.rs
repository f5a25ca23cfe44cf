//! A small command-line WebSocket client.
//!
//! ```text
//! cargo run --release --example client -- ws://HOST:PORT/PATH
//! cargo run --release --features rustls-webpki-roots --example client -- wss://HOST/PATH
//! ```
//!
//! Sends each line of stdin as a text message and prints each text message
//! received on its own line. On the end of stdin it closes with code 1000,
//! waits for the close handshake to finish, and exits 0.
//!
//! `wss://` URLs need a TLS feature (`rustls-webpki-roots` or
//! `rustls-native-roots`). Like curl, the client goes through the proxy
//! named by `https_proxy` / `http_proxy` / `all_proxy` (either case) unless
//! `no_proxy` exempts the host.

use futures_util::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};
use wavesock::proxy::Proxy;
use wavesock::{CloseCode, CloseFrame, Config, Message};

async fn run(url: &str) -> wavesock::Result<()> {
    let config = Config::default().proxy(Proxy::from_env());
    let (ws, _) = wavesock::connect_async_with_config(url, config).await?;
    let (mut tx, mut rx) = ws.split();
    // Printing runs on its own so messages show while stdin is idle; it ends
    // when the close handshake completes (or the connection fails).
    let printer = tokio::spawn(async move {
        while let Some(msg) = rx.next().await {
            match msg? {
                Message::Text(text) => println!("{text}"),
                Message::Close(frame) => {
                    if let Some(frame) = frame.filter(|f| f.code != CloseCode::NORMAL) {
                        eprintln!("server closed: {} {}", u16::from(frame.code), frame.reason);
                    }
                }
                _ => {}
            }
        }
        Ok::<_, wavesock::Error>(())
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut printer = std::pin::pin!(printer);
    loop {
        tokio::select! {
            line = lines.next_line() => match line? {
                Some(line) => tx.send(Message::text(line)).await?,
                None => break,
            },
            // The server closed first: nothing more to send.
            done = &mut printer => return done.expect("printer task panicked"),
        }
    }
    tx.send(Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, ""))))
        .await?;
    printer.await.expect("printer task panicked")
}

fn main() {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: client ws://HOST:PORT/PATH (or wss:// with a TLS feature)");
        std::process::exit(2);
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = rt.block_on(run(&url));
    // Stdin is read on a blocking thread that may still wait for a line
    // (when the server closed first); don't wait for it.
    rt.shutdown_background();
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
