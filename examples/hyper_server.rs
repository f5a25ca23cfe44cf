//! A hyper 1.x server that does the WebSocket upgrade itself and hands the
//! upgraded connection to wavesock, which echoes every message. Other paths
//! of the same server stay plain HTTP.
//!
//! ```text
//! cargo run --example hyper_server -- 127.0.0.1:9003
//! ```

use std::convert::Infallible;

use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use wavesock::handshake::server::{accept_response, check_request, error_response};
use wavesock::{Config, Role, WebSocketStream};

async fn echo(upgraded: hyper::upgrade::Upgraded) -> wavesock::Result<()> {
    // hyper keeps any bytes read past the request inside `Upgraded`, so the
    // plain constructor loses nothing.
    let io = TokioIo::new(upgraded);
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default())?;
    while let Some(msg) = ws.next().await {
        let msg = msg?;
        if msg.is_data() {
            ws.send(msg).await?;
        }
    }
    Ok(())
}

async fn handle(mut req: Request<Incoming>) -> Result<Response<String>, Infallible> {
    if req.uri().path() != "/ws" {
        return Ok(Response::new("try a WebSocket client on /ws\n".into()));
    }
    let accept = match check_request(&req) {
        Ok(accept) => accept,
        Err(e) => {
            // The same 400/405/426 answers wavesock's own accept gives.
            let resp = error_response(&e).unwrap_or_else(|| {
                let mut r = http::Response::new(Vec::new());
                *r.status_mut() = StatusCode::BAD_REQUEST;
                r
            });
            return Ok(resp.map(|body| String::from_utf8_lossy(&body).into_owned()));
        }
    };
    // The upgrade completes once hyper has sent the 101 returned below.
    tokio::spawn(async move {
        match hyper::upgrade::on(&mut req).await {
            Ok(upgraded) => {
                if let Err(e) = echo(upgraded).await {
                    eprintln!("connection ended: {e}");
                }
            }
            Err(e) => eprintln!("upgrade failed: {e}"),
        }
    });
    Ok(accept_response(&accept).map(|()| String::new()))
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
    loop {
        let (tcp, _) = listener.accept().await?;
        tokio::spawn(async move {
            let conn = http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service_fn(handle))
                .with_upgrades();
            if let Err(e) = conn.await {
                eprintln!("http error: {e}");
            }
        });
    }
}
