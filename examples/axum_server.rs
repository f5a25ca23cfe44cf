//! wavesock on an axum route: `wavesock::axum::WebSocketUpgrade` in place of
//! `axum::extract::ws::WebSocketUpgrade`, the rest ordinary axum. The same
//! route serves HTTP/1.1 upgrades and, over HTTP/2, extended CONNECT
//! (`axum::serve` speaks h2c and advertises RFC 8441).
//!
//! ```text
//! cargo run --example axum_server -- 127.0.0.1:9004
//! cargo run --example client -- ws://127.0.0.1:9004/ws
//! cargo run --example client -- --http2 ws://127.0.0.1:9004/ws
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{any, get};
use wavesock::axum::{Message, WebSocket, WebSocketUpgrade};

/// State shared by the handlers: how many WebSocket clients are connected.
#[derive(Clone, Default)]
pub struct AppState {
    live: Arc<AtomicUsize>,
}

/// The router: `GET /` says how many clients are connected, `/ws` is the
/// WebSocket echo endpoint (`any`: over HTTP/2 a WebSocket is a CONNECT).
pub fn app() -> Router {
    Router::new()
        .route("/", get(status))
        .route("/ws", any(upgrade))
        .with_state(AppState::default())
}

async fn status(State(state): State<AppState>) -> String {
    format!(
        "{} WebSocket client(s) on /ws\n",
        state.live.load(Ordering::Relaxed)
    )
}

async fn upgrade(ws: WebSocketUpgrade, State(state): State<AppState>) -> Response {
    ws.protocols(["echo"])
        .on_upgrade(move |socket| echo(socket, state))
}

async fn echo(mut socket: WebSocket, state: AppState) {
    state.live.fetch_add(1, Ordering::Relaxed);
    while let Some(msg) = socket.recv().await {
        match msg {
            Ok(msg @ (Message::Text(_) | Message::Binary(_))) => {
                if socket.send(msg).await.is_err() {
                    break;
                }
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("connection ended: {e}");
                break;
            }
        }
    }
    state.live.fetch_sub(1, Ordering::Relaxed);
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9004".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("axum_server on ws://{}/ws", listener.local_addr()?);
    axum::serve(listener, app()).await
}
