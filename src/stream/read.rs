//! The receiving side of a connection: reads, decodes, answers control
//! frames and runs the closing handshake, for the unsplit stream and the
//! receiving half alike.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Instant, Sleep, sleep_until};
use tokio_util::io::poll_read_buf;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::pool;
use crate::proto::Role;
use crate::proto::close::CloseCode;
use crate::proto::decoder::MessageDecoder;
use crate::proto::message::Message;
use crate::retry::Retrying;
use crate::stream::write::{Side, WriteState};
use crate::trace;

/// Reads are made at least this large while a frame's size is unknown.
const READ_CHUNK: usize = 8 << 10;

/// What the receiving side needs from its surroundings: the transport to
/// read, and access to the sending side for pongs and close replies.
pub(crate) trait Transport {
    type Read: AsyncRead + Unpin;
    type Write: AsyncWrite + Unpin;
    /// Whether the receiving side writes out everything queued before it
    /// waits for input (write coalescing for `feed` in a read loop). A split
    /// receiver leaves the sender's messages to the sender.
    const CORKS: bool;

    fn read_io(&mut self) -> &mut Self::Read;
    fn with_writer<T>(&mut self, f: impl FnOnce(&mut WriteState, &mut Self::Write) -> T) -> T;
    fn close_sent(&self) -> bool;
}

/// Keepalive state: a ping after `interval` of silence, the peer declared
/// dead when `timeout` passes after it with nothing received.
#[derive(Debug)]
struct Keepalive {
    interval: Duration,
    timeout: Duration,
    last_rx: Instant,
    ping_sent: Option<Instant>,
    timer: Option<Pin<Box<Sleep>>>,
}

enum Tick {
    Quiet,
    Ping,
    Dead,
}

impl Keepalive {
    fn poll(&mut self, cx: &mut Context<'_>) -> Tick {
        let first = self.last_rx + self.interval;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(sleep_until(first)));
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return Tick::Quiet;
            }
            let now = Instant::now();
            if let Some(sent) = self.ping_sent {
                if self.last_rx < sent {
                    return Tick::Dead;
                }
                self.ping_sent = None;
            }
            let due = self.last_rx + self.interval;
            if now < due {
                timer.as_mut().reset(due);
                continue;
            }
            self.ping_sent = Some(now);
            timer.as_mut().reset(now + self.timeout);
            // Registers the waker for the new deadline.
            let _ = timer.as_mut().poll(cx);
            return Tick::Ping;
        }
    }
}

#[derive(Debug)]
pub(crate) struct ReadState {
    decoder: MessageDecoder,
    read_buf: BytesMut,
    /// Messages handed out may share `read_buf`'s memory, so it must not go
    /// back to the pool.
    read_buf_shared: bool,
    pub(crate) close_received: bool,
    /// A protocol error waiting for our close frame to go out.
    failing: Option<Box<Error>>,
    terminated: bool,
    /// This side queued bytes (pongs, a close reply) that must go out even
    /// when the sending side is idle.
    owes: bool,
    close_timeout: Duration,
    /// Bounds the closing handshake once it starts; made when first needed.
    close_timer: Option<Pin<Box<Sleep>>>,
    // Boxed, like the error above: rare, and an idle connection should be small.
    keepalive: Option<Box<Keepalive>>,
    #[cfg(feature = "tracing")]
    pub(crate) span: tracing::Span,
}

impl ReadState {
    pub(crate) fn new(role: Role, config: &Config, read_buf: BytesMut) -> Self {
        ReadState {
            decoder: crate::codec::decoder(role, config),
            read_buf,
            read_buf_shared: false,
            close_received: false,
            failing: None,
            terminated: false,
            owes: false,
            close_timeout: config.close_timeout,
            close_timer: None,
            keepalive: config.ping_interval.map(|interval| {
                Box::new(Keepalive {
                    interval,
                    timeout: config.pong_timeout,
                    last_rx: Instant::now(),
                    ping_sent: None,
                    timer: None,
                })
            }),
            #[cfg(feature = "tracing")]
            span: tracing::debug_span!("websocket", ?role),
        }
    }

    pub(crate) fn role(&self) -> Role {
        self.decoder.role()
    }

    pub(crate) fn decoder_mut(&mut self) -> &mut MessageDecoder {
        &mut self.decoder
    }

    pub(crate) fn is_terminated(&self) -> bool {
        self.terminated
    }

    pub(crate) fn close_timeout(&self) -> Duration {
        self.close_timeout
    }

    /// Queues a frame on the sending side that this side must see written.
    fn owe<T: Transport>(&mut self, t: &mut T, msg: Message) -> Result<()> {
        self.owes = true;
        t.with_writer(|w, _| w.queue(msg))
    }

    /// Ends the connection without waiting for anything more.
    pub(crate) fn give_up<T: Transport>(&mut self, t: &mut T) {
        self.terminated = true;
        self.read_buf = BytesMut::new();
        t.with_writer(|w, _| {
            w.close_sent = true;
            w.outbox.clear();
        });
    }

    fn fail<T: Transport>(&mut self, t: &mut T, err: Error) {
        trace::warn_event!(error = %err, close_code = ?err.close_code(), "failing the connection");
        if let Some(code) = err.close_code() {
            self.owes = true;
            t.with_writer(|w, _| w.queue_close(code, ""));
        }
        self.failing = Some(Box::new(err));
    }

    /// Flushes what is queued (our close frame) and ends the connection:
    /// at once when failing or as the server, after the server's TCP close
    /// as a client. Bounded by the close timeout; transport errors are
    /// ignored, as the peer may be gone.
    fn poll_finish<T: Transport>(
        &mut self,
        t: &mut T,
        cx: &mut Context<'_>,
        wait_for_peer: bool,
    ) -> Poll<()> {
        if self.poll_close_timer(cx).is_ready() {
            self.give_up(t);
            return Poll::Ready(());
        }
        let done = t.with_writer(|w, io| {
            if w.shutdown {
                return Poll::Ready(());
            }
            let r = finish_writes(w, io, cx, wait_for_peer);
            if r.is_pending() {
                w.park(Side::Read, cx);
            }
            r
        });
        ready!(done);
        if !wait_for_peer {
            return Poll::Ready(());
        }
        // A client waits for the server to close the TCP connection.
        loop {
            self.read_buf.clear();
            match ready!(self.poll_read(t.read_io(), cx)) {
                Ok(0) | Err(_) => return Poll::Ready(()),
                Ok(_) => {}
            }
        }
    }

    /// Ready once the closing handshake has taken longer than allowed. The
    /// timer starts the first time this is asked.
    fn poll_close_timer(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let timeout = self.close_timeout;
        self.close_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)))
            .as_mut()
            .poll(cx)
    }

    /// Reads more input. A connection with nothing buffered reads into the
    /// free room of its own buffer when there is enough (after a large
    /// message), else into a per-thread spare, and keeps that only if the
    /// read filled a quarter of it; otherwise the bytes move to a buffer of
    /// their size and the spare goes back. Whenever the read waits, the connection keeps at
    /// most four times what it holds, so idle connections hold nothing.
    fn poll_read<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        let fresh = self.read_buf.is_empty();
        if fresh {
            if !self.read_buf.try_reclaim(READ_CHUNK) {
                // Drops our share of the last burst; messages handed out keep theirs.
                self.read_buf = pool::take();
                self.read_buf_shared = false;
            }
        } else {
            self.reserve_read();
        }
        // Mid-payload, read little past the frame's end: whatever follows it
        // is moved to the front of the buffer when the next frame needs room.
        let limit = self
            .decoder
            .payload_remaining(self.read_buf.len())
            .map_or(usize::MAX, |want| want.saturating_add(READ_CHUNK));
        let r = poll_read_buf(
            Pin::new(&mut Retrying(io)),
            cx,
            &mut (&mut self.read_buf).limit(limit),
        );
        match r {
            Poll::Ready(Ok(n)) if n > 0 => {
                if fresh && n < self.read_buf.capacity() / 4 {
                    self.fit_read_buf();
                }
            }
            // Waiting, at EOF or failed: keep only what is in proportion, so
            // a peer that sends a frame slowly (or never finishes one) costs
            // what it sent, not what it announced.
            _ => self.fit_read_buf(),
        }
        self.heard(r)
    }

    /// Keeps the read buffer in proportion to the bytes it holds.
    fn fit_read_buf(&mut self) {
        if pool::fit(&mut self.read_buf, self.read_buf_shared) {
            self.read_buf_shared = false;
        }
    }

    /// Any bytes from the peer prove it alive, for keepalive.
    fn heard(&mut self, r: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let (Some(k), Poll::Ready(Ok(1..))) = (&mut self.keepalive, &r) {
            k.last_rx = Instant::now();
        }
        r
    }

    fn reserve_read(&mut self) {
        let len = self.read_buf.len();
        let spare = self.read_buf.capacity() - len;
        let want = self
            .decoder
            .payload_remaining(len)
            .unwrap_or(READ_CHUNK)
            .max(1);
        let min_spare = want.min(READ_CHUNK);
        if spare < want && self.read_buf.try_reclaim(want) {
            // The memory of messages already handed out and dropped holds the
            // whole frame: the few bytes buffered moved to its front.
            return;
        }
        if spare < min_spare {
            // Grow with what has arrived (four-fold), never past what the
            // frame still needs, so a huge announced length costs nothing
            // until its bytes come; once a quarter of the frame is here, make
            // room for the rest at once. Memory stays within four times what
            // the peer actually sent, with few reallocations on the way.
            let additional = if want <= 3 * len {
                want
            } else {
                want.min((3 * len).max(READ_CHUNK))
            };
            let additional = additional.max(min_spare);
            if self.read_buf.capacity() <= pool::BUF_LEN {
                // Outgrowing a spare: move to a buffer of our own and give the
                // spare back, rather than reallocating it away, so the spares
                // stay put for the thread's life.
                let mut bigger = BytesMut::with_capacity(len + additional);
                bigger.extend_from_slice(&self.read_buf);
                let spare = std::mem::replace(&mut self.read_buf, bigger);
                if !std::mem::take(&mut self.read_buf_shared) {
                    pool::give(spare);
                }
            } else {
                self.read_buf.reserve(additional);
            }
        }
    }

    /// Writes out what this side owes (or, when corking, everything queued)
    /// before waiting for input. `Pending` means: stop reading, the peer is
    /// not taking what we owe it.
    fn poll_flush_owed<T: Transport>(
        &mut self,
        t: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
        if !T::CORKS && !self.owes {
            return Poll::Ready(Ok(()));
        }
        // One pass under the sending side's lock: write, and learn whether
        // anything is still owed.
        let r = t.with_writer(|w, io| {
            if w.outbox.is_empty() && !w.unflushed {
                return Poll::Ready(Ok(false));
            }
            let r = match w.poll_drain(io, cx, Side::Read) {
                Poll::Ready(Ok(())) => match w.poll_flush_io(io, cx, Side::Read) {
                    Poll::Ready(r) => r,
                    // Still owed, and retried on the next poll: the flush
                    // wakes this task when the transport can take more.
                    // Reading goes on meanwhile.
                    Poll::Pending => Ok(()),
                },
                Poll::Ready(Err(e)) => Err(e),
                // Owing more than the write buffer holds: wait for the peer
                // to read rather than buffer without bound.
                Poll::Pending if w.is_full() => {
                    w.park(Side::Read, cx);
                    return Poll::Pending;
                }
                Poll::Pending => Ok(()),
            };
            if r.is_err() {
                w.peer_closed = true;
            }
            Poll::Ready(r.map(|()| !w.outbox.is_empty() || w.unflushed))
        });
        match ready!(r) {
            Ok(still_owed) => {
                self.owes &= still_owed;
                Poll::Ready(Ok(()))
            }
            Err(e) => {
                self.terminated = true;
                Poll::Ready(Err(e.into()))
            }
        }
    }

    pub(crate) fn poll_next<T: Transport>(
        &mut self,
        t: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Message>>> {
        #[cfg(feature = "tracing")]
        let _span = self.span.clone().entered();
        loop {
            if self.terminated {
                return Poll::Ready(None);
            }
            if self.failing.is_some() {
                ready!(self.poll_finish(t, cx, false));
                self.terminated = true;
                return Poll::Ready(self.failing.take().map(|e| Err(*e)));
            }
            if self.close_received {
                let wait = self.role() == Role::Client;
                ready!(self.poll_finish(t, cx, wait));
                self.terminated = true;
                return Poll::Ready(None);
            }
            match self.decoder.decode(&mut self.read_buf) {
                Ok(Some(msg)) => {
                    self.read_buf_shared = true;
                    match &msg {
                        Message::Ping(payload) if !t.close_sent() => {
                            self.owe(t, Message::Pong(payload.clone()))?;
                        }
                        Message::Close(frame) => {
                            trace::debug_event!(code = ?frame.as_ref().map(|f| f.code), "close frame received");
                            self.close_received = true;
                            self.owes = true;
                            t.with_writer(|w, _| {
                                if w.close_sent {
                                    // The answer to our close: still ours
                                    // (sending now is AlreadyClosed).
                                    return Ok(());
                                }
                                w.peer_closed = true;
                                w.close_sent = true;
                                w.queue(Message::Close(frame.clone()))
                            })?;
                        }
                        _ => {}
                    }
                    return Poll::Ready(Some(Ok(msg)));
                }
                Ok(None) => {}
                Err(e) => {
                    self.fail(t, e.into());
                    continue;
                }
            }
            // About to wait for input: write out what was queued meanwhile
            // (replies fed by the user, pongs), all in one write. This is
            // what makes `feed` in a read loop cork replies to pipelined
            // messages without delaying a lone one.
            match self.poll_flush_owed(t, cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                Poll::Pending => {
                    // Waiting for the peer to take what we owe it: as when
                    // waiting for input, hold no more than in proportion.
                    self.fit_read_buf();
                    return Poll::Pending;
                }
            }
            if t.close_sent() && self.poll_close_timer(cx).is_ready() {
                // We closed and the peer has not answered in time.
                trace::warn_event!("closing handshake timed out");
                self.give_up(t);
                return Poll::Ready(Some(Err(Error::CloseTimeout)));
            }
            if let Some(k) = &mut self.keepalive {
                match k.poll(cx) {
                    Tick::Quiet => {}
                    Tick::Ping if t.close_sent() => {}
                    Tick::Ping => {
                        self.owe(t, Message::Ping(Bytes::new()))?;
                        continue;
                    }
                    Tick::Dead => {
                        trace::warn_event!("keepalive: no answer from the peer");
                        // Say why if the transport still takes bytes, but
                        // wait for nothing: the peer is presumed gone.
                        t.with_writer(|w, io| {
                            w.queue_close(CloseCode::INTERNAL_ERROR, "keepalive timeout");
                            let _ = w.poll_drain(io, cx, Side::Read);
                        });
                        self.give_up(t);
                        return Poll::Ready(Some(Err(Error::KeepaliveTimeout)));
                    }
                }
            }
            let read = ready!(self.poll_read(t.read_io(), cx));
            let err = match read {
                Ok(n) if n > 0 => continue,
                Ok(_) => io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed without a close frame",
                ),
                Err(e) => e,
            };
            self.terminated = true;
            t.with_writer(|w, _| w.peer_closed = true);
            // After our close frame, a peer that hangs up (or resets) instead
            // of answering ends the connection as surely: many servers do.
            let hung_up = matches!(
                err.kind(),
                io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
            );
            if hung_up && t.close_sent() {
                trace::debug_event!("peer ended the connection after our close frame");
                return Poll::Ready(None);
            }
            return Poll::Ready(Some(Err(err.into())));
        }
    }
}

/// The write half of finishing: flush, and shut down unless the peer is to
/// close first.
fn finish_writes<W: AsyncWrite + Unpin>(
    w: &mut WriteState,
    io: &mut W,
    cx: &mut Context<'_>,
    wait_for_peer: bool,
) -> Poll<()> {
    if ready!(w.poll_drain(io, cx, Side::Read)).is_err() {
        w.outbox.clear();
    }
    let _ = ready!(w.poll_flush_io(io, cx, Side::Read));
    if !wait_for_peer {
        let _ = ready!(Pin::new(&mut Retrying(io)).poll_shutdown(cx));
        w.shutdown = true;
    }
    Poll::Ready(())
}
