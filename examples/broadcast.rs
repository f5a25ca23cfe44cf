//! A broadcast server: every text message a client sends goes to every
//! connected client, encoded once with `PreparedMessage`; the sender alone
//! is told how many clients it reached, through a clone of its sending half.
//!
//! ```text
//! cargo run --example broadcast -- 127.0.0.1:9003
//! cargo run --example client -- ws://127.0.0.1:9003/   # in two terminals
//! ```

use futures_util::StreamExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use wavesock::{Message, PreparedMessage};

async fn serve(tcp: TcpStream, hub: broadcast::Sender<PreparedMessage>) -> wavesock::Result<()> {
    let ws = wavesock::accept_async(tcp).await?;
    let (mut tx, mut rx) = ws.split();
    // Replies to this client alone go through a clone of the sending half,
    // while the fan-out task sends through the original.
    let mut reply = tx.clone();
    let mut inbox = hub.subscribe();
    let fan_out = tokio::spawn(async move {
        loop {
            match inbox.recv().await {
                // The same encoded frame for every connection: no copy, no
                // re-encoding per receiver.
                Ok(prepared) => tx.send_prepared(&prepared).await?,
                // A slow client misses messages rather than holding memory.
                Err(broadcast::error::RecvError::Lagged(n)) => eprintln!("client lagged by {n}"),
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
        Ok::<_, wavesock::Error>(())
    });
    while let Some(msg) = rx.next().await {
        if let Message::Text(text) = msg? {
            let reached = hub
                .send(PreparedMessage::new(&Message::Text(text))?)
                .unwrap_or(0);
            reply
                .send(Message::text(format!("(delivered to {reached} clients)")))
                .await?;
        }
    }
    fan_out.abort();
    Ok(())
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9003".into());
    let listener = TcpListener::bind(&addr).await?;
    eprintln!("broadcast server on ws://{}/", listener.local_addr()?);
    let (hub, _) = broadcast::channel(1024);
    loop {
        let (tcp, _) = listener.accept().await?;
        let hub = hub.clone();
        tokio::spawn(async move {
            if let Err(e) = serve(tcp, hub).await {
                eprintln!("connection ended: {e}");
            }
        });
    }
}
