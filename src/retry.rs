//! Transport calls that fail with `Interrupted` are tried again, as that
//! error asks (std's `read_exact` and `write_all` do the same), a few times
//! in one poll. `WouldBlock` (an adapter over a non-blocking socket that
//! says "not now" as an error instead of `Pending`) is not a failure
//! either. Neither registers a waker, so the task wakes itself to ask
//! again on its next turn; but once a thread's transport calls have said
//! so [`STREAK`] times in a row with nothing moving in between, the task
//! is woken after a short pause ([`RETRY_PAUSE`]) instead, by one thread
//! shared by the process and made the first time it is needed: asked
//! again at once for ever, a transport that keeps saying so would make its
//! task spin on a core. An adapter that says "not now" now and then pays
//! nothing for it. The guide's "What wavesock keeps per thread" tells
//! users about the thread; a per-runtime timer cannot replace it, since a
//! runtime built without a time driver panics on the first timer.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Tries in one poll before yielding.
const TRIES: usize = 8;

/// Calls in a row on one thread that said "not now" (with no call that
/// moved anything between them) before the pause applies.
pub(crate) const STREAK: u32 = 16;

thread_local! {
    /// This thread's run of "not now" answers, reset by any other answer.
    static NOT_NOW: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// How long a task whose transport keeps saying "not now" without a waker
/// waits before it asks again.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(1);

/// Tasks to wake after [`RETRY_PAUSE`], and the thread that wakes them.
struct Later {
    wakers: Mutex<Vec<Waker>>,
    ready: Condvar,
}

/// Wakes `waker` after [`RETRY_PAUSE`]. The thread sleeps on a condition
/// variable while nobody waits; should it not start, the task is woken at
/// once, as before there was a thread.
fn wake_later(waker: &Waker) {
    static LATER: OnceLock<Option<Arc<Later>>> = OnceLock::new();
    let later = LATER.get_or_init(|| {
        let later = Arc::new(Later {
            wakers: Mutex::new(Vec::new()),
            ready: Condvar::new(),
        });
        let shared = Arc::clone(&later);
        std::thread::Builder::new()
            .name("wavesock-retry".into())
            .spawn(move || {
                loop {
                    let mut wakers = shared.wakers.lock().unwrap_or_else(|e| e.into_inner());
                    while wakers.is_empty() {
                        wakers = shared.ready.wait(wakers).unwrap_or_else(|e| e.into_inner());
                    }
                    drop(wakers);
                    std::thread::sleep(RETRY_PAUSE);
                    let due = std::mem::take(
                        &mut *shared.wakers.lock().unwrap_or_else(|e| e.into_inner()),
                    );
                    due.into_iter().for_each(Waker::wake);
                }
            })
            .ok()
            .map(|_| later)
    });
    match later {
        Some(later) => {
            let mut wakers = later.wakers.lock().unwrap_or_else(|e| e.into_inner());
            if !wakers.iter().any(|w| w.will_wake(waker)) {
                wakers.push(waker.clone());
            }
            later.ready.notify_one();
        }
        None => waker.wake_by_ref(),
    }
}

/// Inlined into every transport call of the Stream (two reads and a write
/// per echoed message): out of line, its prologue and epilogue alone cost
/// more than the checks. The "not now" path stays out of line.
#[inline]
fn retry<T>(
    cx: &mut Context<'_>,
    mut f: impl FnMut(&mut Context<'_>) -> Poll<io::Result<T>>,
) -> Poll<io::Result<T>> {
    for _ in 0..TRIES {
        match f(cx) {
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
            Poll::Pending => return Poll::Pending,
            other => {
                NOT_NOW.with(|n| {
                    if n.get() != 0 {
                        n.set(0);
                    }
                });
                return other;
            }
        }
    }
    not_now(cx)
}

/// The transport said "not now" without a waker: wake the task to ask
/// again, at once or, past a streak, after a pause.
#[cold]
#[inline(never)]
fn not_now<T>(cx: &mut Context<'_>) -> Poll<io::Result<T>> {
    let streak = NOT_NOW.with(|n| {
        let streak = n.get().saturating_add(1);
        n.set(streak);
        streak
    });
    if streak < STREAK {
        cx.waker().wake_by_ref();
    } else {
        wake_later(cx.waker());
    }
    Poll::Pending
}

/// A borrowed transport whose calls retry `Interrupted`.
#[derive(Debug)]
pub(crate) struct Retrying<'a, S: ?Sized>(pub(crate) &'a mut S);

impl<S: AsyncRead + Unpin + ?Sized> AsyncRead for Retrying<'_, S> {
    #[inline]
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
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let io = &mut *self.get_mut().0;
        retry(cx, |cx| Pin::new(&mut *io).poll_write(cx, data))
    }

    #[inline]
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

    #[inline]
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

    /// Counts its wake-ups.
    struct Count(std::sync::atomic::AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn a_transport_that_says_not_now_is_asked_again_after_a_pause_not_at_once() {
        let count = Arc::new(Count(Default::default()));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut io = Flaky {
            fails: usize::MAX,
            calls: 0,
            kind: io::ErrorKind::WouldBlock,
        };
        let mut byte = [0u8; 1];
        let woken = || count.0.load(std::sync::atomic::Ordering::SeqCst);
        let mut poll = |io: &mut Flaky| {
            let mut buf = ReadBuf::new(&mut byte);
            Pin::new(&mut Retrying(io)).poll_read(&mut cx, &mut buf)
        };
        // Now and then: asked again on the task's next turn.
        for i in 1..STREAK {
            assert!(poll(&mut io).is_pending());
            assert_eq!(woken(), i as usize);
        }
        // For ever: after a pause, not within the poll (that would spin).
        assert!(poll(&mut io).is_pending());
        assert_eq!(woken(), STREAK as usize - 1, "not woken within the poll");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while woken() < STREAK as usize {
            assert!(std::time::Instant::now() < deadline, "woken later");
            std::thread::sleep(RETRY_PAUSE);
        }
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
