//! WebSockets over HTTP/2 (RFC 8441) to a browser: an HTTPS server that
//! speaks HTTP/2 and HTTP/1.1 (chosen by ALPN) on one port, with an echo
//! endpoint that accepts both HTTP/1.1 upgrades and HTTP/2 extended CONNECT
//! streams, and a page that runs an echo test from the browser.
//!
//! ```text
//! cargo run --example h2_server -- 127.0.0.1:9443
//! cargo run --features deflate --example h2_server -- 127.0.0.1:9443
//! cargo run --example h2_server -- 0.0.0.0:443 --cert cert.pem --key key.pem
//! ```
//!
//! - `GET /`: the page; its button echoes text and binary messages of 0 B
//!   to 1 MiB on `/echo` and `/echo-plain`
//! - `/echo`: the echo WebSocket, with permessage-deflate when built with
//!   `--features deflate`
//! - `/echo-plain`: the same, never compressed
//! - `/echo-shared`, `/echo-dedicated`: the same as `/echo`, holding
//!   compression memory under the shared and the `dedicated:4k` policy
//! - `/stats`: JSON counters: TLS connections, their ALPN protocols, and
//!   the WebSockets accepted over HTTP/2 and over HTTP/1.1
//!
//! Chromium sends a WebSocket over HTTP/2 only on an HTTP/2 connection it
//! already has to the origin, and only if the server announced
//! `SETTINGS_ENABLE_CONNECT_PROTOCOL` on it; otherwise it opens an HTTP/1.1
//! connection for the WebSocket. So the page's WebSockets share the page's
//! connection, as the counters at `/stats` show. With `--cert` and `--key`
//! (PEM files: the certificate chain, and its key in PKCS #8, PKCS #1 or
//! SEC1) it serves that certificate. Otherwise the certificate is
//! self-signed and generated at start (for `localhost` and `127.0.0.1`), so
//! browsers must be told to trust it: for Chromium the server prints an
//! `--ignore-certificate-errors-spki-list` flag.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rcgen::PublicKeyData;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use wavesock::Config;
use wavesock::upgrade::{self, Body, UpgradeFut};

/// What `/stats` reports, counted since start.
struct Stats {
    tls_connections: AtomicU64,
    alpn_h2: AtomicU64,
    /// `http/1.1`, or no ALPN at all, which means HTTP/1.1 too.
    alpn_http1: AtomicU64,
    websockets_http2: AtomicU64,
    websockets_http1: AtomicU64,
}

static STATS: Stats = Stats {
    tls_connections: AtomicU64::new(0),
    alpn_h2: AtomicU64::new(0),
    alpn_http1: AtomicU64::new(0),
    websockets_http2: AtomicU64::new(0),
    websockets_http1: AtomicU64::new(0),
};

fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn stats_json() -> String {
    let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
    format!(
        "{{\"tls_connections\":{},\"alpn_h2\":{},\"alpn_http1\":{},\
         \"websockets_http2\":{},\"websockets_http1\":{}}}\n",
        n(&STATS.tls_connections),
        n(&STATS.alpn_h2),
        n(&STATS.alpn_http1),
        n(&STATS.websockets_http2),
        n(&STATS.websockets_http1),
    )
}

fn plain_config() -> Config {
    // The page sends messages of up to 1 MiB; refuse anything far larger.
    Config::default().max_message_size(4 << 20)
}

/// permessage-deflate under `policy` (`takeover`, `shared`,
/// `dedicated:4k`), in a build with the `deflate` feature.
fn deflate_config(policy: &str) -> Config {
    let config = plain_config();
    // Compression needs the `deflate` feature: without it the config is refused.
    #[cfg(feature = "deflate")]
    let config = config.deflate(
        wavesock::DeflateConfig::default().policy(policy.parse().expect("a known policy")),
    );
    #[cfg(not(feature = "deflate"))]
    let _ = policy;
    config
}

async fn echo(websocket: UpgradeFut) -> wavesock::Result<()> {
    let mut ws = websocket.await?;
    while let Some(msg) = ws.next().await {
        let msg = msg?;
        if msg.is_data() {
            ws.send(msg).await?;
        }
    }
    Ok(())
}

/// Accepts the WebSocket `req` asks for, over HTTP/1.1 or HTTP/2 alike, and
/// echoes on it; answers anything else with the error response (400, 405,
/// 426) the refusal carries.
fn websocket(req: &mut Request<Incoming>, config: Config) -> Response<Body> {
    match upgrade::upgrade_with_config(req, config) {
        Ok((response, websocket)) => {
            count(if websocket.is_http2() {
                &STATS.websockets_http2
            } else {
                &STATS.websockets_http1
            });
            // The WebSocket exists once hyper has sent `response`, so the
            // echo runs apart from this handler.
            tokio::spawn(async move {
                if let Err(e) = echo(websocket).await {
                    eprintln!("WebSocket ended: {e}");
                }
            });
            response
        }
        Err(refusal) => refusal.into_response(),
    }
}

fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Body>,
) -> Response<Body> {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

async fn route(mut req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_owned();
    Ok(match path.as_str() {
        "/" => respond(StatusCode::OK, "text/html; charset=utf-8", PAGE),
        "/echo" => websocket(&mut req, deflate_config("takeover")),
        "/echo-shared" => websocket(&mut req, deflate_config("shared")),
        "/echo-dedicated" => websocket(&mut req, deflate_config("dedicated:4k")),
        "/echo-plain" => websocket(&mut req, plain_config()),
        "/stats" => respond(StatusCode::OK, "application/json", stats_json()),
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    })
}

/// The TLS configuration for a certificate chain and key from PEM files.
fn tls_config_from_pem(
    cert: &str,
    key: &str,
) -> Result<rustls::ServerConfig, Box<dyn std::error::Error>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let chain = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key)?;
    let provider = Arc::new(ring_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The TLS configuration with a fresh self-signed certificate, and the
/// base64 sha256 of the certificate's public key (what Chromium's
/// `--ignore-certificate-errors-spki-list` takes).
fn tls_config() -> Result<(rustls::ServerConfig, String), Box<dyn std::error::Error>> {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(["localhost".to_owned(), "127.0.0.1".to_owned()])?;
    // The ring provider's own SHA-256, rather than one more hash crate.
    let sha256 = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .expect("a TLS 1.3 suite")
        .common
        .hash_provider
        .hash(&signing_key.subject_public_key_info());
    let spki = base64::engine::general_purpose::STANDARD.encode(sha256.as_ref());

    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der()));
    let provider = Arc::new(ring_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)?;
    // HTTP/2 first: rustls picks the first of these the client also offers.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((config, spki))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args
        .first()
        .filter(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:9443".into());
    let option = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let tls = match (option("--cert"), option("--key")) {
        (Some(cert), Some(key)) => {
            eprintln!("certificate: {cert}, key: {key}");
            tls_config_from_pem(cert, key)?
        }
        (None, None) => {
            let (tls, spki) = tls_config()?;
            eprintln!(
                "certificate: self-signed for localhost and 127.0.0.1, generated at start; \
                 Chromium trusts it with --ignore-certificate-errors-spki-list={spki}"
            );
            tls
        }
        _ => return Err("--cert and --key go together".into()),
    };
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let listener = TcpListener::bind(&addr).await?;
    eprintln!(
        "permessage-deflate on /echo: {}",
        if cfg!(feature = "deflate") {
            "on"
        } else {
            "off (build with --features deflate)"
        }
    );
    eprintln!("h2_server on https://{}/", listener.local_addr()?);

    loop {
        let (tcp, _) = listener.accept().await?;
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(tls) => tls,
                Err(e) => return eprintln!("TLS handshake failed: {e}"),
            };
            count(&STATS.tls_connections);
            count(match tls.get_ref().1.alpn_protocol() {
                Some(b"h2") => &STATS.alpn_h2,
                _ => &STATS.alpn_http1,
            });
            // HTTP/2 or HTTP/1.1, whichever the client speaks. Unless HTTP/2
            // announces SETTINGS_ENABLE_CONNECT_PROTOCOL, browsers open an
            // HTTP/1.1 connection for each WebSocket; `with_upgrades` lets
            // such a connection be handed over once upgraded.
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder.http2().enable_connect_protocol();
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service_fn(route));
            if let Err(e) = conn.await {
                eprintln!("connection error: {e}");
            }
        });
    }
}

const PAGE: &str = r##"<!doctype html>
<html lang="en">
<meta charset="utf-8">
<title>wavesock: WebSockets over HTTP/2</title>
<link rel="icon" href="data:,">
<h1>WebSockets over HTTP/2</h1>
<p>This page came over <b id="protocol">?</b>. The echo test opens a WebSocket
on <code>/echo</code> (permessage-deflate if the server has it) and one on
<code>/echo-plain</code>, and sends text and binary messages of 0 B to 1 MiB,
each of which must come back unchanged. Whether they ran over HTTP/2 the
server counts at <a href="/stats">/stats</a>.</p>
<button id="run">Run the echo test</button>
<pre id="log"></pre>
<script>
'use strict';

// Around the frame header's length boundaries: 7-bit, 16-bit, 64-bit.
const SIZES = [0, 1, 125, 126, 65535, 65536, 1 << 20];

// Text of exactly `n` UTF-8 bytes, mostly not ASCII.
function text(n) {
  return 'aé€😀'.repeat(Math.floor(n / 10)) + 'a'.repeat(n % 10);
}

// `n` bytes without short repetitions (xorshift), so every byte counts.
function bytes(n) {
  const out = new Uint8Array(n);
  let x = 0x2545f491 ^ n;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

function sameBytes(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) return false;
  }
  return true;
}

function open(path) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`wss://${location.host}${path}`);
    ws.binaryType = 'arraybuffer';
    ws.onopen = () => resolve(ws);
    ws.onerror = () => reject(new Error(`${ws.url}: the WebSocket failed to open`));
  });
}

// Sends `data`; resolves to the next message.
function roundTrip(ws, data) {
  return new Promise((resolve, reject) => {
    ws.onmessage = (e) => resolve(e.data);
    ws.onclose = (e) => reject(new Error(`${ws.url}: closed (${e.code}) before the echo`));
    ws.send(data);
  });
}

function close(ws) {
  return new Promise((resolve) => {
    ws.onclose = (e) => resolve({ code: e.code, wasClean: e.wasClean });
    ws.close(1000);
  });
}

// Echoes every size as text and as binary on one WebSocket; reports each
// message and how the WebSocket closed.
async function echoTest(path) {
  const ws = await open(path);
  const report = { url: ws.url, extensions: ws.extensions, checks: [] };
  for (const n of SIZES) {
    const sentText = text(n);
    const echoedText = await roundTrip(ws, sentText);
    report.checks.push({
      type: 'text',
      bytes: new TextEncoder().encode(sentText).length,
      ok: echoedText === sentText,
    });
    const sentBytes = bytes(n);
    const echoedBytes = await roundTrip(ws, sentBytes);
    report.checks.push({
      type: 'binary',
      bytes: sentBytes.length,
      ok: echoedBytes instanceof ArrayBuffer && sameBytes(new Uint8Array(echoedBytes), sentBytes),
    });
  }
  report.close = await close(ws);
  return report;
}

document.getElementById('protocol').textContent =
  performance.getEntriesByType('navigation')[0]?.nextHopProtocol || 'an unknown protocol';

document.getElementById('run').onclick = async () => {
  const log = document.getElementById('log');
  log.textContent = '';
  for (const path of ['/echo', '/echo-plain']) {
    try {
      const r = await echoTest(path);
      const failed = r.checks.filter((c) => !c.ok).map((c) => `${c.type} ${c.bytes} B`);
      log.textContent += `${r.url}: extensions "${r.extensions}", ` +
        `${r.checks.length - failed.length}/${r.checks.length} echoes intact` +
        (failed.length ? ` (wrong: ${failed.join(', ')})` : '') + '\n';
    } catch (e) {
      log.textContent += `${e.message}\n`;
    }
  }
  const stats = await (await fetch('/stats')).json();
  log.textContent += `server: ${JSON.stringify(stats)}\n`;
};
</script>
"##;

/// *ring*'s rustls provider. rustls 0.23.48 deprecates this constructor
/// (*ring* has no post-quantum key exchange) and has no other for *ring*
/// within 0.23; a server that wants those key exchanges uses aws-lc-rs'
/// provider instead.
#[allow(deprecated)]
fn ring_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}
