//! Transport calls that fail with `Interrupted` are tried again, as that
//! error asks (std's `read_exact` and `write_all` do the same). A few times
//! in one poll, then the task yields and is woken at once, so a transport
//! that keeps saying so cannot make a poll spin. `WouldBlock` (an adapter
//! over a non-blocking socket that says "not now" as an error instead of
//! `Pending`) is not a failure either: the task yields and asks again on
//! its next turn.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Tries in one poll before yielding.
const TRIES: usize = 8;

fn retry<T>(
    cx: &mut Context<'_>,
    mut f: impl FnMut(&mut Context<'_>) -> Poll<io::Result<T>>,
) -> Poll<io::Result<T>> {
    for _ in 0..TRIES {
        match f(cx) {
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
            other => return other,
        }
    }
    cx.waker().wake_by_ref();
    Poll::Pending
}

/// A borrowed transport whose calls retry `Interrupted`.
#[derive(Debug)]
pub(crate) struct Retrying<'a, S: ?Sized>(pub(crate) &'a mut S);

impl<S: AsyncRead + Unpin + ?Sized> AsyncRead for Retrying<'_, S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let io = &mut *self.get_mut().0;
        retry(cx, |cx| Pin::new(&mut *io).poll_read(cx, buf))
    }
}

impl<S: AsyncWrite + Unpin + ?Sized> AsyncWrite for Retrying<'_, S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let io = &mut *self.get_mut().0;
        retry(cx, |cx| Pin::new(&mut *io).poll_write(cx, data))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let io = &mut *self.get_mut().0;
        retry(cx, |cx| Pin::new(&mut *io).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let io = &mut *self.get_mut().0;
        retry(cx, |cx| Pin::new(&mut *io).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let io = &mut *self.get_mut().0;
        retry(cx, |cx| Pin::new(&mut *io).poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    /// Fails with `kind` `fails` times, then reads one byte.
    struct Flaky {
        fails: usize,
        calls: usize,
        kind: io::ErrorKind,
    }

    impl AsyncRead for Flaky {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            self.calls += 1;
            if self.calls <= self.fails {
                return Poll::Ready(Err(self.kind.into()));
            }
            buf.put_slice(b"x");
            Poll::Ready(Ok(()))
        }
    }

    fn read_once(io: &mut Flaky) -> Poll<io::Result<usize>> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        Pin::new(&mut Retrying(io))
            .poll_read(&mut cx, &mut buf)
            .map_ok(|()| buf.filled().len())
    }

    #[test]
    fn interrupted_is_retried_within_one_poll() {
        let mut io = Flaky {
            fails: 3,
            calls: 0,
            kind: io::ErrorKind::Interrupted,
        };
        assert!(matches!(read_once(&mut io), Poll::Ready(Ok(1))));
        assert_eq!(io.calls, 4);
    }

    #[test]
    fn would_block_yields_and_is_asked_again_next_turn() {
        let mut io = Flaky {
            fails: 1,
            calls: 0,
            kind: io::ErrorKind::WouldBlock,
        };
        assert!(read_once(&mut io).is_pending());
        assert_eq!(io.calls, 1, "no retry within the poll");
        assert!(matches!(read_once(&mut io), Poll::Ready(Ok(1))));
    }

    #[test]
    fn a_transport_that_keeps_interrupting_yields_instead_of_spinning() {
        let mut io = Flaky {
            fails: usize::MAX,
            calls: 0,
            kind: io::ErrorKind::Interrupted,
        };
        assert!(read_once(&mut io).is_pending());
        assert_eq!(io.calls, TRIES);
    }

    #[test]
    fn other_errors_pass_through_at_once() {
        struct Broken;
        impl AsyncWrite for Broken {
            fn poll_write(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
                _: &[u8],
            ) -> Poll<io::Result<usize>> {
                Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()))
            }
            fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
            fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
        }
        let mut cx = Context::from_waker(Waker::noop());
        let r = Pin::new(&mut Retrying(&mut Broken)).poll_write(&mut cx, b"x");
        assert!(matches!(r, Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::BrokenPipe));
    }
}
