//! `--metrics ADDR` for the examples: wavesock's metrics (feature
//! `metrics`) served at `http://ADDR/metrics` in Prometheus' text format,
//! by `metrics-exporter-prometheus`.

use std::net::SocketAddr;

/// Serves the metrics on `addr`; the recorder is installed first, so call
/// it before the first connection. An error without the `metrics` feature.
pub fn serve(addr: &str) -> std::io::Result<()> {
    let addr: SocketAddr = addr
        .parse()
        .map_err(|e| bad(&format!("--metrics {addr}: {e}")))?;
    #[cfg(feature = "metrics")]
    {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
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
