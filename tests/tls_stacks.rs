//! `connect_async("wss://…")` with no connector, trusting a CA the way a
//! user's system would: `SSL_CERT_FILE`, which rustls-native-certs and
//! OpenSSL read on Linux. Run under each TLS feature set by `.ci/run`.
//!
//! The variable must be set before anything reads it, and setting one in a
//! running test process is not sound, so each test makes its certificates,
//! then runs this test binary again with the variable set, asking for one
//! of the `#[ignore]`d tests below that do the connecting.
#![cfg(feature = "rustls")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tokio::net::TcpListener;
use wavesock::rustls::ServerConfig;
use wavesock::rustls::crypto::CryptoProvider;
use wavesock::rustls::pki_types::pem::PemObject;
use wavesock::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use wavesock::tokio_rustls::TlsAcceptor;
use wavesock::{ConnectError, Error, MaybeTlsStream};

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

/// Runs the ignored test `child` in a new process that trusts only the
/// test CA, through `SSL_CERT_FILE`.
fn run_child(child: &str) {
    let dir = make_certificates(child);
    let out = Command::new(std::env::current_exe().unwrap())
        .args([child, "--exact", "--ignored", "--nocapture"])
        .env("SSL_CERT_FILE", dir.join("ca.pem"))
        .env_remove("SSL_CERT_DIR")
        .env(DIR, &dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{child} failed:\n{text}");
    assert!(text.contains("1 passed"), "{child} did not run:\n{text}");
}

/// A wavesock echo server behind TLS with the certificate `leaf`.
async fn server(dir: &Path, leaf: &str) -> u16 {
    let chain = vec![CertificateDer::from_pem_file(dir.join(format!("{leaf}.pem"))).unwrap()];
    let key = PrivateKeyDer::from_pem_file(dir.join(format!("{leaf}.key"))).unwrap();
    let provider = Arc::new(wavesock::rustls::crypto::ring::default_provider());
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
#[cfg(all(
    feature = "rustls-native-roots",
    any(feature = "ring", feature = "aws-lc-rs")
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

/// Which stack the features make `connect_async` use, as the stream says.
fn stack<S>(stream: &MaybeTlsStream<S>) -> &'static str {
    match stream {
        MaybeTlsStream::Plain(_) => "plain",
        MaybeTlsStream::Rustls(_) => "rustls",
        _ => "other",
    }
}

#[cfg(all(
    feature = "rustls-native-roots",
    any(feature = "ring", feature = "aws-lc-rs")
))]
#[test]
fn wss_trusts_the_systems_store_and_names_each_refusal() {
    run_child("child_connects_through_the_systems_store");
}

#[cfg(all(
    feature = "rustls-native-roots",
    any(feature = "ring", feature = "aws-lc-rs")
))]
#[tokio::test]
#[ignore = "run by wss_trusts_the_systems_store_and_names_each_refusal"]
async fn child_connects_through_the_systems_store() {
    let dir = PathBuf::from(std::env::var_os(DIR).expect("run by the parent test"));
    let port = server(&dir, "good").await;
    let (mut ws, response) = wavesock::connect_async(format!("wss://localhost:{port}/"))
        .await
        .unwrap();
    assert_eq!(response.status(), 101);
    assert_eq!(stack(ws.get_ref()), "rustls");
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
        assert!(
            matches!(&err, Error::Connect(ConnectError::Certificate(_))),
            "{leaf}: {err:?}"
        );
        let text = chain(&err);
        assert!(
            text.contains(says),
            "{leaf}: {text:?} does not say {says:?}"
        );
    }
}

/// The provider the features choose, as rustls prints its key provider.
fn key_provider(provider: &CryptoProvider) -> String {
    format!("{:?}", provider.key_provider)
}

#[test]
fn with_no_provider_installed_the_features_choose() {
    run_child("child_with_no_provider_installed");
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
    if !cfg!(feature = "rustls-native-roots") {
        return;
    }
    let dir = PathBuf::from(std::env::var_os(DIR).expect("run by the parent test"));
    let port = server(&dir, "good").await;
    let connected = wavesock::connect_async(format!("wss://localhost:{port}/")).await;
    assert_eq!(
        connected.is_ok(),
        cfg!(any(feature = "ring", feature = "aws-lc-rs")),
        "{:?}",
        connected.err()
    );
    assert!(CryptoProvider::get_default().is_none());
}

#[test]
fn an_installed_provider_comes_first() {
    run_child("child_with_a_provider_installed");
}

#[tokio::test]
#[ignore = "run by an_installed_provider_comes_first"]
async fn child_with_a_provider_installed() {
    // *ring*, which the features would choose last (or not at all).
    wavesock::rustls::crypto::ring::default_provider()
        .install_default()
        .unwrap();
    let installed = CryptoProvider::get_default().unwrap();
    let chosen = wavesock::tls::crypto_provider().unwrap();
    assert!(Arc::ptr_eq(installed, &chosen));
    if !cfg!(feature = "rustls-native-roots") {
        return;
    }
    let dir = PathBuf::from(std::env::var_os(DIR).expect("run by the parent test"));
    let port = server(&dir, "good").await;
    let (ws, _) = wavesock::connect_async(format!("wss://localhost:{port}/"))
        .await
        .unwrap();
    assert_eq!(stack(ws.get_ref()), "rustls");
}
