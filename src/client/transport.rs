//! The transport a client connects over: plain TCP or TLS over TCP.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The transport [`connect_async`](crate::connect_async) opens: plain TCP for `ws://`, TLS over
/// TCP for `wss://` (with a TLS feature; the variant says which stack).
/// Through a proxy, the TCP connection is the tunnel.
#[derive(Debug)]
#[non_exhaustive]
pub enum MaybeTlsStream<S> {
    /// An unencrypted connection.
    Plain(S),
    /// A TLS connection made with rustls. Boxed: the TLS state is over a
    /// kilobyte, which plain connections should not pay for.
    #[cfg(feature = "rustls")]
    Rustls(Box<tokio_rustls::client::TlsStream<S>>),
    /// A TLS connection made with native-tls. Boxed, as for rustls.
    #[cfg(feature = "native-tls")]
    NativeTls(Box<tokio_native_tls::TlsStream<S>>),
}

impl<S> MaybeTlsStream<S> {
    /// The underlying stream (under TLS, the encrypted transport).
    pub fn get_ref(&self) -> &S {
        match self {
            MaybeTlsStream::Plain(s) => s,
            #[cfg(feature = "rustls")]
            MaybeTlsStream::Rustls(s) => s.get_ref().0,
            #[cfg(feature = "native-tls")]
            MaybeTlsStream::NativeTls(s) => s.get_ref().get_ref().get_ref(),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> MaybeTlsStream<S> {
    /// Whether TLS negotiated HTTP/2 in ALPN.
    #[cfg_attr(not(feature = "http2"), allow(dead_code))]
    pub(crate) fn is_h2(&self) -> bool {
        match self {
            MaybeTlsStream::Plain(_) => false,
            #[cfg(feature = "rustls")]
            MaybeTlsStream::Rustls(s) => s.get_ref().1.alpn_protocol() == Some(b"h2"),
            #[cfg(feature = "native-tls")]
            MaybeTlsStream::NativeTls(s) => {
                matches!(s.get_ref().negotiated_alpn(), Ok(Some(p)) if p == b"h2")
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for MaybeTlsStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTlsStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(feature = "rustls")]
            MaybeTlsStream::Rustls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            #[cfg(feature = "native-tls")]
            MaybeTlsStream::NativeTls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for MaybeTlsStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTlsStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(feature = "rustls")]
            MaybeTlsStream::Rustls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            #[cfg(feature = "native-tls")]
            MaybeTlsStream::NativeTls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTlsStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            #[cfg(feature = "rustls")]
            MaybeTlsStream::Rustls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            #[cfg(feature = "native-tls")]
            MaybeTlsStream::NativeTls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTlsStream::Plain(s) => s.is_write_vectored(),
            #[cfg(feature = "rustls")]
            MaybeTlsStream::Rustls(s) => s.is_write_vectored(),
            #[cfg(feature = "native-tls")]
            MaybeTlsStream::NativeTls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTlsStream::Plain(s) => Pin::new(s).poll_flush(cx),
            #[cfg(feature = "rustls")]
            MaybeTlsStream::Rustls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            #[cfg(feature = "native-tls")]
            MaybeTlsStream::NativeTls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTlsStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            #[cfg(feature = "rustls")]
            MaybeTlsStream::Rustls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            #[cfg(feature = "native-tls")]
            MaybeTlsStream::NativeTls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
