//! The two halves of a split connection.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};

use crate::error::{Error, Result};
use crate::proto::Role;
use crate::proto::message::{Message, PreparedMessage};
use crate::stream::WebSocketStream;
use crate::stream::read::{ReadState, Transport};
use crate::stream::write::WriteState;

/// What both halves reach: the sending state with its half of the transport.
#[derive(Debug)]
struct Shared<S> {
    writer: Mutex<Writer<S>>,
    /// Mirrors the core's `is_close_sent`, so the receiver can ask without
    /// taking the lock on every read.
    close_sent: AtomicBool,
    /// Mirrors the core's `is_transport_ended`, for the same reason.
    transport_ended: AtomicBool,
    /// The receiver waiting for input: a sender whose write fails wakes it,
    /// as no input is coming either.
    reader: AtomicWaker,
}

#[derive(Debug)]
struct Writer<S> {
    state: WriteState,
    io: WriteHalf<S>,
}

impl<S> Shared<S> {
    fn lock(&self) -> MutexGuard<'_, Writer<S>> {
        // A panic while holding the lock leaves the queue consistent (every
        // update is a whole frame), so a poisoned lock is still usable.
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the sending state, then publishes `close_sent`.
    fn with<T>(&self, f: impl FnOnce(&mut WriteState, &mut WriteHalf<S>) -> T) -> T {
        let mut guard = self.lock();
        let w = &mut *guard;
        let r = f(&mut w.state, &mut w.io);
        self.close_sent
            .store(w.state.conn.is_close_sent(), Ordering::Release);
        if w.state.conn.is_transport_ended() && !self.transport_ended.swap(true, Ordering::AcqRel) {
            self.reader.wake();
        }
        r
    }
}

pub(super) fn split<S>(
    io: S,
    reader: ReadState,
    writer: WriteState,
) -> (WebSocketSender<S>, WebSocketReceiver<S>)
where
    S: AsyncRead + AsyncWrite,
{
    let (rd, wr) = tokio::io::split(io);
    let shared = Arc::new(Shared {
        close_sent: AtomicBool::new(writer.conn.is_close_sent()),
        transport_ended: AtomicBool::new(writer.conn.is_transport_ended()),
        reader: AtomicWaker::new(),
        writer: Mutex::new(Writer {
            state: writer,
            io: wr,
        }),
    });
    (
        WebSocketSender {
            shared: shared.clone(),
        },
        WebSocketReceiver { reader, rd, shared },
    )
}

/// The sending half of a split [`WebSocketStream`]: a [`Sink`] of messages,
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
        self.shared.with(|w, _| w.wake_writers());
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
            self.shared.with(|w, _| w.wake_writers());
        }
    }
}

/// The receiving half of a split [`WebSocketStream`]: a [`Stream`] of
/// messages. It answers pings and close frames itself.
#[derive(Debug)]
pub struct WebSocketReceiver<S> {
    reader: ReadState,
    rd: ReadHalf<S>,
    shared: Arc<Shared<S>>,
}

/// The receiving half's transport.
struct Half<'a, S> {
    rd: &'a mut ReadHalf<S>,
    shared: &'a Shared<S>,
}

impl<S: AsyncRead + AsyncWrite> Transport for Half<'_, S> {
    type Read = ReadHalf<S>;
    type Write = WriteHalf<S>;
    const FLUSHES_ALL_BEFORE_READ: bool = false;

    fn read_io(&mut self) -> &mut ReadHalf<S> {
        self.rd
    }

    fn with_writer<T>(&mut self, f: impl FnOnce(&mut WriteState, &mut WriteHalf<S>) -> T) -> T {
        self.shared.with(f)
    }

    fn close_sent(&self) -> bool {
        self.shared.close_sent.load(Ordering::Acquire)
    }

    fn transport_ended(&self) -> bool {
        self.shared.transport_ended.load(Ordering::Acquire)
    }

    fn wait_for_input(&mut self, cx: &Context<'_>) {
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
        self.reader.close_received
    }

    /// Puts the two halves back together; fails (returning both) if they
    /// came from different connections or other clones of the sender remain.
    ///
    /// ```
    /// # use wavesock::{Config, Role, WebSocketStream};
    /// let (io, _peer) = tokio::io::duplex(64);
    /// let ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default())?;
    /// let (tx, rx) = ws.split();
    /// let ws = rx.reunite(tx).expect("same connection");
    /// # Ok::<(), wavesock::Error>(())
    /// ```
    #[allow(clippy::result_large_err)]
    pub fn reunite(
        self,
        other: WebSocketSender<S>,
    ) -> std::result::Result<WebSocketStream<S>, (WebSocketSender<S>, WebSocketReceiver<S>)>
    where
        S: Unpin,
    {
        // Clones of the sender still about would be left without a
        // connection.
        if !Arc::ptr_eq(&self.shared, &other.shared) || Arc::strong_count(&self.shared) > 2 {
            return Err((other, self));
        }
        drop(other);
        let shared = Arc::try_unwrap(self.shared)
            .unwrap_or_else(|_| unreachable!("both halves were given back"));
        let writer = shared
            .writer
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(WebSocketStream {
            io: self.rd.unsplit(writer.io),
            reader: self.reader,
            writer: writer.state,
        })
    }
}

impl<S> WebSocketSender<S> {
    /// Whether a close frame has been sent (by either half).
    pub fn is_close_sent(&self) -> bool {
        self.shared.close_sent.load(Ordering::Acquire)
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

    async fn queue(&mut self, start: impl FnOnce(&mut WriteState) -> Result<()>) -> Result<()> {
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
        let mut t = Half {
            rd: &mut this.rd,
            shared: &this.shared,
        };
        this.reader.poll_next(&mut t, cx)
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
