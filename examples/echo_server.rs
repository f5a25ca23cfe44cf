//! Echoes every text and binary message back unchanged.
//!
//! ```text
//! cargo run --release --example echo_server -- 127.0.0.1:9001
//! ```
//!
//! Runs on a current-thread runtime (one core), with a 64 MiB message limit.
//! Built with `--features deflate`, it accepts permessage-deflate offers.

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use wavesock::Config;

async fn serve(tcp: TcpStream) -> wavesock::Result<()> {
    tcp.set_nodelay(true)?;
    let config = Config::default()
        .max_frame_size(64 << 20)
        .max_message_size(64 << 20);
    // Threshold 0: every message is echoed compressed. Short messages sent
    // uncompressed are valid (RFC 7692 §6), but kosoku 0.1.0 fails its
    // 12.x.1 / 13.x.1 cases on them ("Strings must be encoded before hashing").
    #[cfg(feature = "deflate")]
    let config = config.deflate(wavesock::DeflateConfig::default().compression_threshold(0));
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
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9001".into());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = TcpListener::bind(&addr).await?;
        eprintln!("echo_server listening on {}", listener.local_addr()?);
        loop {
            let (tcp, _) = listener.accept().await?;
            tokio::spawn(async move {
                if let Err(e) = serve(tcp).await {
                    if std::env::var_os("ECHO_VERBOSE").is_some() {
                        eprintln!("connection ended: {e}");
                    }
                }
            });
        }
    })
}
