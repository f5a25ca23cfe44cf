//! A small command-line WebSocket client.
//!
//! ```text
//! cargo run --release --example client -- ws://HOST:PORT/PATH
//! cargo run --release --features rustls-webpki-roots --example client -- wss://HOST/PATH
//! cargo run --release --example client -- --http2 ws://HOST:PORT/PATH
//! ```
//!
//! Sends each line of stdin as a text message and prints each text message
//! received on its own line. On the end of stdin it closes with code 1000,
//! waits for the close handshake to finish, and exits 0.
//!
//! `wss://` URLs need a TLS feature (`rustls-webpki-roots` or
//! `rustls-native-roots`). Like curl, the client goes through the proxy
//! named by `https_proxy` / `http_proxy` / `all_proxy` (either case; under
//! CGI, not `HTTP_PROXY`) unless `no_proxy` exempts the host.
//!
//! With `--http2` the WebSocket is opened over HTTP/2 when the server
//! supports it (RFC 8441: TLS with ALPN `h2`, or h2c for `ws://`) and over
//! HTTP/1.1 otherwise; stderr says which.

use futures_util::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use wavesock::proxy::Proxy;
use wavesock::{CloseCode, CloseFrame, Config, Message, WebSocketStream};

async fn run(url: &str, http2: bool) -> wavesock::Result<()> {
    let config = Config::default().proxy(Proxy::from_env());
    if http2 {
        let (ws, _) = wavesock::http2::connect_async_http2_with_config(url, config).await?;
        let over = if ws.get_ref().is_http2() {
            "HTTP/2"
        } else {
            "HTTP/1.1"
        };
        eprintln!("connected over {over}");
        return session(ws).await;
    }
    let (ws, _) = wavesock::connect_async_with_config(url, config).await?;
    session(ws).await
}

async fn session<S>(ws: WebSocketStream<S>) -> wavesock::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
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
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let http2 = args.first().is_some_and(|a| a == "--http2");
    if http2 {
        args.remove(0);
    }
    let Some(url) = args.first().cloned() else {
        eprintln!("usage: client [--http2] ws://HOST:PORT/PATH (or wss:// with a TLS feature)");
        std::process::exit(2);
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = rt.block_on(run(&url, http2));
    // Stdin is read on a blocking thread that may still wait for a line
    // (when the server closed first); don't wait for it.
    rt.shutdown_background();
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
