//! A hyper 1.x server with a WebSocket echo endpoint on `/ws`, upgraded with
//! `wavesock::upgrade`: HTTP/1.1 `Upgrade` and HTTP/2 extended CONNECT
//! (h2c) on one port. Other paths stay plain HTTP.
//!
//! ```text
//! cargo run --example hyper_server -- 127.0.0.1:9003
//! cargo run --example client -- ws://127.0.0.1:9003/ws
//! cargo run --example client -- --http2 ws://127.0.0.1:9003/ws
//! ```

use std::convert::Infallible;

use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use wavesock::upgrade::{self, Body, UpgradeFut};

async fn echo(websocket: UpgradeFut) -> wavesock::Result<()> {
    let mut ws = websocket.await?;
    while let Some(msg) = ws.next().await {
        let msg = msg?;
        if msg.is_data() {
            ws.send(msg).await?;
        }
    }
    Ok(())
}

async fn handle(mut req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    if req.uri().path() != "/ws" {
        return Ok(Response::new("try a WebSocket client on /ws\n".into()));
    }
    // The same 400/405/426 answers wavesock's own accept gives.
    let (response, websocket) = match upgrade::upgrade(&mut req) {
        Ok(accepted) => accepted,
        Err(refusal) => return Ok(refusal.into_response()),
    };
    // The WebSocket exists once hyper has sent the response returned below.
    tokio::spawn(async move {
        if let Err(e) = echo(websocket).await {
            eprintln!("connection ended: {e}");
        }
    });
    Ok(response)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9003".into());
    let listener = TcpListener::bind(&addr).await?;
    eprintln!(
        "hyper_server listening on ws://{}/ws",
        listener.local_addr()?
    );
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Advertise SETTINGS_ENABLE_CONNECT_PROTOCOL: WebSockets over HTTP/2.
    builder.http2().enable_connect_protocol();
    loop {
        let (tcp, _) = listener.accept().await?;
        let builder = builder.clone();
        tokio::spawn(async move {
            let conn =
                builder.serve_connection_with_upgrades(TokioIo::new(tcp), service_fn(handle));
            if let Err(e) = conn.await {
                eprintln!("HTTP connection failed: {e}");
            }
        });
    }
}
