//! Echoes every text and binary message back unchanged, on the hub: one
//! task for every connection, messages borrowed from its read buffer.
//!
//! ```text
//! cargo run --release --example hub_echo -- 127.0.0.1:9001
//! cargo run --release --features deflate --example hub_echo -- 127.0.0.1:9001 --deflate shared
//! cargo run --release --example hub_echo -- 127.0.0.1:9001 --readiness tokio
//! ```
//!
//! Runs one engine on a current-thread runtime (one core), with a 64 MiB
//! message limit, as `echo_server` does on the Stream API. Built with
//! `--features deflate`, it accepts permessage-deflate offers, holding
//! compression memory as `--deflate POLICY` says: `takeover` (the default),
//! `shared`, or `dedicated:4k` (any size from 1k to 256k; see
//! `DeflatePolicy`).

use tokio::net::TcpListener;
use wavesock::http::{Request, Response};
use wavesock::hub::HttpResponse;
use wavesock::hub::{Handler, Hub, HubConfig, HubMessage, Ws};

#[derive(Clone)]
struct Echo;

impl Handler for Echo {
    type Data = ();

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
        Ok(())
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        // A peer that does not read meets the hub's backpressure policy;
        // nothing else can fail here.
        let _ = ws.send_borrowed(msg);
    }
}

#[path = "support/echo_args.rs"]
mod echo_args;
#[path = "support/metrics_args.rs"]
mod metrics_args;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let echo_args::Args {
        addr,
        config,
        readiness,
        metrics,
    } = echo_args::parse()?;
    // Room for a whole echoed 64 MiB message: a peer that reads is never
    // cut off, one that does not stops being read.
    let mut hub_config = HubConfig::default().config(config.max_backpressure(80 << 20));
    if let Some(mode) = readiness {
        hub_config = hub_config.readiness(
            mode.parse()
                .map_err(|e| echo_args::bad(&format!("--readiness {mode}: {e}")))?,
        );
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
        eprintln!("hub_echo listening on {}", listener.local_addr()?);
        Hub::new(Echo, hub_config)?.serve(listener).await
    })?;
    Ok(())
}
