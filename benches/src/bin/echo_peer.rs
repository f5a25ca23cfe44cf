//! Echo servers for the side-by-side measurements: `echo_peer IMPL ADDR`.
//!
//! `IMPL` is one of `wavesock`, `hub`, `hub-tokio`, `fastwebsockets`, `tokio-websockets`,
//! `tokio-tungstenite`; `ADDR` must be a loopback address such as
//! `127.0.0.1:9001`. Every server runs on a current-thread Tokio runtime
//! (one core), sets `TCP_NODELAY` on each accepted socket, allows messages of
//! up to 64 MiB, and echoes every text and binary message back. Each echo
//! loop is written the way the library's own README or examples write it:
//!
//! - wavesock: `next()` then `feed()` for data messages, one `flush()` at the end;
//! - hub: wavesock's hub engine (`wavesock::hub`), one engine, no task per
//!   connection, `send_borrowed` of each message in `Handler::message`
//!   (as `examples/hub_echo.rs`); `hub-tokio` the same with a Tokio
//!   registration per socket (`Readiness::Tokio`) instead of the engine's
//!   own poller;
//! - fastwebsockets: hyper upgrade, `FragmentCollector`, `read_frame` /
//!   `write_frame` (its `examples/echo_server.rs`);
//! - tokio-websockets: `ServerBuilder::accept`, `next()` then `send()` (its
//!   `examples/echo_server.rs`, with default frame size and limits);
//! - tokio-tungstenite: `accept_async`, `split`, `try_filter(..).forward(..)`
//!   (its `examples/echo-server.rs`).
//!
//! The loops themselves live in the `wavesock_benches` library, shared with
//! the criterion benches. Two of those examples wrap the connection task in
//! `tokio::task::unconstrained`; none is wrapped here, so every library runs
//! under the same scheduler rules.
//!
//! Connection errors (a client leaving without a close frame, as the load
//! generator does) are counted silently; set `ECHO_PEER_VERBOSE=1` to print
//! them. The soft open-files limit is raised to the hard limit at start.

use std::net::SocketAddr;
use std::process::ExitCode;
use wavesock::hub::Readiness;

use tokio::net::{TcpListener, TcpStream};
use wavesock_benches::{
    BoxError, tokio_tungstenite_config, tokio_websockets_limits, wavesock_config,
};

#[derive(Clone, Copy, Debug)]
enum Impl {
    Wavesock,
    Hub,
    HubTokio,
    Fastwebsockets,
    TokioWebsockets,
    TokioTungstenite,
}

impl Impl {
    fn parse(s: &str) -> Option<Impl> {
        Some(match s {
            "wavesock" => Impl::Wavesock,
            "hub" => Impl::Hub,
            "hub-tokio" => Impl::HubTokio,
            "fastwebsockets" => Impl::Fastwebsockets,
            "tokio-websockets" => Impl::TokioWebsockets,
            "tokio-tungstenite" => Impl::TokioTungstenite,
            _ => return None,
        })
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: echo_peer wavesock|hub|hub-tokio|fastwebsockets|tokio-websockets|tokio-tungstenite 127.0.0.1:PORT";
    let (Some(which), Some(addr)) = (
        args.get(1).and_then(|s| Impl::parse(s)),
        args.get(2).and_then(|s| s.parse::<SocketAddr>().ok()),
    ) else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    if !addr.ip().is_loopback() {
        eprintln!("echo_peer only listens on loopback addresses, not {addr}");
        return ExitCode::from(2);
    }
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        eprintln!("echo_peer: could not raise the open-files limit: {e}");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    match rt.block_on(serve(which, addr)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("echo_peer: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(which: Impl, addr: SocketAddr) -> Result<(), BoxError> {
    let listener = TcpListener::bind(addr).await?;
    let verbose = std::env::var_os("ECHO_PEER_VERBOSE").is_some();
    eprintln!("echo_peer {which:?} listening on {addr}");
    // The hub accepts, sets TCP_NODELAY and serves on this task.
    match which {
        Impl::Hub => return wavesock_benches::hub_echo(listener, Readiness::default()).await,
        Impl::HubTokio => return wavesock_benches::hub_echo(listener, Readiness::Tokio).await,
        _ => {}
    }
    loop {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        // One spawn per implementation: a task holds a future as large as
        // the largest it could be, so a shared `match` inside one async
        // block would charge every implementation the largest one's size.
        match which {
            Impl::Wavesock => spawn(wavesock_echo(tcp), verbose),
            Impl::Hub | Impl::HubTokio => unreachable!("served above"),
            Impl::Fastwebsockets => spawn(fastwebsockets_serve(tcp), verbose),
            Impl::TokioWebsockets => spawn(tokio_websockets_echo(tcp), verbose),
            Impl::TokioTungstenite => spawn(tokio_tungstenite_echo(tcp), verbose),
        }
    }
}

fn spawn<F>(connection: F, verbose: bool)
where
    F: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(e) = connection.await
            && verbose
        {
            eprintln!("connection: {e}");
        }
    });
}

async fn wavesock_echo(tcp: TcpStream) -> Result<(), BoxError> {
    let mut ws = wavesock::accept_async_with_config(tcp, wavesock_config()).await?;
    // By reference: an async fn taking the stream by value would keep it
    // twice in this task (its argument and its local).
    wavesock_benches::wavesock_echo(&mut ws).await
}

async fn fastwebsockets_serve(tcp: TcpStream) -> Result<(), BoxError> {
    use hyper::server::conn::http1;
    use hyper::service::service_fn;

    let io = hyper_util::rt::TokioIo::new(tcp);
    http1::Builder::new()
        .serve_connection(io, service_fn(fastwebsockets_upgrade))
        .with_upgrades()
        .await?;
    Ok(())
}

async fn fastwebsockets_upgrade(
    mut req: hyper::Request<hyper::body::Incoming>,
) -> Result<
    hyper::Response<http_body_util::Empty<hyper::body::Bytes>>,
    fastwebsockets::WebSocketError,
> {
    let (response, upgrade) = fastwebsockets::upgrade::upgrade(&mut req)?;
    tokio::spawn(async move {
        // Errors end the connection; they are expected when clients vanish.
        if let Ok(ws) = upgrade.await {
            let _ = wavesock_benches::fastwebsockets_echo(ws).await;
        }
    });
    Ok(response)
}

async fn tokio_websockets_echo(tcp: TcpStream) -> Result<(), BoxError> {
    let (_request, ws) = tokio_websockets::ServerBuilder::new()
        .limits(tokio_websockets_limits())
        .accept(tcp)
        .await?;
    wavesock_benches::tokio_websockets_echo(ws).await
}

async fn tokio_tungstenite_echo(tcp: TcpStream) -> Result<(), BoxError> {
    let config = tokio_tungstenite_config();
    let ws = tokio_tungstenite::accept_async_with_config(tcp, Some(config)).await?;
    wavesock_benches::tokio_tungstenite_echo(ws).await
}
