//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

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
