//! Helpers shared by the integration tests: each test binary
//! (`tests/<group>/main.rs`) includes this tree once, as `support`.
//!
//! The helpers here build and read raw frames and upgrades; the modules
//! below hold what only some suites need.
#![allow(dead_code)]

pub mod child;
pub mod counting;
pub mod faulty;
pub mod hosts;
pub mod hub;
pub mod interleave;
#[cfg(feature = "metrics")]
pub mod metered;
pub mod model;
pub mod proxy;
pub mod raw;
pub mod redis;
pub mod services;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use wavesock::{Config, Role, WebSocketStream};

pub const KEY_REQUEST: &[u8] = b"GET /chat HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// A listener on a free loopback port.
pub async fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

/// Sends the RFC's upgrade request on a raw TCP connection and reads the
/// 101 response; returns the connection and any bytes read past the head.
pub async fn raw_upgrade(addr: SocketAddr) -> (TcpStream, BytesMut) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(KEY_REQUEST).await.unwrap();
    let mut buf = BytesMut::new();
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        assert!(
            tcp.read_buf(&mut buf).await.unwrap() > 0,
            "closed during handshake"
        );
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    let rest = buf.split_off(end);
    (tcp, rest)
}

/// A wavesock client over a raw upgrade.
pub async fn client(addr: SocketAddr, config: Config) -> WebSocketStream<TcpStream> {
    let (tcp, rest) = raw_upgrade(addr).await;
    WebSocketStream::from_partially_read(tcp, rest, Role::Client, config).unwrap()
}

/// Accepts one connection with wavesock.
pub async fn accept(l: &TcpListener, config: Config) -> WebSocketStream<TcpStream> {
    let (tcp, _) = l.accept().await.unwrap();
    wavesock::accept_async_with_config(tcp, config)
        .await
        .unwrap()
}

/// A frame as a client sends it, masked with a fixed key.
pub fn masked(b0: u8, payload: &[u8]) -> Vec<u8> {
    let key = [0x11, 0x22, 0x33, 0x44];
    let mut out = vec![b0];
    match payload.len() {
        n @ 0..=125 => out.push(0x80 | n as u8),
        n @ 126..=0xFFFF => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&key);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    out
}

/// An unmasked frame as a server sends it.
pub fn unmasked(b0: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![b0];
    match payload.len() {
        n @ 0..=125 => out.push(n as u8),
        n @ 126..=0xFFFF => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    out
}

/// A close payload.
pub fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut v = code.to_be_bytes().to_vec();
    v.extend_from_slice(reason.as_bytes());
    v
}

/// Reads one unmasked frame from a raw connection: (first byte, payload).
pub async fn read_frame(
    tcp: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
) -> Option<(u8, Vec<u8>)> {
    loop {
        if buf.len() >= 2 {
            let b0 = buf[0];
            assert_eq!(buf[1] & 0x80, 0, "server frames are unmasked");
            let (len, at) = match buf[1] & 0x7F {
                126 if buf.len() >= 4 => (u16::from_be_bytes([buf[2], buf[3]]) as usize, 4),
                127 if buf.len() >= 10 => (
                    u64::from_be_bytes(buf[2..10].try_into().unwrap()) as usize,
                    10,
                ),
                126 | 127 => (usize::MAX, 0),
                n => (n as usize, 2),
            };
            if len != usize::MAX && buf.len() >= at + len {
                let frame = buf.split_to(at + len);
                return Some((b0, frame[at..].to_vec()));
            }
        }
        if tcp.read_buf(buf).await.unwrap() == 0 {
            assert!(buf.is_empty(), "EOF in the middle of a frame");
            return None;
        }
    }
}

/// Counts the write calls that reach the transport.
#[derive(Debug)]
pub struct CountingIo<T> {
    pub inner: T,
    pub writes: Arc<AtomicUsize>,
}

impl<T> CountingIo<T> {
    pub fn new(inner: T) -> (Self, Arc<AtomicUsize>) {
        let writes = Arc::new(AtomicUsize::new(0));
        (
            CountingIo {
                inner,
                writes: writes.clone(),
            },
            writes,
        )
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for CountingIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CountingIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(_))) {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        r
    }
    // Forwarded, so that a vectored write counts once, as it is one
    // system call on a socket.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(_))) {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The RFC 6455 §1.3 example key and its accept value.
pub const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
pub const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

/// A valid upgrade request with the RFC key.
pub fn request(extra: &str) -> String {
    format!(
        "GET /chat HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    )
}

/// A stream wrapper that counts the bytes read through it and can hand
/// them out at most `max_read` at a time.
#[derive(Debug)]
pub struct Counting<S> {
    pub inner: S,
    pub read: Arc<AtomicUsize>,
    pub max_read: usize,
}

impl<S> Counting<S> {
    pub fn new(inner: S, max_read: usize) -> (Self, Arc<AtomicUsize>) {
        let read = Arc::new(AtomicUsize::new(0));
        (
            Counting {
                inner,
                read: read.clone(),
                max_read,
            },
            read,
        )
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counting<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = buf.remaining().min(self.max_read);
        let mut small = ReadBuf::new(&mut buf.initialize_unfilled()[..n]);
        let r = Pin::new(&mut self.inner).poll_read(cx, &mut small);
        let got = small.filled().len();
        buf.advance(got);
        self.read.fetch_add(got, Ordering::SeqCst);
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counting<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Reads an HTTP head (up to and including the blank line) byte by byte,
/// so nothing after it is consumed.
pub async fn read_head<S: AsyncRead + Unpin>(io: &mut S) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        if io.read(&mut b).await.unwrap() == 0 {
            break;
        }
        head.push(b[0]);
    }
    String::from_utf8(head).unwrap()
}

/// Reads everything until EOF (or a reset), lossily as text.
pub async fn read_to_end<S: AsyncRead + Unpin>(io: &mut S) -> String {
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match io.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A masked client frame: FIN set, `opcode`, payload under 126 bytes.
pub fn masked_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut out = vec![0x80 | opcode, 0x80 | payload.len() as u8];
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

/// An unmasked server frame: FIN set, `opcode`, payload under 126 bytes.
pub fn server_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mut out = vec![0x80 | opcode, payload.len() as u8];
    out.extend_from_slice(payload);
    out
}

/// A multi-thread runtime with one worker per core of the machine the
/// tests are written for, for tests that need tasks truly in parallel.
pub fn two_workers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
