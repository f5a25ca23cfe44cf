//! The two halves of a split connection.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};

use crate::error::{Error, Result};
use crate::proto::Role;
use crate::proto::conn::State;
use crate::proto::message::{Message, PreparedMessage};
use crate::stream::core::Core;
use crate::stream::read::{CoreLink, ReadState};

/// What both halves reach: the core with the transport's writing half.
#[derive(Debug)]
struct Shared<S> {
    locked: Mutex<Locked<S>>,
    /// The core's [`State`], published after every call under the lock.
    /// The receiver reads it on every poll; an atomic byte spares it the
    /// lock on the data path.
    state: AtomicU8,
    /// The receiver waiting for input: a sender that changes the core's
    /// state (a failed write, our close frame) wakes it to act on that.
    reader: AtomicWaker,
    /// How often the lock was taken, for the tests that count it.
    #[cfg(test)]
    locks: std::sync::atomic::AtomicUsize,
}

#[derive(Debug)]
struct Locked<S> {
    core: Core,
    io: WriteHalf<S>,
}

impl<S> Shared<S> {
    fn lock(&self) -> MutexGuard<'_, Locked<S>> {
        #[cfg(test)]
        self.locks.fetch_add(1, Ordering::Relaxed);
        // A panic while holding the lock leaves the queue consistent (every
        // update is a whole frame), so a poisoned lock is still usable.
        self.locked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the core for a sender, then publishes its state and,
    /// if that changed, wakes the receiver to act on it.
    fn with<T>(&self, f: impl FnOnce(&mut Core, &mut WriteHalf<S>) -> T) -> T {
        let (r, changed) = self.with_quiet(f);
        if changed {
            self.reader.wake();
        }
        r
    }

    /// Runs `f` on the core, then publishes its state; whether that changed.
    /// For the receiver itself, which acts on what it changed without being
    /// woken (a wake would also use up the waker it registered).
    fn with_quiet<T>(&self, f: impl FnOnce(&mut Core, &mut WriteHalf<S>) -> T) -> (T, bool) {
        let mut guard = self.lock();
        let locked = &mut *guard;
        let r = f(&mut locked.core, &mut locked.io);
        let state = locked.core.d.conn().state().to_bits();
        (r, self.state.swap(state, Ordering::AcqRel) != state)
    }

    fn state(&self) -> State {
        State::from_bits(self.state.load(Ordering::Acquire))
    }
}

pub(super) fn split<S>(
    io: S,
    mut reader: ReadState,
    core: Core,
) -> (WebSocketSender<S>, WebSocketReceiver<S>)
where
    S: AsyncRead + AsyncWrite,
{
    reader.set_split(true);
    let (rd, wr) = tokio::io::split(io);
    let shared = Arc::new(Shared {
        state: AtomicU8::new(core.d.conn().state().to_bits()),
        reader: AtomicWaker::new(),
        #[cfg(test)]
        locks: Default::default(),
        locked: Mutex::new(Locked { core, io: wr }),
    });
    (
        WebSocketSender {
            shared: shared.clone(),
        },
        WebSocketReceiver { reader, rd, shared },
    )
}

/// The sending half of a split [`WebSocketStream`](crate::WebSocketStream): a [`Sink`] of messages,
/// and a handle that can be cloned to send from many tasks.
///
/// Clones share one connection and one write queue; no lock is held while
/// waiting on the transport (only for the moment a frame is queued or a
/// write call made), so there is no `Arc<Mutex<..>>` to build. Each
/// [`send`](Self::send) queues its message whole: messages sent through
/// one handle keep their order, and messages from different handles never
/// interleave on the wire. Under backpressure `send` waits like the
/// [`Sink`], each task for itself.
///
/// Closing: the first close frame sent (by any clone, or by the receiver
/// answering the peer's close) ends sending for all of them; later sends
/// fail with [`Error::AlreadyClosed`] (or [`Error::ConnectionClosed`] when
/// the peer closed). Dropping handles never closes the connection: the
/// receiver keeps reading and answering pings, and dropping the receiver
/// and every sender drops the connection without a close frame.
///
/// The close timeout ([`Config::close_timeout`](crate::Config::close_timeout))
/// is served by the receiving half: while a task polls it, the connection
/// ends at the deadline. [`SinkExt::close`](futures_util::SinkExt::close) on a sender
/// with nobody reading waits for the transport to take the close frame,
/// with no deadline of its own (as the unsplit stream's `Sink::close`;
/// [`WebSocketStream::close`](crate::WebSocketStream::close) is the bounded
/// one): keep the receiver polled, or bound the call.
///
/// ```
/// use futures_util::StreamExt;
/// use wavesock::{Config, Message, Role, WebSocketStream};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> wavesock::Result<()> {
/// let (a, b) = tokio::io::duplex(4096);
/// let (tx, _rx) = WebSocketStream::from_raw_socket(a, Role::Server, Config::default())?.split();
/// let mut peer = WebSocketStream::from_raw_socket(b, Role::Client, Config::default())?;
/// let tasks: Vec<_> = (0..3)
///     .map(|i| {
///         let mut tx = tx.clone();
///         tokio::spawn(async move { tx.send(Message::text(format!("from task {i}"))).await })
///     })
///     .collect();
/// for t in tasks {
///     t.await.unwrap()?;
/// }
/// for _ in 0..3 {
///     let msg = peer.next().await.unwrap()?;
///     assert!(msg.to_text()?.starts_with("from task"));
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct WebSocketSender<S> {
    shared: Arc<Shared<S>>,
}

impl<S> Drop for WebSocketSender<S> {
    fn drop(&mut self) {
        // A send of this handle's, dropped while waiting, may have been the
        // one the transport would have woken: let the others ask again.
        self.shared.with(|c, _| c.write.wake_writers());
    }
}

impl<S> Clone for WebSocketSender<S> {
    fn clone(&self) -> Self {
        WebSocketSender {
            shared: self.shared.clone(),
        }
    }
}

/// Wakes the other waiting senders if a send is dropped before it is done:
/// its task may have been the one the transport would have woken.
struct CancelGuard<'a, S> {
    shared: &'a Shared<S>,
    done: bool,
}

impl<S> Drop for CancelGuard<'_, S> {
    fn drop(&mut self) {
        if !self.done {
            self.shared.with(|c, _| c.write.wake_writers());
        }
    }
}

/// The receiving half of a split [`WebSocketStream`](crate::WebSocketStream): a [`Stream`] of
/// messages. It answers pings and close frames itself.
#[derive(Debug)]
pub struct WebSocketReceiver<S> {
    reader: ReadState,
    rd: ReadHalf<S>,
    shared: Arc<Shared<S>>,
}

/// How the receiving half reaches the core: through the lock it shares
/// with the senders.
struct SplitLink<'a, S> {
    rd: &'a mut ReadHalf<S>,
    shared: &'a Shared<S>,
}

impl<S: AsyncRead + AsyncWrite> CoreLink for SplitLink<'_, S> {
    type Read = ReadHalf<S>;
    type Write = WriteHalf<S>;

    fn read_io(&mut self) -> &mut ReadHalf<S> {
        self.rd
    }

    fn with_core<T>(&mut self, f: impl FnOnce(&mut Core, &mut WriteHalf<S>) -> T) -> T {
        self.shared.with_quiet(f).0
    }

    fn state(&self) -> State {
        self.shared.state()
    }

    fn watch_state(&mut self, cx: &Context<'_>) {
        self.shared.reader.register(cx.waker());
    }
}

impl<S> WebSocketReceiver<S> {
    /// Which side of the connection this is.
    pub fn role(&self) -> Role {
        self.reader.role()
    }

    /// Whether the peer's close frame has been received.
    pub fn is_close_received(&self) -> bool {
        self.shared.state().is_close_received()
    }
}

/// The parts of the connection `rx` and `tx` were split from, to put back
/// together; both back if they came from different connections or other
/// clones of the sender remain.
#[allow(clippy::result_large_err, clippy::type_complexity)]
pub(super) fn into_parts<S>(
    rx: WebSocketReceiver<S>,
    tx: WebSocketSender<S>,
) -> std::result::Result<(S, ReadState, Core), (WebSocketSender<S>, WebSocketReceiver<S>)>
where
    S: Unpin,
{
    // Clones of the sender still about would be left without a
    // connection.
    if !Arc::ptr_eq(&rx.shared, &tx.shared) || Arc::strong_count(&rx.shared) > 2 {
        return Err((tx, rx));
    }
    drop(tx);
    let shared =
        Arc::try_unwrap(rx.shared).unwrap_or_else(|_| unreachable!("both halves were given back"));
    let locked = shared
        .locked
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    let mut reader = rx.reader;
    reader.set_split(false);
    Ok((rx.rd.unsplit(locked.io), reader, locked.core))
}

impl<S> WebSocketSender<S> {
    /// Whether a close frame has been sent (by either half).
    pub fn is_close_sent(&self) -> bool {
        self.shared.state().is_close_sent()
    }
}

impl<S> WebSocketSender<S>
where
    S: AsyncRead + AsyncWrite,
{
    /// Queues `msg` once the write queue has room, without writing it out:
    /// it goes with the next [`send`](Self::send) or flush, by any clone.
    /// The same as [`SinkExt::feed`](futures_util::SinkExt::feed), safe to
    /// cancel.
    pub async fn feed(&mut self, msg: Message) -> Result<()> {
        self.queue(|w| w.start_send(msg)).await
    }

    /// Sends `msg` and writes out the queue. The same as
    /// [`SinkExt::send`](futures_util::SinkExt::send); cancelled, the message
    /// may or may not have been queued.
    pub async fn send(&mut self, msg: Message) -> Result<()> {
        self.feed(msg).await?;
        self.flush().await
    }

    /// Like [`feed`](Self::feed) for a [`PreparedMessage`].
    pub async fn feed_prepared(&mut self, msg: &PreparedMessage) -> Result<()> {
        self.queue(|w| w.start_send_prepared(msg)).await
    }

    /// Like [`send`](Self::send) for a [`PreparedMessage`]: for a server, the
    /// frame encoded once is queued as it is.
    pub async fn send_prepared(&mut self, msg: &PreparedMessage) -> Result<()> {
        self.feed_prepared(msg).await?;
        self.flush().await
    }

    /// Writes out everything queued, by this handle or any other.
    pub async fn flush(&mut self) -> Result<()> {
        let shared = &*self.shared;
        let mut guard = CancelGuard {
            shared,
            done: false,
        };
        poll_fn(|cx| shared.with(|w, io| w.poll_flush(io, cx))).await?;
        guard.done = true;
        Ok(())
    }

    async fn queue(&mut self, start: impl FnOnce(&mut Core) -> Result<()>) -> Result<()> {
        let shared = &*self.shared;
        let mut guard = CancelGuard {
            shared,
            done: false,
        };
        poll_fn(|cx| shared.with(|w, io| w.poll_ready(io, cx))).await?;
        guard.done = true;
        shared.with(|w, _| start(w))
    }
}

impl<S> Stream for WebSocketReceiver<S>
where
    S: AsyncRead + AsyncWrite,
{
    type Item = Result<Message>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let mut link = SplitLink {
            rd: &mut this.rd,
            shared: &this.shared,
        };
        this.reader.poll_next(&mut link, cx)
    }
}

impl<S> Sink<Message> for WebSocketSender<S>
where
    S: AsyncRead + AsyncWrite,
{
    type Error = Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.shared.with(|w, io| w.poll_ready(io, cx))
    }

    fn start_send(self: Pin<&mut Self>, msg: Message) -> Result<()> {
        self.shared.with(|w, _| w.start_send(msg))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.shared.with(|w, io| w.poll_flush(io, cx))
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.shared.with(|w, io| w.poll_close(io, cx))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::{SinkExt, StreamExt};

    use super::*;
    use crate::config::Config;
    use crate::stream::WebSocketStream;

    /// Data messages read through a split receiver take the shared lock
    /// only a bounded number of times (setting the timer once), keepalive
    /// on or off; a ping, whose pong is owed, takes it.
    #[tokio::test]
    async fn the_split_receiver_reads_data_without_the_lock() {
        for keepalive in [None, Some(Duration::from_secs(30))] {
            let (a, b) = tokio::io::duplex(1 << 20);
            let config = Config::default().ping_interval(keepalive);
            let server = WebSocketStream::from_raw_socket(a, Role::Server, config).unwrap();
            let mut client =
                WebSocketStream::from_raw_socket(b, Role::Client, Config::default()).unwrap();
            let (_tx, mut rx) = server.split();
            const N: usize = 1000;
            let before = rx.shared.locks.load(Ordering::Relaxed);
            // One message per read: each is sent, then read.
            for i in 0..N {
                client.send(Message::text(i.to_string())).await.unwrap();
                let msg = tokio::time::timeout(Duration::from_secs(5), rx.next())
                    .await
                    .unwrap_or_else(|_| panic!("message {i}"))
                    .unwrap()
                    .unwrap();
                assert_eq!(msg, Message::text(i.to_string()));
            }
            let data = rx.shared.locks.load(Ordering::Relaxed) - before;
            assert!(
                data <= 2,
                "keepalive {keepalive:?}: {data} locks for {N} data messages"
            );
            client
                .send(Message::Ping(Default::default()))
                .await
                .unwrap();
            let ping = tokio::time::timeout(Duration::from_secs(5), rx.next());
            assert!(ping.await.expect("the ping").unwrap().unwrap().is_ping());
            let ping = rx.shared.locks.load(Ordering::Relaxed) - before - data;
            assert!(ping >= 1, "keepalive {keepalive:?}: a ping took no lock");
            // The pong it owed is written when the receiver next waits for
            // input.
            let pong = tokio::time::timeout(Duration::from_secs(5), client.next());
            tokio::select! {
                msg = rx.next() => panic!("nothing more was sent: {msg:?}"),
                pong = pong => assert!(pong.expect("the pong").unwrap().unwrap().is_pong()),
            }
        }
    }
}
