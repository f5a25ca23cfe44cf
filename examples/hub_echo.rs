//! Echoes every text and binary message back unchanged, on the hub: one
//! task for every connection, messages borrowed from its read buffer.
//!
//! ```text
//! cargo run --release --example hub_echo -- 127.0.0.1:9001
//! ```
//!
//! Runs one engine on a current-thread runtime (one core), with a 64 MiB
//! message limit, as `echo_server` does on the Stream API. Built with
//! `--features deflate`, it accepts permessage-deflate offers.

use tokio::net::TcpListener;
use wavesock::http::{Request, Response};
use wavesock::hub::{Handler, Hub, HubConfig, HubMessage, Ws};
use wavesock::{Config, ErrorResponse};

#[derive(Clone)]
struct Echo;

impl Handler for Echo {
    type Data = ();

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), ErrorResponse> {
        Ok(())
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        // A peer that does not read meets the hub's backpressure policy;
        // nothing else can fail here.
        let _ = ws.send_borrowed(msg);
    }
}

fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9001".into());
    let config = Config::default()
        .max_frame_size(64 << 20)
        .max_message_size(64 << 20);
    // Threshold 0: every message is echoed compressed (see echo_server.rs:
    // kosoku 0.1.0 fails its 12.x.1 / 13.x.1 cases on short messages sent
    // uncompressed).
    #[cfg(feature = "deflate")]
    let config = config.deflate(wavesock::DeflateConfig::default().compression_threshold(0));
    // Room for a whole echoed 64 MiB message: a peer that reads is never
    // cut off, one that does not stops being read.
    let hub_config = HubConfig::default()
        .config(config)
        .max_backpressure(80 << 20);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = TcpListener::bind(&addr).await?;
        eprintln!("hub_echo listening on {}", listener.local_addr()?);
        Hub::new(Echo, hub_config)
            .map_err(std::io::Error::other)?
            .serve(listener)
            .await
    })
}
