//! Reading and dropping what a peer sends to a connection that is ending:
//! a transport closed with input unread is reset, and a reset throws away
//! what the peer has not read yet of what we wrote (our close frame
//! among it). How much is read in one go is the core's rule
//! ([`DISCARD_AT_ONCE`](crate::proto::receive::DISCARD_AT_ONCE)); this
//! only reads.

use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use crate::retry::Retrying;

/// What reading and dropping found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Discarded {
    /// Nothing more there now (the task is woken when there is).
    Pending,
    /// The peer ended the transport, or it failed.
    Ended,
    /// `limit` bytes dropped and more may be there.
    More,
}

/// Reads and drops up to `limit` bytes of what `io` has, without waiting.
/// Into the stack, 4 KiB at a time: rare, and kept off the engines' read
/// paths (a second caller of the hub's shared read cost its echo the
/// inlining of that read).
#[cold]
#[inline(never)]
pub(crate) fn discard<R: AsyncRead + Unpin + ?Sized>(
    io: &mut R,
    cx: &mut Context<'_>,
    limit: usize,
) -> Discarded {
    let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
    let mut left = limit;
    while left > 0 {
        let mut into = ReadBuf::uninit(&mut buf[..left.min(4096)]);
        match Pin::new(&mut Retrying(&mut *io)).poll_read(cx, &mut into) {
            Poll::Pending => return Discarded::Pending,
            Poll::Ready(Ok(())) if !into.filled().is_empty() => left -= into.filled().len(),
            Poll::Ready(_) => return Discarded::Ended,
        }
    }
    Discarded::More
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::task::noop_waker_ref;

    fn run(io: &mut (impl AsyncRead + Unpin), limit: usize) -> Discarded {
        discard(io, &mut Context::from_waker(noop_waker_ref()), limit)
    }

    #[test]
    fn drops_what_is_there_then_waits() {
        let (mut ours, mut theirs) = tokio::io::duplex(1 << 20);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(tokio::io::AsyncWriteExt::write_all(&mut theirs, &[1; 5000]))
            .unwrap();
        assert_eq!(run(&mut ours, 64 << 10), Discarded::Pending);
        // All of it was dropped: what comes next is new.
        rt.block_on(tokio::io::AsyncWriteExt::write_all(&mut theirs, b"next"))
            .unwrap();
        let mut four = [0; 4];
        rt.block_on(tokio::io::AsyncReadExt::read_exact(&mut ours, &mut four))
            .unwrap();
        assert_eq!(&four, b"next");
    }

    #[test]
    fn stops_at_the_limit_with_more_there() {
        let (mut ours, mut theirs) = tokio::io::duplex(1 << 20);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(tokio::io::AsyncWriteExt::write_all(
            &mut theirs,
            &[7; 10_000],
        ))
        .unwrap();
        assert_eq!(run(&mut ours, 6000), Discarded::More);
        // The limit held: exactly what is left is read next.
        let mut rest = Vec::new();
        rt.block_on(async {
            drop(theirs);
            tokio::io::AsyncReadExt::read_to_end(&mut ours, &mut rest).await
        })
        .unwrap();
        assert_eq!(rest.len(), 4000);
    }

    #[test]
    fn the_end_and_failures_end_it() {
        let mut io = tokio_test::io::Builder::new().read(&[1; 10]).build();
        assert_eq!(run(&mut io, 64 << 10), Discarded::Ended);
        let mut io = tokio_test::io::Builder::new()
            .read_error(std::io::Error::other("reset"))
            .build();
        assert_eq!(run(&mut io, 64 << 10), Discarded::Ended);
    }
}
