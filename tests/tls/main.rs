//! The TLS suites, one binary, built only with a TLS feature: each stack
//! (rustls with either provider, native-tls, both), trust stores and the
//! platform verifier, and WebSockets over HTTP/2 on TLS.

#[path = "../support/mod.rs"]
mod support;

mod http2_tls;
mod tls;
mod tls_stacks;
