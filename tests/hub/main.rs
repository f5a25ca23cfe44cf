//! The hub's suites, one binary: its API, deliveries, driver, faults,
//! hostile peers, interleavings, topics (with a real Redis and Redis
//! Cluster where `redis-server` is installed), every engine side by side
//! on real sockets (`engines`), and the model-based harness (`model`).
//! One module a suite: `cargo test --test hub topics::` runs one.
//!
//! Some tests count the heap; each of those runs in a process of its own
//! (`support::child::alone`).

#[path = "../support/mod.rs"]
mod support;

#[global_allocator]
static GLOBAL: support::counting::Counting = support::counting::Counting;

/// `both_modes!(f)`: tests `f::owned` and `f::tokio` running `f` under
/// each readiness mode (`f` takes a `Readiness`; `Readiness` in scope).
macro_rules! both_modes {
    ($name:ident) => {
        mod $name {
            use super::*;
            #[tokio::test]
            async fn owned() {
                super::$name(Readiness::Owned).await
            }
            #[tokio::test]
            async fn tokio() {
                super::$name(Readiness::Tokio).await
            }
        }
    };
}

mod backpressure_close;
mod engines;
mod hub;
mod hub_api;
mod hub_deliveries;
mod hub_driver;
mod hub_faults;
mod hub_hostile;
mod hub_interleavings;
mod lifecycle;
mod model;
mod read_path;
mod read_path_pool;
mod read_writes;
mod soundness;
mod topic_burst;
mod topic_runs;
mod topics;
mod topics_cluster;
mod topics_interest;
mod topics_redis;
