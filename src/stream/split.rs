//! The two halves of a split connection.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};

use crate::error::{Error, Result};
use crate::proto::Role;
use crate::proto::message::Message;
use crate::stream::WebSocketStream;
use crate::stream::read::{ReadState, Transport};
use crate::stream::write::WriteState;

/// What both halves reach: the sending state with its half of the transport.
#[derive(Debug)]
struct Shared<S> {
    writer: Mutex<Writer<S>>,
    /// Mirrors `WriteState::close_sent`, so the receiver can ask without
    /// taking the lock on every read.
    close_sent: AtomicBool,
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
        self.close_sent.store(w.state.close_sent, Ordering::Release);
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
        close_sent: AtomicBool::new(writer.close_sent),
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

/// The sending half of a split [`WebSocketStream`]: a [`Sink`] of messages.
#[derive(Debug)]
pub struct WebSocketSender<S> {
    shared: Arc<Shared<S>>,
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
    const CORKS: bool = false;

    fn read_io(&mut self) -> &mut ReadHalf<S> {
        self.rd
    }

    fn with_writer<T>(&mut self, f: impl FnOnce(&mut WriteState, &mut WriteHalf<S>) -> T) -> T {
        self.shared.with(f)
    }

    fn close_sent(&self) -> bool {
        self.shared.close_sent.load(Ordering::Acquire)
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
    /// came from different connections.
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
        if !Arc::ptr_eq(&self.shared, &other.shared) {
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
