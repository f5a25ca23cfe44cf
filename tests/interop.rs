//! Interop with a browser-compatible peer, compression on: the Node `ws`
//! package (tests/interop/peer.mjs), as server and as client, messages from
//! 0 bytes to 16 MiB, with several permessage-deflate parameter sets and
//! under every `DeflatePolicy`, whose answer ws must see as ours says.
//!
//! Needs Node and `npm install` in tests/interop; run with
//! `tests/interop/run.sh` (it installs what it needs), or:
//!
//! ```text
//! (cd tests/interop && npm install)
//! cargo test --release --features deflate --test interop -- --ignored --test-threads=1
//! ```

use std::process::Stdio;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};
use wavesock::{Config, DeflateConfig, DeflatePolicy, Message};

const SIZES: [usize; 8] = [0, 1, 100, 1023, 1024, 65_537, 1 << 20, 16 << 20];

/// ws's `perMessageDeflate` options (beyond `threshold: 0`).
const WS_OPTIONS: [&str; 4] = [
    "{}",
    r#"{"serverNoContextTakeover": true, "clientNoContextTakeover": true}"#,
    r#"{"serverMaxWindowBits": 9, "clientMaxWindowBits": 10}"#,
    r#"{"serverMaxWindowBits": 15, "clientMaxWindowBits": 15, "concurrencyLimit": 1}"#,
];

fn ours() -> Vec<DeflateConfig> {
    vec![
        DeflateConfig::default().compression_threshold(0),
        DeflateConfig::default()
            .compression_threshold(0)
            .server_no_context_takeover(true)
            .client_no_context_takeover(true),
        DeflateConfig::default()
            .compression_threshold(0)
            .server_max_window_bits(Some(8))
            .client_max_window_bits(Some(9))
            .level(9),
        DeflateConfig::default()
            .compression_threshold(0)
            .policy(DeflatePolicy::Shared),
        DeflateConfig::default()
            .compression_threshold(0)
            .policy(DeflatePolicy::Dedicated(4 << 10)),
    ]
}

/// Checks that what ws agreed (its `extensions` line) is what our
/// server's policy answers.
fn check_answer(deflate: &DeflateConfig, agreed: &str) {
    let bits = |name: &str| {
        agreed
            .split(';')
            .find_map(|p| p.trim().strip_prefix(name)?.strip_prefix('='))
            .map(|v| v.trim().parse::<u8>().unwrap())
    };
    match deflate.policy {
        DeflatePolicy::Shared => {
            assert!(agreed.contains("server_no_context_takeover"), "{agreed}");
            assert!(agreed.contains("client_no_context_takeover"), "{agreed}");
        }
        DeflatePolicy::Dedicated(_) => {
            let (s, c) = deflate.policy.windows().unwrap();
            assert!(
                bits("server_max_window_bits").is_some_and(|b| b <= s),
                "{agreed}"
            );
            // ws offers client_max_window_bits: the client is limited too,
            // unless it resets its context anyway.
            assert!(
                bits("client_max_window_bits").is_some_and(|b| b <= c)
                    || agreed.contains("client_no_context_takeover"),
                "{agreed}"
            );
        }
        _ => {}
    }
}

fn config(deflate: DeflateConfig) -> Config {
    // An incompressible 16 MiB message is a little larger compressed.
    Config::default()
        .max_frame_size(64 << 20)
        .max_message_size(64 << 20)
        .deflate(deflate)
}

fn node(args: &[&str]) -> Child {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/peer.mjs");
    let node = std::env::var("NODE").unwrap_or_else(|_| "node".into());
    Command::new(node)
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs (see tests/interop/run.sh)")
}

fn xorshift(seed: u32) -> impl FnMut() -> u32 {
    let mut x = seed.max(1);
    move || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x
    }
}

fn text(n: usize, seed: u32) -> String {
    let words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "κόσμε",
        "epsilon",
        "{\"id\":",
        "},",
    ];
    let mut next = xorshift(seed + 1);
    let mut s = String::with_capacity(n + 16);
    while s.len() < n {
        s.push_str(words[next() as usize % words.len()]);
        s.push(' ');
    }
    while s.len() > n {
        s.pop();
    }
    while s.len() < n {
        s.push('x');
    }
    s
}

fn binary(n: usize, seed: u32) -> Vec<u8> {
    let mut next = xorshift(seed + 7);
    (0..n)
        .map(|i| {
            if i < n / 2 {
                next() as u8
            } else {
                (i % 251) as u8
            }
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs Node and tests/interop/node_modules: run tests/interop/run.sh"]
async fn wavesock_client_against_ws_server() {
    for ws_options in WS_OPTIONS {
        for deflate in ours() {
            let mut server = node(&["server", ws_options]);
            let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
            let port = lines
                .next_line()
                .await
                .unwrap()
                .expect("node prints its port");
            let port = port.strip_prefix("port ").expect("port N");
            let url = format!("ws://127.0.0.1:{port}/");
            let connected = wavesock::connect_async_with_config(url, config(deflate.clone())).await;
            // ws refuses (HTTP 400, not a polite decline) an offer asking
            // for a smaller server window than its configured one.
            let ws_bits = [9, 15]
                .into_iter()
                .find(|b| ws_options.contains(&format!("\"serverMaxWindowBits\": {b}")));
            // A dedicated policy asks for its own window size.
            let asked = [
                deflate.server_max_window_bits,
                deflate.policy.windows().map(|(s, _)| s),
            ]
            .into_iter()
            .flatten()
            .min();
            if ws_bits.is_some_and(|b| asked.is_some_and(|ours| ours < b)) {
                let e = connected.expect_err("ws refuses");
                assert!(e.to_string().contains("400"), "{e}");
                server.kill().await.unwrap();
                continue;
            }
            let (mut ws, resp) = match connected {
                Ok(c) => c,
                Err(e) => panic!("{ws_options} / {deflate:?}: {e}"),
            };
            let agreed = resp.headers()["sec-websocket-extensions"]
                .to_str()
                .unwrap()
                .to_owned();
            assert!(agreed.starts_with("permessage-deflate"), "{agreed}");
            for (i, n) in SIZES.into_iter().enumerate() {
                for msg in [
                    Message::text(text(n, i as u32)),
                    Message::binary(binary(n, i as u32)),
                ] {
                    ws.send(msg.clone()).await.unwrap();
                    let back = tokio::time::timeout(Duration::from_secs(30), ws.next())
                        .await
                        .expect("echo in time")
                        .unwrap()
                        .unwrap();
                    assert!(
                        back == msg,
                        "{n} bytes with {ws_options} / {deflate:?} ({agreed})"
                    );
                }
            }
            ws.close(None).await.unwrap();
            server.kill().await.unwrap();
        }
    }
}

#[tokio::test]
#[ignore = "needs Node and tests/interop/node_modules: run tests/interop/run.sh"]
async fn ws_client_against_wavesock_server() {
    for ws_options in WS_OPTIONS {
        for deflate in ours() {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("ws://{}/", listener.local_addr().unwrap());
            let cfg = config(deflate.clone());
            let echo = tokio::spawn(async move {
                let (tcp, _) = listener.accept().await.unwrap();
                let mut ws = wavesock::accept_async_with_config(tcp, cfg).await.unwrap();
                while let Some(msg) = ws.next().await {
                    let msg = msg.unwrap();
                    if msg.is_data() {
                        ws.send(msg).await.unwrap();
                    }
                }
            });
            let client = node(&["client", &url, ws_options]);
            let out = tokio::time::timeout(Duration::from_secs(120), client.wait_with_output())
                .await
                .expect("node finishes in time")
                .unwrap();
            assert!(
                out.status.success(),
                "ws client failed with {ws_options} / {deflate:?}"
            );
            // `ok: N messages echoed, extensions: ...`
            let said = String::from_utf8_lossy(&out.stdout);
            let agreed = said
                .split("extensions: ")
                .nth(1)
                .unwrap_or_else(|| panic!("ws said {said:?}"));
            check_answer(&deflate, agreed.trim());
            echo.await.unwrap();
        }
    }
}
