//! The protocol suites, one binary: frames on the wire, handshakes, the
//! Stream and its split halves, closes, permessage-deflate, the hyper,
//! axum and HTTP/2 upgrades, misbehaving transports and interleavings,
//! settings, the examples, and the fuzz targets' properties and regressions.
//! One module a suite: `cargo test --test protocol stream::` runs one.

#[path = "../support/mod.rs"]
mod support;
// The fuzz targets' properties, written once for the fuzzer and these tests.
#[path = "../../fuzz/src/lib.rs"]
mod props;

mod accepting;
mod close;
mod deflate;
mod examples;
mod faults;
mod fuzz_props;
mod fuzz_regressions;
mod handles;
mod handshake;
mod http2;
mod interleavings;
mod metrics;
mod migration;
mod no_time_driver;
mod regressions;
mod scripted;
mod settings;
mod soak;
mod stream;
mod stream_edges;
mod streaming;
mod tracing;
mod whole_read;
mod wire;
mod with_axum;
mod with_hyper;
