//! Ready for an engine's TCP sockets from a poller of its own.
//!
//! With Tokio's registration per socket, every readiness event of every
//! connection goes through the runtime's `ScheduledIo` (256 bytes a
//! socket), its waker and the engine's ready queue. Here the engine owns a
//! `mio::Poll` (epoll, kqueue) whose own descriptor is registered with
//! Tokio's reactor through [`AsyncFd`]: the engine is still an ordinary
//! task of the user's runtime, woken when any of its sockets has news, and
//! it reads the readiness of all of them with one call per turn. A socket
//! costs its slot and the kernel's registration, nothing in user space.
//!
//! Ready is edge-triggered: a socket is read or written until it says
//! "not now" (or a read comes back short, as Tokio also takes it), and is
//! not tried again until the poller reports it ready. The peer's end
//! (FIN), a reset or an error is different: it comes as one edge, often
//! the same edge as the last data, and no edge follows it; so, as Tokio's
//! `READ_CLOSED`, it is kept until a read has found it, and a short read
//! does not hide it.
//!
//! This is the one module of the crate with `unsafe` code: reading into a
//! read buffer's spare capacity without zeroing it first, as Tokio's own
//! `TcpStream` does. The safe alternative initializes the whole spare
//! capacity on every read (512 KiB for the engine's shared buffer), which
//! costs more than the echo it serves; `tests::reads_match_the_safe_path`
//! checks the two agree.
#![allow(unsafe_code)]

use std::io::{self, IoSlice, Write};
use std::net::{Shutdown, SocketAddr};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::BytesMut;
use mio::{Events, Interest, Token};
use tokio::io::ReadBuf;
use tokio::io::unix::AsyncFd;

/// The listener's token; connections use their slot number.
pub(crate) const LISTENER: Token = Token(usize::MAX);

/// Events read per call: a turn with more calls again, up to `ROUNDS`.
const EVENTS: usize = 1024;
/// Calls per turn before the engine lets other tasks run.
const ROUNDS: usize = 8;

/// An engine's poller, registered with the runtime's reactor.
pub(crate) struct Poller {
    poll: AsyncFd<mio::Poll>,
    events: Events,
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Poller")
    }
}

/// What one event says of a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ready {
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    /// The peer's end, a reset, a hang-up or an error: for the next read
    /// or write to find.
    pub(crate) closed: bool,
}

impl Poller {
    /// A poller on the current runtime's reactor (which must have I/O
    /// enabled).
    pub(crate) fn new() -> io::Result<Self> {
        Self::with_events(EVENTS)
    }

    /// A poller reading at most `events` events per call.
    fn with_events(events: usize) -> io::Result<Self> {
        let poll = mio::Poll::new()?;
        // SAFETY: a `mio::Poll` owns its descriptor from `new` to its
        // drop and always answers `as_raw_fd` with it; the `AsyncFd` owns
        // the `Poll`, so the descriptor outlives the registration.
        let poll = unsafe { AsyncFd::register_with_interest(poll, tokio::io::Interest::READABLE)? };
        Ok(Poller {
            poll,
            events: Events::with_capacity(events),
        })
    }

    /// Registers a socket for both directions, edge-triggered.
    pub(crate) fn register(
        &self,
        source: &mut impl mio::event::Source,
        token: Token,
    ) -> io::Result<()> {
        self.poll.get_ref().registry().register(
            source,
            token,
            Interest::READABLE | Interest::WRITABLE,
        )
    }

    /// Registers a listener for incoming connections.
    pub(crate) fn register_listener(&self, listener: &mut mio::net::TcpListener) -> io::Result<()> {
        self.poll
            .get_ref()
            .registry()
            .register(listener, LISTENER, Interest::READABLE)
    }

    /// Hands every event waiting to `f`, without blocking; registers the
    /// task to be woken for the next ones. With more than a turn's worth
    /// waiting, the task is woken again at once.
    pub(crate) fn harvest(
        &mut self,
        cx: &mut Context<'_>,
        mut f: impl FnMut(Token, Ready),
    ) -> io::Result<()> {
        for _ in 0..ROUNDS {
            let mut guard = match self.poll.poll_read_ready_mut(cx) {
                Poll::Ready(guard) => guard?,
                Poll::Pending => return Ok(()),
            };
            match guard
                .get_inner_mut()
                .poll(&mut self.events, Some(Duration::ZERO))
            {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let mut count = 0;
            for event in self.events.iter() {
                count += 1;
                // Errors and hang-ups are for the next read or write to
                // find: kept by the socket until then (see `Polled`).
                let closed = event.is_error() || event.is_read_closed() || event.is_write_closed();
                f(
                    event.token(),
                    Ready {
                        readable: event.is_readable() || closed,
                        writable: event.is_writable() || closed,
                        closed,
                    },
                );
            }
            if count < self.events.capacity() {
                // All read: the reactor reports the next ones. (A readiness
                // it saw meanwhile is kept by `clear_ready`.)
                guard.clear_ready();
            }
        }
        cx.waker().wake_by_ref();
        Ok(())
    }
}

/// A TCP connection read by its engine's poller.
#[derive(Debug)]
pub(crate) struct Polled {
    io: mio::net::TcpStream,
    /// The poller said so and no read has since found the socket empty.
    readable: bool,
    writable: bool,
    /// The poller reported the end of the input, a hang-up or an error:
    /// sticky, as no edge follows it, so that a short read or write does
    /// not hide it; a read returns it (0 bytes, or the error) after
    /// whatever data came before it.
    closed: bool,
}

impl Polled {
    /// A connection to register (nonblocking, as mio's accept makes it).
    pub(crate) fn new(io: mio::net::TcpStream) -> Self {
        // Until the poller says otherwise: data may have come with the
        // connection, and a new socket has room to write.
        Polled {
            io,
            readable: true,
            writable: true,
            closed: false,
        }
    }

    pub(crate) fn source(&mut self) -> &mut mio::net::TcpStream {
        &mut self.io
    }

    /// Takes what the poller reported.
    #[inline]
    pub(crate) fn ready(&mut self, r: Ready) {
        self.readable |= r.readable;
        self.writable |= r.writable;
        self.closed |= r.closed;
    }

    pub(crate) fn peer_addr(&self) -> Option<SocketAddr> {
        self.io.peer_addr().ok()
    }

    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.io.local_addr().ok()
    }

    /// Reads into `buf`'s unfilled part; `Pending` once the socket is
    /// empty, until the poller reports it readable.
    pub(crate) fn poll_read(&mut self, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        // SAFETY: `recv` writes only initialized bytes into the slice and
        // never reads it, so handing it uninitialized memory is sound;
        // nothing in it is marked initialized before `recv` says how much
        // it wrote.
        let dst = unsafe { buf.unfilled_mut() };
        let n = ready!(self.recv(dst))?;
        // SAFETY: `recv` initialized the first `n` bytes of the unfilled
        // part.
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        Poll::Ready(Ok(()))
    }

    /// Reads at most `limit` bytes into `buf`'s spare capacity (64 bytes
    /// made if it has none), as `poll_read` does, without a `ReadBuf` in
    /// between: the engine's read into its shared buffer, once per message
    /// in a ping-pong.
    #[inline]
    pub(crate) fn read_buf(&mut self, buf: &mut BytesMut, limit: usize) -> Poll<io::Result<usize>> {
        if !self.readable {
            return Poll::Pending;
        }
        if buf.capacity() == buf.len() {
            buf.reserve(64);
        }
        let spare = buf.spare_capacity_mut();
        let room = spare.len().min(limit.max(1));
        let n = ready!(self.recv(&mut spare[..room]))?;
        // SAFETY: `recv` initialized the first `n` bytes of the spare
        // capacity (it writes, never reads, and says how much it wrote),
        // so they are the buffer's now.
        unsafe { buf.set_len(buf.len() + n) };
        Poll::Ready(Ok(n))
    }

    /// One `recv` into `dst`, as the two reads above share it: `Pending`
    /// (without asking the kernel) while the socket is known empty; a
    /// short read marks it empty, as Tokio takes it, and a new edge comes
    /// with new data. Not once the end was reported: the read after the
    /// last data returns it.
    #[inline]
    fn recv(&mut self, dst: &mut [std::mem::MaybeUninit<u8>]) -> Poll<io::Result<usize>> {
        if !self.readable {
            return Poll::Pending;
        }
        let want = dst.len();
        let sock = socket2::SockRef::from(&self.io);
        loop {
            match sock.recv(&mut *dst) {
                Ok(n) => {
                    if n < want {
                        // Empty, unless the end is still to be read.
                        self.readable = self.closed;
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Reported closed, and still nothing to read: the
                    // output's end alone, or an event that went stale (a
                    // FIN or a reset reads as 0 or an error for ever).
                    self.readable = false;
                    self.closed = false;
                    return Poll::Pending;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Writes from `bufs`; `Pending` while the socket is full.
    pub(crate) fn poll_write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let want = bufs.iter().map(|b| b.len()).sum();
        self.poll_write_with(want, |mut io| match bufs {
            [one] => io.write(one),
            _ => io.write_vectored(bufs),
        })
    }

    /// Writes from `buf` (an echo's reply, most often); `Pending` while the
    /// socket is full.
    #[inline]
    pub(crate) fn poll_write(&mut self, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_with(buf.len(), |mut io| io.write(buf))
    }

    /// One write of `want` bytes, as `write` makes it.
    #[inline]
    fn poll_write_with(
        &mut self,
        want: usize,
        write: impl Fn(&mio::net::TcpStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        if !self.writable {
            return Poll::Pending;
        }
        loop {
            match write(&self.io) {
                Ok(n) => {
                    if n < want {
                        // Full, unless closed: the next write finds out.
                        self.writable = self.closed;
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // The peer's end leaves writing as it was: full is
                    // full, and the poller reports room again.
                    self.writable = false;
                    return Poll::Pending;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    pub(crate) fn shutdown(&mut self) -> io::Result<()> {
        self.io.shutdown(Shutdown::Write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::Waker;

    const READABLE: Ready = Ready {
        readable: true,
        writable: false,
        closed: false,
    };

    fn pair() -> (std::net::TcpStream, Polled) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        b.set_nonblocking(true).unwrap();
        (a, Polled::new(mio::net::TcpStream::from_std(b)))
    }

    /// Reading into uninitialized memory gives what a safe `Read` of the
    /// same bytes gives, a short read marks the socket empty, and an empty
    /// socket is `Pending` without asking the kernel again.
    #[test]
    fn reads_match_the_safe_path() {
        let (mut a, mut p) = pair();
        let (mut c, mut safe) = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            (c, l.accept().unwrap().0)
        };
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        a.write_all(&data).unwrap();
        c.write_all(&data).unwrap();
        let mut got = Vec::new();
        let mut storage = vec![std::mem::MaybeUninit::<u8>::uninit(); 1500];
        while got.len() < data.len() {
            let mut buf = ReadBuf::uninit(&mut storage);
            match p.poll_read(&mut buf) {
                Poll::Ready(r) => {
                    r.unwrap();
                    got.extend_from_slice(buf.filled());
                }
                // Short read: wait as the poller would, then say ready.
                Poll::Pending => {
                    std::thread::sleep(Duration::from_millis(5));
                    p.ready(READABLE);
                }
            }
        }
        let mut expected = vec![0; data.len()];
        safe.read_exact(&mut expected).unwrap();
        assert_eq!(got, expected);
        assert_eq!(got, data);
        // Empty now: the next read finds out (WouldBlock), and then the
        // socket is not tried until the poller says so.
        let mut buf = ReadBuf::uninit(&mut storage);
        assert!(p.poll_read(&mut buf).is_pending());
        assert!(!p.readable);
        a.write_all(b"more").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(p.poll_read(&mut buf).is_pending(), "not ready until told");
        p.ready(READABLE);
        match p.poll_read(&mut buf) {
            Poll::Ready(Ok(())) => assert_eq!(buf.filled(), b"more"),
            other => panic!("{other:?}"),
        }
        assert!(!p.readable, "a short read marks it empty");
    }

    /// The same through `read_buf`, into a `BytesMut` that already holds
    /// bytes (they stay in front) and into one with no spare room.
    #[test]
    fn read_buf_appends_what_the_safe_path_reads() {
        let (mut a, mut p) = pair();
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 13 % 247) as u8).collect();
        let writer = {
            let data = data.clone();
            std::thread::spawn(move || a.write_all(&data).map(|()| a))
        };
        let mut buf = BytesMut::from(&b"kept"[..]);
        assert_eq!(buf.capacity(), buf.len());
        while buf.len() < 4 + data.len() {
            match p.read_buf(&mut buf, usize::MAX) {
                Poll::Ready(Ok(n)) => assert!(n > 0, "not at the end yet"),
                Poll::Ready(Err(e)) => panic!("{e}"),
                Poll::Pending => {
                    std::thread::sleep(Duration::from_millis(1));
                    p.ready(READABLE);
                }
            }
        }
        assert_eq!(&buf[..4], b"kept");
        assert_eq!(&buf[4..], &data[..]);
        // The peer closes: the end reads as 0 bytes.
        drop(writer.join().unwrap().unwrap());
        p.ready(READABLE);
        let end = loop {
            match p.read_buf(&mut buf, usize::MAX) {
                Poll::Ready(r) => break r.unwrap(),
                Poll::Pending => {
                    std::thread::sleep(Duration::from_millis(1));
                    p.ready(READABLE);
                }
            }
        };
        assert_eq!(end, 0);
    }

    /// The last data and the peer's FIN in one edge: the short read that
    /// takes the data must not hide the end, which no later edge reports.
    /// A reset the same way: its error comes after the data.
    #[test]
    fn the_end_that_came_with_the_last_data_is_read_after_it() {
        for reset in [false, true] {
            let (a, mut p) = pair();
            (&a).write_all(b"last").unwrap();
            if reset {
                socket2::SockRef::from(&a)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
                drop(a);
            } else {
                a.shutdown(Shutdown::Write).unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
            p.ready(Ready {
                readable: true,
                writable: reset,
                closed: true,
            });
            let mut buf = BytesMut::with_capacity(64);
            let first = p.read_buf(&mut buf, usize::MAX);
            if reset && matches!(first, Poll::Ready(Err(_))) {
                // Linux drops unread data on a reset: the error is all.
                continue;
            }
            assert!(matches!(first, Poll::Ready(Ok(4))), "{reset}: {first:?}");
            assert_eq!(&buf[..], b"last");
            match p.read_buf(&mut buf, usize::MAX) {
                Poll::Ready(Ok(0)) => assert!(!reset, "a reset reads as an error"),
                Poll::Ready(Err(_)) => assert!(reset, "a FIN reads as 0"),
                other => panic!("reset {reset}: the end is not seen: {other:?}"),
            }
        }
    }

    #[test]
    fn a_full_socket_is_pending_until_writable() {
        let (_a, mut p) = pair();
        let chunk = vec![7u8; 1 << 20];
        let mut total = 0;
        loop {
            match p.poll_write_vectored(&[IoSlice::new(&chunk)]) {
                Poll::Ready(Ok(n)) => total += n,
                Poll::Ready(Err(e)) => panic!("{e}"),
                Poll::Pending => break,
            }
            assert!(total < 1 << 30, "the peer never reads: it must fill");
        }
        assert!(!p.writable);
        assert!(
            p.poll_write_vectored(&[IoSlice::new(b"x")]).is_pending(),
            "not tried until the poller says so"
        );
    }

    /// More sockets ready than one call reads: the same harvest calls
    /// again until all are read, and past its rounds it leaves the rest
    /// for the next turn and wakes the task for it.
    #[tokio::test]
    async fn a_harvest_reads_past_one_calls_worth() {
        let mut poller = Poller::with_events(2).unwrap();
        let mut pairs: Vec<_> = (0..2 * ROUNDS + 3).map(|_| pair()).collect();
        for (i, (a, p)) in pairs.iter_mut().enumerate() {
            poller.register(p.source(), Token(i)).unwrap();
            a.write_all(b"x").unwrap();
        }
        // Let the reactor see the poller readable.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let woken = Arc::new(AtomicBool::new(false));
        let waker = Waker::from(Arc::new(Flag(woken.clone())));
        let mut cx = Context::from_waker(&waker);
        let mut seen = std::collections::BTreeSet::new();
        poller
            .harvest(&mut cx, |t, r| {
                assert!(r.readable);
                seen.insert(t.0);
            })
            .unwrap();
        assert_eq!(seen.len(), 2 * ROUNDS, "{ROUNDS} calls of 2 events");
        assert!(woken.load(Ordering::SeqCst), "more left: woken again");
        poller
            .harvest(&mut cx, |t, _| {
                seen.insert(t.0);
            })
            .unwrap();
        assert_eq!(seen.len(), pairs.len(), "the rest on the next turn");
    }

    struct Flag(Arc<AtomicBool>);

    impl std::task::Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn the_poller_reports_a_socket_by_its_token() {
        let (mut a, mut p) = pair();
        let mut poller = Poller::new().unwrap();
        poller.register(p.source(), Token(42)).unwrap();
        a.write_all(b"hi").unwrap();
        let mut seen = Vec::new();
        let start = std::time::Instant::now();
        while !seen
            .iter()
            .any(|(t, r): &(Token, Ready)| *t == Token(42) && r.readable)
        {
            std::future::poll_fn(|cx| {
                poller.harvest(cx, |t, r| seen.push((t, r))).unwrap();
                Poll::Ready(())
            })
            .await;
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert!(start.elapsed() < Duration::from_secs(10), "no event");
        }
    }
}
