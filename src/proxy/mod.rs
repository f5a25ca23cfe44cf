//! Client connections through a proxy: HTTP `CONNECT` or SOCKS5.
//!
//! Set [`Config::proxy`](crate::Config::proxy) to a [`Proxy`]; the client
//! entry points ([`connect_async`](crate::connect_async) and its variants)
//! then open a tunnel to the server through the proxy and run TLS (for
//! `wss://`) and the WebSocket handshake inside it. Both `ws://` and `wss://`
//! go through a tunnel: an HTTP proxy is asked to `CONNECT`, never to forward
//! a plain request, because it would strip the `Upgrade` headers. (Some
//! corporate proxies allow `CONNECT` only to port 443, so `ws://` on port 80
//! may be refused with a 403 where `wss://` goes through.)
//!
//! ```no_run
//! use wavesock::Config;
//! use wavesock::proxy::Proxy;
//!
//! # async fn run() -> wavesock::Result<()> {
//! let config = Config::default().proxy(Proxy::http("http://user:secret@proxy.corp:3128"));
//! let (ws, _) = wavesock::connect_async_with_config("ws://example.com/chat", config).await?;
//!
//! // Or follow HTTPS_PROXY / HTTP_PROXY / ALL_PROXY / NO_PROXY (HTTP_PROXY
//! // in upper case only outside CGI, where a request header sets it):
//! let config = Config::default().proxy(Proxy::from_env());
//! # Ok(()) }
//! ```
//!
//! The proxy protocols are written here in a sans-IO style (requests built
//! and answers parsed over byte slices); the async driver only moves bytes,
//! reading no more than each answer's cap, so nothing of the tunnel is
//! consumed.

pub(crate) mod config;
mod env;
pub(crate) mod http;
pub(crate) mod socks5;
pub(crate) mod tunnel;

pub use config::Proxy;
