//! The one timeout wrapper: the connect timeout, the client's and the
//! server's handshake timeouts all run their futures through [`within`].

use std::time::Duration;

use tokio::time::Instant;

/// The instant `timeout` from now; `None` for no timeout, or one too far
/// off to represent (which never fires, as with `tokio::time::timeout`).
pub(crate) fn after(timeout: Option<Duration>) -> Option<Instant> {
    timeout.and_then(|t| Instant::now().checked_add(t))
}

/// Runs `fut` until `deadline`; `None` when the deadline passed first.
/// Callers map `None` to their own timeout error.
pub(crate) async fn within<F: Future>(deadline: Option<Instant>, fut: F) -> Option<F::Output> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, fut).await.ok(),
        None => Some(fut.await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_deadline_cuts_slow_futures_only() {
        let slow = tokio::time::sleep(Duration::from_secs(5));
        assert_eq!(
            within(after(Some(Duration::from_secs(1))), slow).await,
            None
        );
        let quick = async { 7 };
        assert_eq!(
            within(after(Some(Duration::from_secs(1))), quick).await,
            Some(7)
        );
        let slow = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            8
        };
        assert_eq!(within(after(None), slow).await, Some(8));
        assert_eq!(after(Some(Duration::MAX)), None);
    }
}
