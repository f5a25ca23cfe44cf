//! The client suites, one binary: `connect_async` and its options, and
//! HTTP CONNECT and SOCKS5 proxies (with `wss://` through them under a TLS
//! feature).

#[path = "../support/mod.rs"]
mod support;

mod client;
mod proxy;
