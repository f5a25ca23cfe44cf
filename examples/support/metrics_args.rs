//! `--metrics ADDR` for the examples: wavesock's metrics (feature
//! `metrics`) served at `http://ADDR/metrics` in Prometheus' text format,
//! by `metrics-exporter-prometheus`.

use std::net::SocketAddr;

/// Serves the metrics on `addr`; the recorder is installed first, so call
/// it before the first connection. Called inside a Tokio runtime, the
/// endpoint is a task on it (outside one, the exporter starts a thread of
/// its own). An error without the `metrics` feature.
pub fn serve(addr: &str) -> std::io::Result<()> {
    let addr: SocketAddr = addr
        .parse()
        .map_err(|e| bad(&format!("--metrics {addr}: {e}")))?;
    #[cfg(feature = "metrics")]
    {
        use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
        // Histograms with buckets rather than the exporter's default
        // summaries, so that quantiles sum across processes
        // (`histogram_quantile` over `_bucket`, as the dashboard does).
        let seconds = [
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            2.5, 5.0, 10.0,
        ];
        let counts = [
            1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0, 16384.0,
        ];
        PrometheusBuilder::new()
            .with_http_listener(addr)
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &seconds)
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full("wavesock_hub_turn_connections".into()),
                    &counts,
                )
            })
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full("wavesock_hub_turn_deliveries".into()),
                    &counts,
                )
            })
            .map_err(std::io::Error::other)?
            .install()
            .map_err(std::io::Error::other)?;
        wavesock::meter::describe();
        eprintln!("metrics on http://{addr}/metrics");
        Ok(())
    }
    #[cfg(not(feature = "metrics"))]
    {
        let _ = addr;
        Err(bad("--metrics needs a build with --features metrics"))
    }
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_string())
}
