//! Loopback servers for the TLS and proxy tests: a wavesock echo server
//! (plain or TLS), and small HTTP CONNECT and SOCKS5 proxies that record
//! what they were asked. The proxies only ever connect to 127.0.0.1.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[cfg(feature = "__tls")]
pub mod tls;

/// What a proxy was asked for, in order: the target as the client named it
/// (`host:port`), and for SOCKS5 the address type used.
#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<Vec<(String, u8)>>>);

impl Seen {
    fn push(&self, target: String, atyp: u8) {
        self.0.lock().unwrap().push((target, atyp));
    }

    pub fn all(&self) -> Vec<(String, u8)> {
        self.0.lock().unwrap().clone()
    }
}

async fn bind() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

/// Serves every connection with `handle`.
fn serve<F, Fut>(listener: TcpListener, handle: F)
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(handle(tcp));
        }
    });
}

/// Echoes data messages on one wavesock connection until it ends.
pub async fn echo<S: AsyncRead + AsyncWrite + Unpin>(io: S) {
    let Ok(mut ws) = wavesock::accept_async(io).await else {
        return;
    };
    while let Some(Ok(msg)) = ws.next().await {
        if msg.is_data() && ws.send(msg).await.is_err() {
            break;
        }
    }
}

/// A plain wavesock echo server.
pub async fn echo_server() -> SocketAddr {
    let (l, addr) = bind().await;
    serve(l, echo);
    addr
}

/// A port nothing listens on.
pub async fn closed_port() -> u16 {
    let (l, addr) = bind().await;
    drop(l);
    addr.port()
}

/// Only loopback targets: `localhost` is mapped by hand, nothing is resolved.
fn loopback(host: &str) -> Option<IpAddr> {
    if host.eq_ignore_ascii_case("localhost") {
        return Some(Ipv4Addr::LOCALHOST.into());
    }
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok()
        .filter(IpAddr::is_loopback)
}

/// An HTTP proxy that answers `CONNECT`, asking for basic auth with
/// `credentials`. Other methods get 405, a target that is down 502.
pub async fn http_proxy(credentials: Option<(&str, &str)>) -> (SocketAddr, Seen) {
    let expected = credentials.map(|(u, p)| {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
        format!("basic {token}")
    });
    let (l, addr) = bind().await;
    let seen = Seen::default();
    let log = seen.clone();
    serve(l, move |tcp| {
        http_proxy_conn(tcp, expected.clone(), log.clone())
    });
    (addr, seen)
}

async fn http_proxy_conn(mut tcp: TcpStream, expected: Option<String>, seen: Seen) {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 || tcp.read_u8().await.map(|b| head.push(b)).is_err() {
            return;
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut lines = head.lines();
    let mut request = lines.next().unwrap_or("").split(' ');
    let (method, target) = (request.next().unwrap_or(""), request.next().unwrap_or(""));
    if method != "CONNECT" {
        let _ = tcp
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            .await;
        return;
    }
    let auth = lines.find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("proxy-authorization")
            .then(|| value.trim().to_ascii_lowercase())
    });
    if let Some(expected) = expected {
        if auth.as_deref() != Some(expected.to_ascii_lowercase().as_str()) {
            let _ = tcp
                .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\n\r\n")
                .await;
            return;
        }
    }
    seen.push(target.to_owned(), 0);
    let upstream = match target.rsplit_once(':') {
        Some((host, port)) => match (loopback(host), port.parse::<u16>()) {
            (Some(ip), Ok(port)) => TcpStream::connect((ip, port)).await.ok(),
            _ => None,
        },
        None => None,
    };
    let Some(mut upstream) = upstream else {
        let _ = tcp
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            .await;
        return;
    };
    if tcp
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_ok()
    {
        let _ = tokio::io::copy_bidirectional(&mut tcp, &mut upstream).await;
    }
}

/// A SOCKS5 proxy (RFC 1928), asking for RFC 1929 username/password auth
/// with `credentials`. A target that is down gets reply 5, one off
/// loopback reply 2.
pub async fn socks5_proxy(credentials: Option<(&str, &str)>) -> (SocketAddr, Seen) {
    let expected = credentials.map(|(u, p)| (u.to_owned(), p.to_owned()));
    let (l, addr) = bind().await;
    let seen = Seen::default();
    let log = seen.clone();
    serve(l, move |tcp| {
        let (expected, log) = (expected.clone(), log.clone());
        async move {
            let _ = socks5_conn(tcp, expected, log).await;
        }
    });
    (addr, seen)
}

async fn read_string<S: AsyncRead + Unpin>(io: &mut S) -> std::io::Result<String> {
    let mut bytes = vec![0; usize::from(io.read_u8().await?)];
    io.read_exact(&mut bytes).await?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

async fn socks5_conn(
    mut tcp: TcpStream,
    expected: Option<(String, String)>,
    seen: Seen,
) -> std::io::Result<()> {
    let [version, n] = [tcp.read_u8().await?, tcp.read_u8().await?];
    assert_eq!(version, 5, "the client speaks SOCKS5");
    let mut methods = vec![0; usize::from(n)];
    tcp.read_exact(&mut methods).await?;
    match &expected {
        Some((user, pass)) if methods.contains(&2) => {
            tcp.write_all(&[5, 2]).await?;
            assert_eq!(tcp.read_u8().await?, 1, "RFC 1929 version");
            let (u, p) = (read_string(&mut tcp).await?, read_string(&mut tcp).await?);
            if (&u, &p) != (user, pass) {
                return tcp.write_all(&[1, 1]).await;
            }
            tcp.write_all(&[1, 0]).await?;
        }
        None if methods.contains(&0) => tcp.write_all(&[5, 0]).await?,
        _ => return tcp.write_all(&[5, 0xFF]).await,
    }
    let mut head = [0u8; 4];
    tcp.read_exact(&mut head).await?;
    assert_eq!(head[..3], [5, 1, 0], "a CONNECT request");
    let host = match head[3] {
        1 => {
            let mut ip = [0u8; 4];
            tcp.read_exact(&mut ip).await?;
            Ipv4Addr::from(ip).to_string()
        }
        4 => {
            let mut ip = [0u8; 16];
            tcp.read_exact(&mut ip).await?;
            format!("[{}]", std::net::Ipv6Addr::from(ip))
        }
        3 => read_string(&mut tcp).await?,
        _ => return tcp.write_all(&[5, 8, 0, 1, 0, 0, 0, 0, 0, 0]).await,
    };
    let port = tcp.read_u16().await?;
    seen.push(format!("{host}:{port}"), head[3]);
    let Some(ip) = loopback(&host) else {
        return tcp.write_all(&[5, 2, 0, 1, 0, 0, 0, 0, 0, 0]).await;
    };
    let Ok(mut upstream) = TcpStream::connect((ip, port)).await else {
        return tcp.write_all(&[5, 5, 0, 1, 0, 0, 0, 0, 0, 0]).await;
    };
    // The bound address: a domain, to exercise the variable-length form.
    let mut reply = vec![5, 0, 0, 3, 9];
    reply.extend_from_slice(b"localhost");
    reply.extend_from_slice(&upstream.local_addr()?.port().to_be_bytes());
    tcp.write_all(&reply).await?;
    tokio::io::copy_bidirectional(&mut tcp, &mut upstream).await?;
    Ok(())
}

/// A server that answers the first bytes of every connection with `bytes`,
/// then ends its side (FIN) and drains the client's.
pub async fn scripted_server(bytes: &'static [u8]) -> SocketAddr {
    let (l, addr) = bind().await;
    serve(l, move |mut tcp| async move {
        let mut buf = [0u8; 1024];
        let _ = tcp.read(&mut buf).await;
        let _ = tcp.write_all(bytes).await;
        let _ = tcp.shutdown().await;
        let mut rest = Vec::new();
        let _ = tcp.read_to_end(&mut rest).await;
    });
    addr
}

/// A server that accepts and never says anything.
pub async fn silent_server() -> SocketAddr {
    let (l, addr) = bind().await;
    serve(l, |mut tcp| async move {
        let mut sink = Vec::new();
        let _ = tcp.read_to_end(&mut sink).await;
    });
    addr
}
