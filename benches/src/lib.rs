//! Shared pieces of the wavesock benchmarks: inputs, and the echo loops of
//! wavesock and its peers, written the way each library's own README or
//! examples write them, so that `echo_peer` and the criterion benches run
//! exactly the same code.

use std::error::Error;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::{SinkExt, StreamExt, TryStreamExt, future};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The largest message any echo server accepts: 64 MiB.
pub const MAX_MESSAGE: usize = 64 << 20;

/// The error type of the echo loops.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// A payload of `len` bytes that is valid UTF-8 (ASCII) and not all one value.
pub fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

/// A client's binary frame carrying `payload`, masked with `key`.
pub fn masked_binary_frame(payload: &[u8], key: [u8; 4]) -> Vec<u8> {
    let len = payload.len();
    let mut frame = Vec::with_capacity(len + 14);
    frame.push(0x82);
    match len {
        0..=125 => frame.push(0x80 | len as u8),
        126..=0xffff => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(&key);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    frame
}

/// The wavesock configuration of the echo servers: 64 MiB frames and messages.
pub fn wavesock_config() -> wavesock::Config {
    wavesock::Config::default()
        .max_frame_size(MAX_MESSAGE)
        .max_message_size(MAX_MESSAGE)
}

/// The hub's echo handler: each message sent back from where it was read.
#[derive(Clone, Debug)]
pub struct HubEcho;

impl wavesock::hub::Handler for HubEcho {
    type Data = ();

    fn upgrade(
        &mut self,
        _: &wavesock::http::Request<()>,
        _: &mut wavesock::http::Response<()>,
    ) -> Result<(), wavesock::hub::HttpResponse> {
        Ok(())
    }

    fn message(&mut self, ws: &mut wavesock::hub::Ws<'_, ()>, msg: wavesock::hub::HubMessage<'_>) {
        let _ = ws.send_borrowed(msg);
    }
}

/// Serves `listener` with one hub engine echoing every message, with the
/// limits of [`wavesock_config`] and room to echo the largest message,
/// its sockets' readiness from `readiness`.
pub async fn hub_echo(
    listener: tokio::net::TcpListener,
    readiness: wavesock::hub::Readiness,
) -> Result<(), BoxError> {
    let config = wavesock::hub::HubConfig::default()
        .readiness(readiness)
        .config(wavesock_config().max_backpressure(MAX_MESSAGE + (1 << 20)));
    wavesock::hub::Hub::new(HubEcho, config)?
        .serve(listener)
        .await?;
    Ok(())
}

/// wavesock's README echo: `feed` each data message, one `flush` at the end.
/// Fed replies are written by the next `next()` before it waits for input.
pub async fn wavesock_echo<S>(ws: &mut wavesock::WebSocketStream<S>) -> Result<(), BoxError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(msg) = ws.next().await {
        let msg = msg?;
        if msg.is_data() {
            ws.feed(msg).await?;
        }
    }
    ws.flush().await?;
    Ok(())
}

/// fastwebsockets' `examples/echo_server.rs` loop: a `FragmentCollector`,
/// `read_frame`, and `write_frame` for text and binary frames.
pub async fn fastwebsockets_echo<S>(
    mut ws: fastwebsockets::WebSocket<S>,
) -> Result<(), fastwebsockets::WebSocketError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    use fastwebsockets::OpCode;

    ws.set_max_message_size(MAX_MESSAGE);
    let mut ws = fastwebsockets::FragmentCollector::new(ws);
    loop {
        let frame = ws.read_frame().await?;
        match frame.opcode {
            OpCode::Close => break,
            OpCode::Text | OpCode::Binary => ws.write_frame(frame).await?,
            _ => {}
        }
    }
    Ok(())
}

/// The tokio-websockets limits of the echo servers (default frame size).
pub fn tokio_websockets_limits() -> tokio_websockets::Limits {
    tokio_websockets::Limits::default().max_payload_len(Some(MAX_MESSAGE))
}

/// tokio-websockets' `examples/echo_server.rs` loop: `next`, then `send`
/// for text and binary messages.
pub async fn tokio_websockets_echo<S>(
    mut ws: tokio_websockets::WebSocketStream<S>,
) -> Result<(), BoxError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(msg) = ws.next().await {
        let msg = msg?;
        if msg.is_text() || msg.is_binary() {
            ws.send(msg).await?;
        }
    }
    Ok(())
}

/// The tokio-tungstenite configuration of the echo servers.
pub fn tokio_tungstenite_config() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_frame_size(Some(MAX_MESSAGE))
        .max_message_size(Some(MAX_MESSAGE))
}

/// tokio-tungstenite's `examples/echo-server.rs`: `split`, then
/// `try_filter(text or binary).forward(sink)`.
pub async fn tokio_tungstenite_echo<S>(
    ws: tokio_tungstenite::WebSocketStream<S>,
) -> Result<(), BoxError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (write, read) = ws.split();
    read.try_filter(|msg| future::ready(msg.is_text() || msg.is_binary()))
        .forward(write)
        .await?;
    Ok(())
}

/// An in-memory transport for codec benchmarks: reads return `wire` over
/// and over (as much as the reader asks for), writes are counted and dropped.
#[derive(Debug)]
pub struct LoopIo {
    wire: Vec<u8>,
    pos: usize,
    /// Bytes written so far.
    pub written: u64,
}

impl LoopIo {
    /// Reads will repeat `wire` for ever; `wire` may be empty for a write-only use.
    pub fn new(wire: Vec<u8>) -> LoopIo {
        LoopIo {
            wire,
            pos: 0,
            written: 0,
        }
    }
}

impl AsyncRead for LoopIo {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.wire.is_empty() {
            return Poll::Pending;
        }
        while buf.remaining() > 0 {
            let chunk = &this.wire[this.pos..];
            let n = chunk.len().min(buf.remaining());
            buf.put_slice(&chunk[..n]);
            this.pos = (this.pos + n) % this.wire.len();
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for LoopIo {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut().written += buf.len() as u64;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let n: usize = bufs.iter().map(|b| b.len()).sum();
        self.get_mut().written += n as u64;
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Runs a future that never waits (everything it touches is in memory) to
/// completion with one poll.
///
/// # Panics
///
/// If the future is not ready after that poll.
pub fn now<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    match fut
        .as_mut()
        .poll(&mut Context::from_waker(std::task::Waker::noop()))
    {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("an in-memory future was not ready"),
    }
}

/// The RFC 6455 sample key, and the accept value a server must answer it
/// with: the load tools send the same request every time.
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

/// The client handshake on a raw socket, for load tools that read frames
/// themselves: sends the upgrade request (with `extensions`, a whole
/// `Sec-WebSocket-Extensions: ...\r\n` line or nothing), checks the
/// `101` and its accept value, and returns the response head and the bytes
/// read after it.
pub async fn raw_handshake(
    tcp: &mut tokio::net::TcpStream,
    addr: std::net::SocketAddr,
    extensions: &str,
) -> std::io::Result<(String, Vec<u8>)> {
    use std::io;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n{extensions}\r\n"
    );
    tcp.write_all(request.as_bytes()).await?;
    let mut head = Vec::with_capacity(512);
    let end = loop {
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if head.len() > 8192 {
            return Err(io::Error::other("handshake response too large"));
        }
        let mut chunk = [0u8; 1024];
        let n = tcp.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::other("closed during the handshake"));
        }
        head.extend_from_slice(&chunk[..n]);
    };
    let text = String::from_utf8_lossy(&head[..end]).into_owned();
    if !text.starts_with("HTTP/1.1 101") || !text.contains(ACCEPT) {
        return Err(io::Error::other(format!(
            "bad handshake response: {:?}",
            text.lines().next().unwrap_or("")
        )));
    }
    Ok((text, head[end..].to_vec()))
}

/// The server's CPU time in nanoseconds, all threads.
pub fn server_cpu_ns(pid: u32) -> Option<u64> {
    let from_schedstat = || -> Option<u64> {
        let mut total = 0;
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
            let s = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
            total += s.split_whitespace().next()?.parse::<u64>().ok()?;
        }
        Some(total)
    };
    from_schedstat().filter(|&t| t > 0).or_else(|| {
        // utime and stime are fields 14 and 15, counted after the `(comm)`;
        // clock ticks are 100 per second on Linux.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let after = &stat[stat.rfind(')')? + 2..];
        let mut fields = after.split_whitespace().skip(11);
        let utime: u64 = fields.next()?.parse().ok()?;
        let stime: u64 = fields.next()?.parse().ok()?;
        Some((utime + stime) * 10_000_000)
    })
}
