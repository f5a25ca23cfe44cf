//! wavesock on an axum route, without axum's `ws` feature: the handler
//! checks the upgrade request, answers `101 Switching Protocols` itself, and
//! hands the connection hyper upgrades to wavesock, which echoes every
//! message. The rest of the router stays ordinary axum.
//!
//! ```text
//! cargo run --example axum_server -- 127.0.0.1:9004
//! cargo run --example client -- ws://127.0.0.1:9004/ws
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::{SinkExt, StreamExt};
use http::StatusCode;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use wavesock::handshake::server::{accept_response, check_request, error_response};
use wavesock::{Config, Role, WebSocketStream};

/// State shared by the handlers: how many WebSocket clients are connected.
#[derive(Clone, Default)]
pub struct AppState {
    live: Arc<AtomicUsize>,
}

/// The router: `GET /` says how many clients are connected, `GET /ws` is
/// the WebSocket echo endpoint.
pub fn app() -> Router {
    Router::new()
        .route("/", get(status))
        .route("/ws", get(upgrade))
        .with_state(AppState::default())
}

async fn status(State(state): State<AppState>) -> String {
    format!(
        "{} WebSocket client(s) on /ws\n",
        state.live.load(Ordering::Relaxed)
    )
}

/// The upgrade handler. `Request` must be the last extractor; other
/// extractors (`State`, headers, auth) run before it as usual.
async fn upgrade(State(state): State<AppState>, mut req: Request) -> Response {
    // Checks method, version, Upgrade, Connection, the version and key, and
    // returns derive_accept_key(Sec-WebSocket-Key) for the 101.
    let accept = match check_request(&req) {
        Ok(accept) => accept,
        Err(e) => {
            return match error_response(&e) {
                Some(resp) => resp.map(Body::from),
                None => StatusCode::BAD_REQUEST.into_response(),
            };
        }
    };
    // hyper puts this in every HTTP/1.1 request served with upgrades (as
    // axum::serve does); it resolves once our 101 has been written.
    let Some(on_upgrade) = req.extensions_mut().remove::<OnUpgrade>() else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "connection cannot upgrade",
        )
            .into_response();
    };
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(upgraded) => upgraded,
            Err(e) => return eprintln!("upgrade failed: {e}"),
        };
        state.live.fetch_add(1, Ordering::Relaxed);
        // hyper keeps any bytes read past the request inside `Upgraded`, so
        // the plain constructor loses nothing.
        let io = TokioIo::new(upgraded);
        if let Err(e) = echo(io).await {
            eprintln!("connection ended: {e}");
        }
        state.live.fetch_sub(1, Ordering::Relaxed);
    });
    accept_response(&accept).map(|()| Body::empty())
}

async fn echo(io: TokioIo<hyper::upgrade::Upgraded>) -> wavesock::Result<()> {
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default())?;
    while let Some(msg) = ws.next().await {
        let msg = msg?;
        if msg.is_data() {
            ws.feed(msg).await?; // written when next() is about to wait
        }
    }
    Ok(())
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
