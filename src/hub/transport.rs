//! A hub connection's transport: TCP (Tokio's, or read by the engine's
//! own poller) or any other stream handed over.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::hub::event::Addresses;
use crate::hub::handle::Io;
#[cfg(unix)]
use crate::hub::poller::Polled;
use crate::retry::Retrying;

/// A connection's transport: TCP, the usual case, without indirection.
/// Calls on other transports retry `Interrupted` and take `WouldBlock` as
/// "not now", as everywhere else in the crate ([`Retrying`]); Tokio's
/// `TcpStream` never returns either.
pub(crate) enum Transport {
    Tcp(TcpStream),
    /// TCP read by the engine's own poller ([`Readiness::Owned`](crate::hub::Readiness)).
    #[cfg(unix)]
    Polled(Polled),
    /// With the addresses its giver told, boxed: most have none, and the
    /// variant stays no larger than a `TcpStream`.
    Other(Pin<Box<dyn Io>>, Option<Box<Addresses>>),
}

impl Transport {
    /// The connection's two ends: asked of the socket for TCP (nothing
    /// kept per connection), as given for other transports.
    pub(crate) fn addresses(&self) -> Addresses {
        Addresses {
            remote: self.remote_addr(),
            local: self.local_addr(),
        }
    }

    /// The peer's address alone: one system call for TCP, not two.
    pub(crate) fn remote_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            Transport::Tcp(t) => t.peer_addr().ok(),
            #[cfg(unix)]
            Transport::Polled(t) => t.peer_addr(),
            Transport::Other(_, addrs) => addrs.as_ref().and_then(|a| a.remote),
        }
    }

    /// This end's address alone.
    pub(crate) fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            Transport::Tcp(t) => t.local_addr().ok(),
            #[cfg(unix)]
            Transport::Polled(t) => t.local_addr(),
            Transport::Other(_, addrs) => addrs.as_ref().and_then(|a| a.local),
        }
    }
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Tcp(t) => t.fmt(f),
            #[cfg(unix)]
            Transport::Polled(t) => t.fmt(f),
            Transport::Other(..) => f.write_str("Transport::Other"),
        }
    }
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(t) => Pin::new(t).poll_read(cx, buf),
            #[cfg(unix)]
            Transport::Polled(t) => t.poll_read(buf),
            Transport::Other(t, _) => Pin::new(&mut Retrying(t)).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Tcp(t) => Pin::new(t).poll_write(cx, buf),
            #[cfg(unix)]
            Transport::Polled(t) => t.poll_write(buf),
            Transport::Other(t, _) => Pin::new(&mut Retrying(t)).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Tcp(t) => Pin::new(t).poll_write_vectored(cx, bufs),
            #[cfg(unix)]
            Transport::Polled(t) => t.poll_write_vectored(bufs),
            Transport::Other(t, _) => Pin::new(&mut Retrying(t)).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Transport::Tcp(t) => t.is_write_vectored(),
            #[cfg(unix)]
            Transport::Polled(_) => true,
            Transport::Other(t, _) => t.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(t) => Pin::new(t).poll_flush(cx),
            #[cfg(unix)]
            Transport::Polled(_) => Poll::Ready(Ok(())),
            Transport::Other(t, _) => Pin::new(&mut Retrying(t)).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(t) => Pin::new(t).poll_shutdown(cx),
            #[cfg(unix)]
            Transport::Polled(t) => Poll::Ready(t.shutdown()),
            Transport::Other(t, _) => Pin::new(&mut Retrying(t)).poll_shutdown(cx),
        }
    }
}
