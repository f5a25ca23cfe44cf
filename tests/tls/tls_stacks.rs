//! `connect_async("wss://…")` with no connector, trusting a CA the way a
//! user's system would: `SSL_CERT_FILE`, which OpenSSL (native-tls),
//! rustls-native-certs and rustls-platform-verifier read on Linux. Run
//! under each TLS feature set by `.ci/run`.
//!
//! The variable must be set before anything reads it, and setting one in a
//! running test process is not sound, so each test makes its certificates,
//! then runs this test binary again with the variable set, asking for one
//! of the `#[ignore]`d tests below that do the connecting.
#![cfg(any(feature = "rustls", feature = "native-tls"))]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tokio::net::TcpListener;
// The servers are tokio-rustls (dev-dependencies) whatever the client's
// stack.
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use wavesock::{ConnectError, Error, MaybeTlsStream};

use crate::support::child;
#[cfg(feature = "native-tls")]
use crate::support::services;

/// Where the child finds the certificates.
const DIR: &str = "WAVESOCK_TLS_STACKS_DIR";

/// The server certificates, each signed as its name says.
const LEAVES: [&str; 4] = ["good", "expired", "wrong-ca", "wrong-name"];

fn ca(name: &str) -> (CertificateParams, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, format!("wavesock test CA {name}"));
    (params, KeyPair::generate().unwrap())
}

/// Makes a CA (written to `ca.pem`, the file to trust), another CA nobody
/// trusts, and the server certificates of [`LEAVES`], in a new directory.
fn make_certificates(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wavesock-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (params, key) = ca("trusted");
    std::fs::write(dir.join("ca.pem"), params.self_signed(&key).unwrap().pem()).unwrap();
    let trusted = Issuer::new(params, key);
    // A system store with nothing in it (a slim container's).
    std::fs::write(dir.join("empty.pem"), "").unwrap();
    let (params, key) = ca("untrusted");
    let untrusted = Issuer::new(params, key);
    for leaf in LEAVES {
        let name = if leaf == "wrong-name" {
            "elsewhere.example"
        } else {
            "localhost"
        };
        let mut params = CertificateParams::new(vec![name.to_owned()]).unwrap();
        if leaf == "expired" {
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let issuer = if leaf == "wrong-ca" {
            &untrusted
        } else {
            &trusted
        };
        let cert = params.signed_by(&key, issuer).unwrap();
        std::fs::write(dir.join(format!("{leaf}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{leaf}.key")), key.serialize_pem()).unwrap();
    }
    dir
}

/// In a child test: the directory of the certificates its parent made.
fn child_dir() -> PathBuf {
    PathBuf::from(std::env::var_os(DIR).expect("run by the parent test"))
}

/// Runs the ignored test `child` (its path within this module) in a new
/// process that trusts only the test CA, through `SSL_CERT_FILE`.
fn run_child(child: &str) {
    run_child_trusting(child, "ca.pem");
}

/// Runs the ignored test `child` in a new process whose system store is
/// `store`, one of the files [`make_certificates`] writes.
/// The certificates stay for a look when the child fails.
fn run_child_trusting(child: &str, store: &str) {
    let dir = make_certificates(child);
    child::run_test(&child::test_path(module_path!(), child), |command| {
        command
            .env("SSL_CERT_FILE", dir.join(store))
            .env_remove("SSL_CERT_DIR")
            .env(DIR, &dir);
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// A wavesock echo server behind TLS with the certificate `leaf`.
async fn server(dir: &Path, leaf: &str) -> u16 {
    let chain = vec![CertificateDer::from_pem_file(dir.join(format!("{leaf}.pem"))).unwrap()];
    let key = PrivateKeyDer::from_pem_file(dir.join(format!("{leaf}.key"))).unwrap();
    let provider = crate::support::proxy::tls::ring();
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut ws) = wavesock::accept_async(tls).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_data() && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// The error and everything it wraps, in one line, lowercased.
#[cfg(any(
    feature = "native-tls",
    all(
        any(feature = "rustls-native-roots", feature = "rustls-platform-verifier"),
        any(feature = "ring", feature = "aws-lc-rs")
    )
))]
fn chain(e: &Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text.to_lowercase()
}

/// The stack the features make `connect_async` use: native-tls first.
#[cfg(any(
    feature = "native-tls",
    all(
        any(feature = "rustls-native-roots", feature = "rustls-platform-verifier"),
        any(feature = "ring", feature = "aws-lc-rs")
    )
))]
const EXPECTED_STACK: &str = if cfg!(feature = "native-tls") {
    "native-tls"
} else {
    "rustls"
};

/// Which stack a connection used, as the stream says.
fn stack<S>(stream: &MaybeTlsStream<S>) -> &'static str {
    match stream {
        MaybeTlsStream::Plain(_) => "plain",
        #[cfg(feature = "rustls")]
        MaybeTlsStream::Rustls(_) => "rustls",
        #[cfg(feature = "native-tls")]
        MaybeTlsStream::NativeTls(_) => "native-tls",
        _ => "other",
    }
}

#[cfg(any(
    feature = "native-tls",
    all(
        any(feature = "rustls-native-roots", feature = "rustls-platform-verifier"),
        any(feature = "ring", feature = "aws-lc-rs")
    )
))]
#[test]
fn wss_trusts_the_systems_store_and_names_each_refusal() {
    run_child("child_connects_through_the_systems_store");
}

#[cfg(any(
    feature = "native-tls",
    all(
        any(feature = "rustls-native-roots", feature = "rustls-platform-verifier"),
        any(feature = "ring", feature = "aws-lc-rs")
    )
))]
#[tokio::test]
#[ignore = "run by wss_trusts_the_systems_store_and_names_each_refusal"]
async fn child_connects_through_the_systems_store() {
    let dir = child_dir();
    let port = server(&dir, "good").await;
    let (mut ws, response) = wavesock::connect_async(format!("wss://localhost:{port}/"))
        .await
        .unwrap();
    assert_eq!(response.status(), 101);
    assert_eq!(stack(ws.get_ref()), EXPECTED_STACK);
    let msg = wavesock::Message::text("trusted");
    ws.send(msg.clone()).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), msg);

    // Each refusal says what is wrong with the certificate.
    for (leaf, says) in [
        ("expired", "expired"),
        ("wrong-ca", "issuer"),
        ("wrong-name", "name"),
    ] {
        let port = server(&dir, leaf).await;
        let err = wavesock::connect_async(format!("wss://localhost:{port}/"))
            .await
            .err()
            .unwrap_or_else(|| panic!("{leaf}: connected"));
        match &err {
            #[cfg(feature = "native-tls")]
            Error::Connect(ConnectError::NativeTls(_)) => {}
            #[cfg(not(feature = "native-tls"))]
            Error::Connect(ConnectError::Certificate(_)) => {}
            other => panic!("{leaf}: {other:?}"),
        }
        let text = chain(&err);
        assert!(
            text.contains(says),
            "{leaf}: {text:?} does not say {says:?}"
        );
    }
}

#[cfg(all(
    feature = "rustls-platform-verifier",
    not(feature = "native-tls"),
    any(feature = "ring", feature = "aws-lc-rs")
))]
#[test]
fn an_empty_system_store_leaves_the_platform_verifier_to_the_feature_roots() {
    run_child_trusting("child_with_an_empty_system_store", "empty.pem");
}

#[cfg(all(
    feature = "rustls-platform-verifier",
    not(feature = "native-tls"),
    any(feature = "ring", feature = "aws-lc-rs")
))]
#[tokio::test]
#[ignore = "run by an_empty_system_store_leaves_the_platform_verifier_to_the_feature_roots"]
async fn child_with_an_empty_system_store() {
    let dir = child_dir();
    let port = server(&dir, "good").await;
    let err = wavesock::connect_async(format!("wss://localhost:{port}/"))
        .await
        .expect_err("nothing trusts the test CA");
    let text = chain(&err);
    if cfg!(feature = "rustls-webpki-roots") {
        // Mozilla's roots checked it, and do not know its issuer.
        assert!(
            matches!(err, Error::Connect(ConnectError::Certificate(_))),
            "{err:?}"
        );
        assert!(text.contains("issuer"), "{text}");
    } else {
        assert!(
            matches!(err, Error::Connect(ConnectError::NoRootCertificates(_))),
            "{err:?}"
        );
        assert!(text.contains("platform verifier"), "{text}");
    }
}

/// Node (https and the `ws` package of tests/interop) serving `leaf`; the
/// port it listens on. `None`: the test skips (see `support/services.rs`).
#[cfg(feature = "native-tls")]
async fn node_server(dir: &Path, leaf: &str) -> Option<(tokio::process::Child, u16)> {
    use tokio::io::AsyncBufReadExt;
    let interop = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop");
    let found = services::on_path("node") && interop.join("node_modules/ws").exists();
    if !services::available(
        "Node.js and the ws package",
        found,
        "Node.js on the PATH and the ws package in tests/interop/node_modules, from its package.json",
    ) {
        return None;
    }
    let mut node = tokio::process::Command::new("node")
        .arg(interop.join("wss-echo.mjs"))
        .arg(dir.join(format!("{leaf}.pem")))
        .arg(dir.join(format!("{leaf}.key")))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node (Node.js) is needed for this test");
    let mut lines = tokio::io::BufReader::new(node.stdout.take().unwrap()).lines();
    let line = lines
        .next_line()
        .await
        .unwrap()
        .expect("node printed its port");
    let port = line.strip_prefix("listening ").unwrap().parse().unwrap();
    Some((node, port))
}

#[cfg(feature = "native-tls")]
#[test]
fn native_tls_talks_to_a_server_that_is_not_rust() {
    run_child("child_connects_to_node");
}

#[cfg(feature = "native-tls")]
#[tokio::test]
#[ignore = "run by native_tls_talks_to_a_server_that_is_not_rust"]
async fn child_connects_to_node() {
    let dir = child_dir();
    let Some((_node, port)) = node_server(&dir, "good").await else {
        return;
    };
    let (mut ws, _) = wavesock::connect_async(format!("wss://localhost:{port}/"))
        .await
        .unwrap();
    assert!(matches!(ws.get_ref(), MaybeTlsStream::NativeTls(_)));
    for msg in [
        wavesock::Message::text("from OpenSSL to Node"),
        // Larger than a TLS record.
        wavesock::Message::binary(vec![5u8; 100_000]),
    ] {
        ws.send(msg.clone()).await.unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap(), msg);
    }
    ws.close(None).await.unwrap();
    let Some((_node, port)) = node_server(&dir, "wrong-name").await else {
        return;
    };
    let err = wavesock::connect_async(format!("wss://localhost:{port}/"))
        .await
        .expect_err("a certificate for another name");
    assert!(chain(&err).contains("name"), "{err}");
}

/// A server as the guide's "Serving over TLS" writes it with
/// tokio-native-tls: identity from the PEM files, `accept_async` over the
/// TLS stream; a client trusting the test CA.
#[cfg(feature = "native-tls")]
#[tokio::test]
async fn accept_async_over_tokio_native_tls() {
    use wavesock::native_tls::{Certificate, Identity, TlsConnector};
    let dir = make_certificates("native-server");
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let identity = Identity::from_pkcs8(&read("good.pem"), &read("good.key")).unwrap();
    let acceptor = wavesock::tokio_native_tls::TlsAcceptor::from(
        wavesock::native_tls::TlsAcceptor::new(identity).unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let tls = acceptor.accept(tcp).await.unwrap();
        let mut ws = wavesock::accept_async(tls).await.unwrap();
        let msg = ws.next().await.unwrap().unwrap();
        ws.send(msg).await.unwrap();
        ws.close(None).await.unwrap();
    });
    let client = TlsConnector::builder()
        .add_root_certificate(Certificate::from_pem(&read("ca.pem")).unwrap())
        .build()
        .unwrap();
    let (mut ws, _) = wavesock::connect_async_tls_with_config(
        format!("wss://localhost:{port}/"),
        wavesock::Config::default(),
        Some(wavesock::Connector::NativeTls(client)),
    )
    .await
    .unwrap();
    let msg = wavesock::Message::text("served by OpenSSL");
    ws.send(msg.clone()).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), msg);
    server.await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The rustls crypto provider: what `tls::crypto_provider` chooses, and
/// that `connect_async` makes the same choice without a panic.
#[cfg(feature = "rustls")]
mod provider {
    use super::*;
    use wavesock::rustls::crypto::CryptoProvider;

    /// The provider the features choose, as rustls prints its key provider.
    fn key_provider(provider: &CryptoProvider) -> String {
        format!("{:?}", provider.key_provider)
    }

    #[test]
    fn with_no_provider_installed_the_features_choose() {
        run_child("provider::child_with_no_provider_installed");
    }

    #[tokio::test]
    #[ignore = "run by with_no_provider_installed_the_features_choose"]
    async fn child_with_no_provider_installed() {
        assert!(CryptoProvider::get_default().is_none());
        let chosen = wavesock::tls::crypto_provider();
        if cfg!(feature = "aws-lc-rs") {
            assert_eq!(key_provider(&chosen.unwrap()), "AwsLcRs");
        } else if cfg!(feature = "ring") {
            assert_eq!(key_provider(&chosen.unwrap()), "Ring");
        } else {
            let err = chosen.unwrap_err();
            assert!(matches!(
                err,
                Error::Connect(ConnectError::NoCryptoProvider)
            ));
            let text = err.to_string();
            assert!(
                text.contains("`ring`") && text.contains("`aws-lc-rs`"),
                "{text}"
            );
        }
        // No panic either way, and no provider installed behind the
        // application's back.
        if let Some(connected) = connect_through_rustls().await {
            assert_eq!(
                connected.is_ok(),
                cfg!(any(feature = "ring", feature = "aws-lc-rs")),
                "{:?}",
                connected.err()
            );
        }
        assert!(CryptoProvider::get_default().is_none());
    }

    /// `connect_async` to a server with the test CA's good certificate, when
    /// the features make that go through rustls and the system's store
    /// (`None` otherwise).
    async fn connect_through_rustls() -> Option<wavesock::Result<wavesock::ClientStream>> {
        if !cfg!(all(
            any(
                feature = "rustls-native-roots",
                feature = "rustls-platform-verifier"
            ),
            not(feature = "native-tls")
        )) {
            return None;
        }
        let dir = child_dir();
        let port = server(&dir, "good").await;
        let connected = wavesock::connect_async(format!("wss://localhost:{port}/")).await;
        Some(connected.map(|(ws, _)| ws))
    }

    #[test]
    fn an_installed_provider_comes_first() {
        run_child("provider::child_with_a_provider_installed");
    }

    #[tokio::test]
    #[ignore = "run by an_installed_provider_comes_first"]
    async fn child_with_a_provider_installed() {
        // *ring*, which the features would choose last (or not at all).
        let ring = Arc::unwrap_or_clone(crate::support::proxy::tls::ring());
        ring.install_default().unwrap();
        let installed = CryptoProvider::get_default().unwrap();
        let chosen = wavesock::tls::crypto_provider().unwrap();
        assert!(Arc::ptr_eq(installed, &chosen));
        if let Some(connected) = connect_through_rustls().await {
            assert_eq!(stack(connected.unwrap().get_ref()), "rustls");
        }
    }
}
