//! Runs the Autobahn TestSuite client procedure against a fuzzing server.
//!
//! ```text
//! kosoku -m fuzzingserver 127.0.0.1:9001 -o reports/client &
//! cargo run --release --example autobahn_client -- ws://127.0.0.1:9001
//! cargo run --release --features deflate --example autobahn_client -- ws://127.0.0.1:9001 --deflate shared
//! ```
//!
//! Asks `/getCaseCount`, echoes every text and binary message of each
//! `/runCase?case=N&agent=wavesock` until the server closes, then asks for
//! `/updateReports?agent=wavesock`. Errors within a case are expected (many
//! cases send invalid data on purpose): they are logged and the next case
//! runs. Built with `--features deflate`, the client offers permessage-deflate
//! (with `client_no_context_takeover`, which the 13.x cases ask to accept),
//! holding compression memory as `--deflate POLICY` says (`takeover`, the
//! default, `shared`, `dedicated:4k`, ...).

use futures_util::{SinkExt, StreamExt};
use wavesock::{Config, Message};

const AGENT: &str = "wavesock";

/// The policy named by `--deflate`, if any.
fn policy_arg() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == "--deflate")?;
    args.get(at + 1).cloned()
}

fn config() -> Config {
    let config = Config::default()
        .max_frame_size(64 << 20)
        .max_message_size(64 << 20);
    #[cfg(feature = "deflate")]
    // Threshold 0: see examples/echo_server.rs.
    let config = config.deflate(
        wavesock::DeflateConfig::default()
            .client_no_context_takeover(true)
            .compression_threshold(0)
            .policy(
                policy_arg()
                    .as_deref()
                    .unwrap_or("takeover")
                    .parse()
                    .expect("--deflate takes takeover, shared or dedicated:Nk"),
            ),
    );
    #[cfg(not(feature = "deflate"))]
    assert!(
        policy_arg().is_none(),
        "--deflate needs a build with --features deflate"
    );
    config
}

async fn case_count(base: &str) -> wavesock::Result<u32> {
    let (mut ws, _) =
        wavesock::connect_async_with_config(format!("{base}/getCaseCount"), config()).await?;
    let mut count = None;
    while let Some(msg) = ws.next().await {
        if let Message::Text(text) = msg? {
            count = text.as_str().trim().parse().ok();
        }
    }
    count.ok_or_else(|| wavesock::Error::InvalidMessage("no case count received"))
}

async fn run_case(base: &str, case: u32) -> wavesock::Result<()> {
    let url = format!("{base}/runCase?case={case}&agent={AGENT}");
    let (mut ws, _) = wavesock::connect_async_with_config(url, config()).await?;
    while let Some(msg) = ws.next().await {
        let msg = msg?;
        if msg.is_data() {
            ws.send(msg).await?;
        }
    }
    Ok(())
}

async fn update_reports(base: &str) -> wavesock::Result<()> {
    let url = format!("{base}/updateReports?agent={AGENT}");
    let (mut ws, _) = wavesock::connect_async_with_config(url, config()).await?;
    // The reports are written once the connection is accepted; some fuzzing
    // servers then drop the connection without a close handshake.
    let closed = async {
        ws.close(None).await?;
        while ws.next().await.transpose()?.is_some() {}
        Ok::<_, wavesock::Error>(())
    };
    if let Err(e) = closed.await {
        eprintln!("updateReports: connection ended with {e}");
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "ws://127.0.0.1:9001".into());
    let base = base.trim_end_matches('/').to_owned();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let count = case_count(&base).await?;
        eprintln!("running {count} cases against {base}");
        for case in 1..=count {
            if let Err(e) = run_case(&base, case).await {
                eprintln!("case {case}: {e}");
            }
        }
        update_reports(&base).await?;
        eprintln!("reports updated");
        Ok(())
    })
}
