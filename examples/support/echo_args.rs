//! The command line both echo examples take:
//! `ADDR [--deflate POLICY] [--readiness MODE] [--metrics ADDR]`
//! (`--readiness`, `owned` or `tokio`, is the hub's; `--metrics` needs the
//! `metrics` feature).

use wavesock::Config;

/// What the command line asked for.
pub struct Args {
    /// The address to listen on.
    pub addr: String,
    /// A 64 MiB message limit and, in a build with the `deflate` feature,
    /// permessage-deflate under the policy `--deflate` names (`takeover`
    /// when absent).
    pub config: Config,
    /// `--readiness`, as given.
    pub readiness: Option<String>,
    /// `--metrics`: where to serve the metrics.
    pub metrics: Option<String>,
}

/// Parses the command line.
pub fn parse() -> std::io::Result<Args> {
    let mut addr = None;
    let mut policy = None;
    let mut readiness = None;
    let mut metrics = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--deflate" => {
                policy = Some(args.next().ok_or_else(|| bad("--deflate needs a policy"))?)
            }
            "--readiness" => {
                readiness = Some(args.next().ok_or_else(|| bad("--readiness needs a mode"))?)
            }
            "--metrics" => {
                metrics = Some(
                    args.next()
                        .ok_or_else(|| bad("--metrics needs an address"))?,
                )
            }
            _ if addr.is_none() && !arg.starts_with('-') => addr = Some(arg),
            _ => {
                return Err(bad(&format!(
                    "unexpected argument {arg:?}; usage: ADDR [--deflate POLICY] [--readiness MODE] [--metrics ADDR]"
                )));
            }
        }
    }
    let config = Config::default()
        .max_frame_size(64 << 20)
        .max_message_size(64 << 20);
    // Threshold 0: every message is echoed compressed. Short messages sent
    // uncompressed are valid (RFC 7692 §6), but kosoku 0.1.0 fails its
    // 12.x.1 / 13.x.1 cases on them ("Strings must be encoded before hashing").
    #[cfg(feature = "deflate")]
    let config = {
        let policy: wavesock::DeflatePolicy = policy
            .as_deref()
            .unwrap_or("takeover")
            .parse()
            .map_err(std::io::Error::other)?;
        config.deflate(
            wavesock::DeflateConfig::default()
                .compression_threshold(0)
                .policy(policy),
        )
    };
    #[cfg(not(feature = "deflate"))]
    if policy.is_some() {
        return Err(bad("--deflate needs a build with --features deflate"));
    }
    Ok(Args {
        addr: addr.unwrap_or_else(|| "127.0.0.1:9001".into()),
        config,
        readiness,
        metrics,
    })
}

pub fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_string())
}
