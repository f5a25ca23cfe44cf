//! Echoes every text and binary message back unchanged.
//!
//! ```text
//! cargo run --release --example echo_server -- 127.0.0.1:9001
//! cargo run --release --features deflate --example echo_server -- 127.0.0.1:9001 --deflate shared
//! cargo run --release --features metrics --example echo_server -- 127.0.0.1:9001 --metrics 127.0.0.1:9100
//! ```
//!
//! Runs on a current-thread runtime (one core), with a 64 MiB message limit.
//! Built with `--features deflate`, it accepts permessage-deflate offers, holding
//! compression memory as `--deflate POLICY` says: `takeover` (the default),
//! `shared`, or `dedicated:4k` (any size from 1k to 256k; see
//! `DeflatePolicy`). Built with `--features metrics`, `--metrics ADDR` serves
//! wavesock's metrics at `http://ADDR/metrics` for Prometheus.

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use wavesock::Config;

#[path = "support/echo_args.rs"]
mod echo_args;
#[path = "support/metrics_args.rs"]
mod metrics_args;

async fn serve(tcp: TcpStream, config: Config) -> wavesock::Result<()> {
    tcp.set_nodelay(true)?;
    let mut ws = wavesock::accept_async_with_config(tcp, config).await?;
    while let Some(msg) = ws.next().await {
        let msg = msg?;
        if msg.is_data() {
            ws.feed(msg).await?;
        }
    }
    Ok(())
}

fn main() -> std::io::Result<()> {
    let echo_args::Args {
        addr,
        config,
        readiness,
        metrics,
    } = echo_args::parse()?;
    if readiness.is_some() {
        return Err(echo_args::bad("--readiness is hub_echo's"));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if let Some(at) = &metrics {
        // The endpoint is a task on the server's runtime, not a thread of
        // its own.
        let _in_runtime = rt.enter();
        metrics_args::serve(at)?;
    }
    rt.block_on(async {
        let listener = TcpListener::bind(&addr).await?;
        eprintln!("echo_server listening on {}", listener.local_addr()?);
        loop {
            let (tcp, _) = listener.accept().await?;
            let config = config.clone();
            tokio::spawn(async move {
                if let Err(e) = serve(tcp, config).await {
                    if std::env::var_os("ECHO_VERBOSE").is_some() {
                        eprintln!("connection ended: {e}");
                    }
                }
            });
        }
    })
}
