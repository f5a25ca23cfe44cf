//! One HTTP/2 stream as a byte stream: what a WebSocket over HTTP/2 runs on.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use h2::{RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// An HTTP/2 stream opened by an extended CONNECT request (RFC 8441), read
/// and written as bytes. Receive window credit is given back as the bytes
/// are read, so a reader that stops reading stops the sender.
///
/// Unlike a TCP socket, dropping it resets the stream (`CANCEL`), and h2
/// discards what it had not sent yet: finish with the WebSocket closing
/// handshake ([`WebSocketStream::close`](crate::WebSocketStream::close),
/// then read until `None`) before dropping, so that everything sent has
/// arrived.
pub struct Http2Stream {
    send: SendStream<Bytes>,
    recv: RecvStream,
    /// The DATA frame being read from.
    chunk: Bytes,
    shut: bool,
}

impl Http2Stream {
    pub(crate) fn new(send: SendStream<Bytes>, recv: RecvStream) -> Self {
        Http2Stream {
            send,
            recv,
            chunk: Bytes::new(),
            shut: false,
        }
    }

    /// The HTTP/2 stream identifier.
    pub fn stream_id(&self) -> u32 {
        self.send.stream_id().into()
    }

    /// Resets the stream with `CANCEL`: the peer's reads and writes fail at
    /// once, and nothing more is sent on it.
    pub fn reset(&mut self) {
        self.send.send_reset(h2::Reason::CANCEL);
    }
}

impl std::fmt::Debug for Http2Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http2Stream")
            .field("stream_id", &self.stream_id())
            .field("buffered", &self.chunk.len())
            .finish_non_exhaustive()
    }
}

/// h2's errors as I/O errors: a reset by the peer is `ConnectionReset`,
/// naming the reason.
pub(crate) fn io_error(e: h2::Error) -> io::Error {
    if e.is_io() {
        return e.into_io().unwrap_or_else(|| io::ErrorKind::Other.into());
    }
    let kind = if e.is_reset() || e.is_go_away() {
        io::ErrorKind::ConnectionReset
    } else {
        io::ErrorKind::Other
    };
    io::Error::new(kind, e)
}

impl AsyncRead for Http2Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        while this.chunk.is_empty() {
            match ready!(this.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    // The credit goes back as soon as the bytes are ours: the
                    // WebSocket layer bounds what it buffers itself.
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    this.chunk = data;
                }
                Some(Err(e)) => return Poll::Ready(Err(io_error(e))),
                None => return Poll::Ready(Ok(())),
            }
        }
        let n = this.chunk.len().min(buf.remaining());
        buf.put_slice(&this.chunk[..n]);
        this.chunk.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Http2Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let send = &mut self.send;
        // h2 counts in u32; a write may be shorter than asked anyway.
        let buf = &buf[..buf.len().min(1 << 20)];
        send.reserve_capacity(buf.len());
        loop {
            let granted = send.capacity();
            if granted > 0 {
                let n = granted.min(buf.len());
                send.send_data(Bytes::copy_from_slice(&buf[..n]), false)
                    .map_err(io_error)?;
                return Poll::Ready(Ok(n));
            }
            match send.poll_capacity(cx) {
                Poll::Ready(Some(Ok(_))) => {}
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(io_error(e))),
                Poll::Ready(None) => {
                    // The stream is over for sending: reset by the peer
                    // (say with which reason), or ended by us.
                    if let Poll::Ready(Ok(reason)) = send.poll_reset(cx) {
                        return Poll::Ready(Err(io_error(h2::Error::from(reason))));
                    }
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "the HTTP/2 stream is closed for sending",
                    )));
                }
                Poll::Pending => {
                    // No credit may also mean the peer reset the stream.
                    if let Poll::Ready(reason) = send.poll_reset(cx) {
                        let e = match reason {
                            Ok(reason) => h2::Error::from(reason),
                            Err(e) => e,
                        };
                        return Poll::Ready(Err(io_error(e)));
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The connection's task writes what send_data queued.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.shut {
            self.shut = true;
            self.send.send_data(Bytes::new(), true).map_err(io_error)?;
        }
        Poll::Ready(Ok(()))
    }
}
