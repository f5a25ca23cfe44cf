//! Reading an HTTP head (a request or a response, up to its blank line)
//! from a stream, never holding more than a cap: the one loop the client
//! handshake, the server handshake and the HTTP `CONNECT` proxy tunnel share.

use std::io;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Why no head was read. Each caller maps these to its own error.
#[derive(Debug)]
pub(crate) enum HeadError<E> {
    /// The parser refused what arrived.
    Parse(E),
    /// The cap was reached without a complete head.
    TooLarge,
    /// The peer closed the connection before the head was complete.
    Eof,
    /// Reading failed.
    Io(io::Error),
}

/// Reads from `io` into `buf` until `parse` finds a complete head at the
/// start of `buf`, and returns what it found with the head's length.
///
/// `parse` sees everything read so far and answers `Ok(None)` while the head
/// is incomplete (the `httparse` verdict: a head ends at its empty line).
/// `buf` never grows past `max` bytes, so a flood costs at most `max`, and
/// a complete head longer than `max` is [`HeadError::TooLarge`]. Bytes read
/// past the head stay in `buf` after it, for the caller.
pub(crate) async fn read_head<S, T, E>(
    io: &mut S,
    buf: &mut BytesMut,
    max: usize,
    mut parse: impl FnMut(&[u8]) -> Result<Option<(T, usize)>, E>,
) -> Result<(T, usize), HeadError<E>>
where
    S: AsyncRead + Unpin,
{
    loop {
        match parse(buf).map_err(HeadError::Parse)? {
            Some((_, len)) if len > max => return Err(HeadError::TooLarge),
            Some(found) => return Ok(found),
            None if buf.len() >= max => return Err(HeadError::TooLarge),
            None => {}
        }
        // Never read past the cap.
        let room = max - buf.len();
        buf.reserve(room.min(1024));
        match (&mut *io).take(room as u64).read_buf(buf).await {
            Ok(0) => return Err(HeadError::Eof),
            Ok(_) => {}
            Err(e) => return Err(HeadError::Io(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in parser: the head ends at the first `\r\n\r\n`; a head
    /// starting with `!` is refused.
    fn blank_line(buf: &[u8]) -> Result<Option<((), usize)>, &'static str> {
        if buf.first() == Some(&b'!') {
            return Err("refused");
        }
        Ok(buf
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|at| ((), at + 4)))
    }

    const HEAD: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n";

    #[tokio::test]
    async fn a_head_split_over_many_reads() {
        let mut io = Trickle {
            data: HEAD,
            pending: false,
            reads: 0,
        };
        let mut buf = BytesMut::new();
        let ((), len) = read_head(&mut io, &mut buf, 1024, blank_line)
            .await
            .unwrap();
        assert_eq!(len, HEAD.len());
        assert_eq!(&buf[..], HEAD);
        assert_eq!(io.reads, HEAD.len().div_ceil(3));
    }

    /// Gives `data` three bytes a read, each read after a `Pending` (with
    /// an immediate wake-up). Not tokio-test's mock with waits between
    /// reads: its `poll_read` can return `Pending` with no wake-up when a
    /// wait ends between its two looks at the clock, which hung this test
    /// under load.
    struct Trickle {
        data: &'static [u8],
        pending: bool,
        reads: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            self.pending = !self.pending;
            if self.pending {
                cx.waker().wake_by_ref();
                return std::task::Poll::Pending;
            }
            let n = self.data.len().min(3).min(buf.remaining());
            buf.put_slice(&self.data[..n]);
            self.data = &self.data[n..];
            self.reads += 1;
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn bytes_after_the_head_are_kept() {
        let mut sent = HEAD.to_vec();
        sent.extend_from_slice(b"\x81\x02hi");
        let mut io = tokio_test::io::Builder::new().read(&sent).build();
        let mut buf = BytesMut::new();
        let ((), len) = read_head(&mut io, &mut buf, 1024, blank_line)
            .await
            .unwrap();
        assert_eq!(&buf[..len], HEAD);
        assert_eq!(&buf[len..], b"\x81\x02hi");
    }

    #[tokio::test]
    async fn a_head_past_the_cap_is_too_large_and_nothing_past_it_is_read() {
        let (mut client, mut server) = tokio::io::duplex(4096);
        tokio::io::AsyncWriteExt::write_all(&mut client, &[b'a'; 200])
            .await
            .unwrap();
        let mut buf = BytesMut::new();
        let r = read_head(&mut server, &mut buf, 64, blank_line).await;
        assert!(matches!(r, Err(HeadError::TooLarge)), "{r:?}");
        assert_eq!(buf.len(), 64);
        // A complete head longer than the cap is refused as well.
        let r = read_head(&mut server, &mut BytesMut::new(), 10, |b: &[u8]| {
            Ok::<_, ()>(Some(((), b.len() + 20)))
        })
        .await;
        assert!(matches!(r, Err(HeadError::TooLarge)));
    }

    #[tokio::test]
    async fn eof_before_the_end_of_the_head() {
        let mut io = tokio_test::io::Builder::new()
            .read(&HEAD[..HEAD.len() - 2])
            .build();
        let mut buf = BytesMut::new();
        let r = read_head(&mut io, &mut buf, 1024, blank_line).await;
        assert!(matches!(r, Err(HeadError::Eof)), "{r:?}");
        assert_eq!(&buf[..], &HEAD[..HEAD.len() - 2]);
    }

    #[tokio::test]
    async fn parse_and_read_errors_come_through() {
        let mut io = tokio_test::io::Builder::new().read(b"!nope").build();
        let r = read_head(&mut io, &mut BytesMut::new(), 1024, blank_line).await;
        assert!(matches!(r, Err(HeadError::Parse("refused"))));
        let mut io = tokio_test::io::Builder::new()
            .read(b"HTTP/1.1")
            .read_error(io::Error::from(io::ErrorKind::ConnectionReset))
            .build();
        let r = read_head(&mut io, &mut BytesMut::new(), 1024, blank_line).await;
        assert!(matches!(r, Err(HeadError::Io(e)) if e.kind() == io::ErrorKind::ConnectionReset));
    }
}
