//! # A guide to running wavesock in production
//!
//! How a [`WebSocketStream`] behaves at the edges: what the limits protect,
//! how to share a connection between tasks, what survives a cancelled
//! future, how a connection ends, and what each error means. Everything
//! here is what the code does today; the API docs of each item hold the
//! details.
//!
//! - [The Tokio runtime](#the-tokio-runtime)
//! - [Limits](#limits)
//! - [Split and concurrency](#split-and-concurrency)
//! - [Cancel safety](#cancel-safety)
//! - [Closing](#closing)
//! - [Keepalive](#keepalive)
//! - [Backpressure](#backpressure)
//! - [Streaming large messages](#streaming-large-messages)
//! - [Broadcast](#broadcast)
//! - [Errors](#errors)
//! - [Reconnecting](#reconnecting)
//! - [Serving over TLS](#serving-over-tls)
//! - [Testing with tokio-test](#testing-with-tokio-test)
//! - [The hub](#the-hub)
//!
//! # The Tokio runtime
//!
//! wavesock turns on the Tokio features it uses (`rt`, `net`, `time`,
//! `io-util`, `sync`); an application's own `tokio` dependency names what
//! its code uses, such as `macros` and `rt-multi-thread` for
//! `#[tokio::main]`. The runtime needs its I/O driver for sockets, and its
//! time driver for every timeout of [`Config`] (the handshake, connect and
//! close timeouts are on by default), for a
//! [`memory_budget`](crate::Config::memory_budget), for the hub and for the
//! Redis link. `#[tokio::main]`, `#[tokio::test]` and `Runtime::new()`
//! enable both.
//!
//! A runtime built with `enable_io()` alone (as fastwebsockets' examples
//! build theirs) serves connections made with
//! [`Config::without_timeouts`](crate::Config::without_timeouts): they make
//! no timer, and every wait is as long as the peer makes it. With a
//! timeout left on, Tokio panics at the first timer ("timers are
//! disabled"); Tokio cannot be asked whether a runtime has a time driver,
//! so wavesock cannot turn that into an error.
//!
//! ```
//! use futures_util::{SinkExt, StreamExt};
//! use wavesock::{Config, Message, Role, WebSocketStream};
//!
//! // No time driver.
//! let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
//! rt.block_on(async {
//!     let (server_io, client_io) = tokio::io::duplex(4096);
//!     let config = Config::default().without_timeouts();
//!     let mut server = WebSocketStream::from_raw_socket(server_io, Role::Server, config.clone())?;
//!     let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, config)?;
//!     client.send(Message::text("hi")).await?;
//!     assert_eq!(server.next().await.unwrap()?, Message::text("hi"));
//!     // The closing handshake makes no timer either.
//!     client.close(None).await?;
//!     assert!(server.next().await.unwrap()?.is_close());
//!     assert!(server.next().await.is_none());
//!     assert!(client.next().await.unwrap()?.is_close());
//!     assert!(client.next().await.is_none());
//!     Ok::<(), wavesock::Error>(())
//! })?;
//! # Ok::<(), wavesock::Error>(())
//! ```
//!
//! ## What wavesock keeps per thread, and its one thread
//!
//! No state is global to the process but what this section lists; none
//! of it is visible from the API, so here is all of it.
//!
//! - **Per thread, for the Stream**: up to 4 spare read buffers of
//!   96 KiB and 2 spare write queues of the same size (a busy connection
//!   borrows them while it has bytes in them; an idle one holds none),
//!   and an 8 KiB arena that reads of up to 2 KiB are copied into (a
//!   chunk is freed when the last message cut from it is dropped). A thread
//!   that never polls a Stream has none of them; Tokio's worker threads
//!   keep theirs for the runtime's life.
//! - **Per thread, with `deflate`**: up to 2 idle compressors and 2 idle
//!   decompressors (zlib's state, lent to one message at a time under
//!   [`DeflatePolicy::Shared`](crate::DeflatePolicy::Shared)) and a
//!   64 KiB output buffer.
//! - **One thread per process, only if needed: `wavesock-retry`.** A
//!   transport must answer "not now" with `Poll::Pending` and a waker; an
//!   adapter that returns `WouldBlock` or `Interrupted` instead is asked
//!   again at once, and after 16 such answers in a row the task is woken
//!   1 ms later by this thread rather than spin on a core. It starts the
//!   first time that happens (never with Tokio's sockets, TLS streams or
//!   hyper's upgraded connections, which all use wakers), sleeps while no
//!   task waits on it, and lives as long as the process. A per-runtime
//!   timer could not do this job: a runtime without a time driver (see
//!   above) would panic on it.
//!
//! # Limits
//!
//! Every limit is a field of [`Config`], checked when the bytes that would
//! break it are announced, before memory is set aside for them:
//!
//! - [`max_frame_size`](crate::Config::max_frame_size) (16 MiB) is compared with
//!   the length in a data frame's header. A peer announcing a 2^63-byte
//!   frame costs a header parse; the connection is failed with close code
//!   1009 and [`Error::FrameTooLarge`](crate::Error::FrameTooLarge).
//! - [`max_message_size`](crate::Config::max_message_size) (64 MiB) bounds a
//!   message's fragments together. It is checked on each fragment's header
//!   against what has arrived so far, so the fragment that would cross it is
//!   refused before its payload is read: close 1009,
//!   [`Error::MessageTooLarge`](crate::Error::MessageTooLarge). A single
//!   frame is a message too, so it is held to the smaller of the two
//!   limits: setting only `max_message_size` (as most applications do) is
//!   enough.
//! - Control frames (ping, pong, close) carry at most 125 bytes, as RFC 6455
//!   requires; a longer one is a protocol error (1002).
//! - The read buffer grows with what actually arrives, never to the length a
//!   header announces: a peer announcing 32 MiB and sending 1 KiB costs about
//!   1 KiB.
//! - The opening handshake, on both sides, is bounded by
//!   [`max_handshake_size`](crate::Config::max_handshake_size) (8 KiB of HTTP head),
//!   [`max_headers`](crate::Config::max_headers) (64) and
//!   [`handshake_timeout`](crate::Config::handshake_timeout) (10 s); a client also
//!   by [`connect_timeout`](crate::Config::connect_timeout) (10 s) for opening the
//!   connection (DNS, TCP, a proxy tunnel and TLS together), which runs out as
//!   [`ConnectError::Timeout`](crate::ConnectError::Timeout).
//!
//! Set the message limits to what your application expects, not to what it
//! could survive: a chat server has no use for 64 MiB lines.
//!
//! ## A memory budget for the whole server
//!
//! Every limit above is per connection, so a server's memory grows with the
//! number of peers: each may hold up to `max_message_size` in a message it
//! never finishes, and with compression a few kilobytes of it inflate to the
//! whole limit. Ten such peers cost over 600 MiB with the defaults. A
//! [`MemoryBudget`](crate::MemoryBudget), created once and given to every
//! accepted connection with
//! [`Config::memory_budget`](crate::Config::memory_budget), bounds what all
//! of them hold together for messages in progress: read buffers, fragments
//! being reassembled, inflated output.
//!
//! - Each connection holds up to an
//!   [allowance](crate::MemoryBudget::allowance) (128 KiB) without touching
//!   the budget, so small messages cost nothing extra; beyond it, memory is
//!   asked of the budget before it is allocated. Growing a buffer asks for
//!   the old and the new one, as both live while it is copied, and grows by
//!   at least half of itself: short of room it waits rather than copy
//!   itself in small steps. A message that fits the budget but not beside
//!   its own copy still grows: for that moment the budget is passed by the
//!   buffer being copied (at most eight-ninths of the budget). A buffer
//!   that could grow only by less than an eighth of itself that way is
//!   refused with 1009: a message over about eight-ninths of the budget
//!   may be.
//! - When the budget is exhausted, a connection that needs more stops
//!   reading (its peer feels TCP backpressure) and is woken when others give
//!   some back.
//! - A connection that waits longer than the budget's
//!   [wait timeout](crate::MemoryBudget::wait_timeout) (5 s), or holds
//!   budget while its peer sends nothing for that long, has its message
//!   refused: close 1013 (try again later),
//!   [`Error::BudgetExhausted`](crate::Error::BudgetExhausted). One whose
//!   message alone would need more than the whole budget is refused at once:
//!   close 1009, [`Error::OverBudget`](crate::Error::OverBudget).
//! - What a connection holds is given back when its message is complete
//!   (the message is then yours), when it fails, and when it is dropped;
//!   [`in_use`](crate::MemoryBudget::in_use) and
//!   [`peak`](crate::MemoryBudget::peak) tell how much is taken.
//!
//! Size it as the memory you can spare for messages in flight: at least
//! twice the largest message you accept (a buffer grows by copying), better
//! a few times that so that several large messages can arrive at once. The
//! server then needs about `budget + connections × (allowance + fixed
//! state)`, where the fixed state is a few KiB per connection, plus about
//! 300 KiB with compression (zlib's windows). Without a budget nothing is
//! counted and no atomic operation is added.
//!
//! ```
//! use std::time::Duration;
//! use wavesock::{Config, MemoryBudget};
//!
//! // 256 MiB for all messages in flight; messages up to 16 MiB each.
//! let budget = MemoryBudget::new(256 << 20).wait_timeout(Duration::from_secs(2));
//! // In the accept loop: every connection gets a clone of the same budget.
//! let config = Config::default()
//!     .max_message_size(16 << 20)
//!     .memory_budget(budget.clone());
//! assert!(config.validate().is_ok());
//! assert_eq!(budget.in_use(), 0);
//! ```
//!
//! ```
//! use std::time::Duration;
//! use wavesock::Config;
//!
//! let chat = Config::default()
//!     .max_frame_size(4 << 10)
//!     .max_message_size(16 << 10)
//!     .handshake_timeout(Some(Duration::from_secs(5)));
//! assert!(chat.validate().is_ok());
//!
//! // Either limit can be set alone: frames are held to the smaller of the two.
//! assert!(Config::default().max_message_size(1 << 20).validate().is_ok());
//!
//! // Impossible settings are errors, never panics.
//! let wrong = Config::default().max_frame_size(0);
//! assert!(matches!(wrong.validate(), Err(wavesock::Error::InvalidConfig(_))));
//! ```
//!
//! # Split and concurrency
//!
//! A [`WebSocketStream`] is one `Stream` of received messages and one `Sink`
//! of messages to send. One task can do both with `tokio::select!` (see
//! [cancel safety](#cancel-safety)). To read in one task and write in
//! another, [`split`](crate::WebSocketStream::split) it into a
//! [`WebSocketReceiver`](crate::WebSocketReceiver) and a
//! [`WebSocketSender`](crate::WebSocketSender);
//! [`reunite`](crate::WebSocketReceiver::reunite) puts them back together.
//!
//! - The receiver reads and decodes without a lock. The protocol state and
//!   the write queue are shared behind a lock held only while a frame is
//!   queued or a write call is made, never while waiting for the network,
//!   so neither half blocks the other for longer than that.
//! - Pongs and the reply to the peer's close frame are written by whichever
//!   half is being polled; the receiver hands them to the transport before
//!   it yields the `Close`, or the `Ping` last read, they answer, as the
//!   unsplit stream does. A task that only reads keeps the protocol going;
//!   **keep polling the receiver**, even if you ignore what it yields, or
//!   pings go unanswered and the close handshake never completes.
//! - On the sender half, finish with [`send`](crate::WebSocketSender::send)
//!   or [`flush`](crate::WebSocketSender::flush) after a run of
//!   [`feed`](crate::WebSocketSender::feed)s: fed messages wait in the
//!   connection's queue until a send or flush (by any clone) writes them.
//! - Many tasks that want to send each take a clone of the sender. Each
//!   `send` queues its message whole, so messages from one clone keep their
//!   order and never interleave with another's; under backpressure each
//!   task waits for room on its own, and no lock is held while it waits.
//!   No `Arc<Mutex<..>>` is needed. The first close frame, from any clone,
//!   ends sending for all of them ([`Error::AlreadyClosed`](crate::Error::AlreadyClosed)
//!   afterwards); dropping clones never closes the connection.
//! - Where producers should not wait on the network at all, put a bounded
//!   `tokio::sync::mpsc` channel in front of one sending task instead.
//!
//! ```no_run
//! use futures_util::{SinkExt, StreamExt};
//! use std::time::Duration;
//! use wavesock::Message;
//!
//! # async fn run(ws: wavesock::WebSocketStream<tokio::net::TcpStream>) -> wavesock::Result<()> {
//! let (mut tx, mut rx) = ws.split();
//!
//! // A ticker with its own handle on the connection.
//! let mut ticker = tx.clone();
//! let ticking = tokio::spawn(async move {
//!     loop {
//!         tokio::time::sleep(Duration::from_secs(1)).await;
//!         ticker.send(Message::text("tick")).await?;
//!     }
//!     #[allow(unreachable_code)]
//!     Ok::<_, wavesock::Error>(())
//! });
//!
//! // The reader answers through another, and keeps answering pings.
//! while let Some(msg) = rx.next().await {
//!     if let Message::Text(t) = msg? {
//!         tx.send(Message::text(format!("you said {t}"))).await?;
//!     }
//! }
//! ticking.abort();
//! tx.close().await // close frame 1000 if none went out, then the write side is shut
//! # }
//! ```
//!
//! # Cancel safety
//!
//! Futures get dropped: the losing branches of `tokio::select!`, a
//! `tokio::time::timeout` that fires, a task that is aborted. wavesock keeps
//! all of a connection's state in the connection, not in the futures, so:
//!
//! - **`next()` loses nothing.** Bytes read before the future was dropped
//!   stay in the connection's read buffer, a partly received frame included
//!   (already unmasked and checked, and not processed again); the next call
//!   to `next()` continues where the last one stopped. `ws.next()` can sit in
//!   a `select!` loop.
//! - **A cancelled `send` or `feed` either never queued the message or
//!   queued it whole.** It is queued in one step once the write buffer has
//!   room ([`poll_ready`](futures_util::Sink::poll_ready) then
//!   [`start_send`](futures_util::Sink::start_send)); cancelled before that,
//!   the message is dropped unsent. Cancelled after that (while flushing), it
//!   stays queued and goes out with the next flush, or when the stream is
//!   next polled and is about to wait for input. No frame is ever
//!   half-written: a frame the socket took only part of stays at the head of
//!   the queue and its remaining bytes go first on the next write, before
//!   any other frame.
//!   (A connection that ends without a close handshake, because the peer
//!   vanished or the transport failed, drops what it still owed the peer,
//!   possibly mid-frame, as the TCP connection itself would.)
//! - **A cancelled [`close`](crate::WebSocketStream::close)** has already queued the
//!   close frame if it got that far (sending data then fails); calling
//!   `close` again, or polling `next()`, finishes the handshake.
//! - **On a [`WebSocketSender`]**, a message accepted by a cancelled `send`
//!   may still be in the sender's one-message slot rather than in the
//!   connection; it is whole there too, and goes in with the sender's next
//!   `feed`, `send`, `flush` or `close`.
//!
//! ```no_run
//! use std::time::Duration;
//! use futures_util::{SinkExt, StreamExt};
//! use wavesock::Message;
//!
//! # async fn run(mut ws: wavesock::WebSocketStream<tokio::net::TcpStream>) -> wavesock::Result<()> {
//! let mut status = tokio::time::interval(Duration::from_secs(1));
//! loop {
//!     tokio::select! {
//!         // Cancel safe: a half-received message stays buffered.
//!         msg = ws.next() => match msg {
//!             Some(msg) => println!("{:?}", msg?),
//!             None => break,
//!         },
//!         // The send is awaited inside the branch, never raced.
//!         _ = status.tick() => ws.send(Message::text("still here")).await?,
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # Closing
//!
//! A WebSocket connection ends with a close handshake: one side sends a
//! close frame, the other answers with its own, and the server closes the
//! TCP connection. Nothing the peer sent before its close frame is ever
//! dropped: it is all delivered by `next()`.
//!
//! - [`ws.close(frame)`](crate::WebSocketStream::close) starts the handshake:
//!   it sends the close frame (or none, for `None`) and returns once it is
//!   written. It does not read. Keep calling `next()`: it yields what the
//!   peer sent before it saw our close, then the peer's [`Message::Close`],
//!   then `None` once the handshake is done. That loop is "close and wait",
//!   bounded by [`close_timeout`](crate::Config::close_timeout) (10 s): past
//!   it `next()` returns [`Error::CloseTimeout`](crate::Error::CloseTimeout),
//!   the connection is dropped, and the stream ends. Closing again does
//!   nothing more.
//! - A peer that ends the TCP connection (or resets it) after our close
//!   frame instead of answering, as many servers do, ends the stream with
//!   `None`: a normal end, not an error. Without our close frame, the same
//!   is an error (`Error::Io` of kind `UnexpectedEof`, or the reset): the
//!   conversation may have been cut short.
//! - When the peer closes first, `next()` yields its [`Message::Close`],
//!   and the reply (the peer's code and reason, echoed) is already with the
//!   transport: in the poll that yields the close it is written and
//!   flushed, after anything queued before it, as far as the socket takes
//!   it at once. What the socket could not take stays queued and goes out
//!   on the next poll, or with `close()` or a flush (on a split
//!   connection: a sender's `flush` or `close`, or a send already waiting
//!   on the socket, after its own message). `next()` does not report a
//!   write of the reply that fails, as the peer may be gone. So a peer gets
//!   its answer even from a connection you stop polling at its close.
//! - The next poll after the peer's close finishes the handshake and ends
//!   the stream (`None`). A server shuts its sending side down (the TCP
//!   close is the server's, RFC 6455 §7.1.1); a client waits for the
//!   server's TCP close, within `close_timeout` of the peer's close frame
//!   (past it the stream ends with `None` too). A connection not polled
//!   again keeps its socket open until it is dropped: a server that stops
//!   polling at the close should drop the stream, or the client waits out
//!   its own close timeout for the TCP close.
//! - [`SinkExt::close`](futures_util::SinkExt::close) (what `tx.close()` is
//!   on a [`WebSocketSender`](crate::WebSocketSender)) sends a close frame
//!   with code 1000 if none was sent, flushes and shuts down the write side.
//!   Keep polling the receiving half for the rest.
//! - Once a close frame has gone out, sending a data message fails:
//!   with [`Error::ConnectionClosed`](crate::Error::ConnectionClosed) when the peer closed first
//!   (its close frame arrived before ours went out, or the connection
//!   ended); with [`Error::AlreadyClosed`](crate::Error::AlreadyClosed) when this side closed first
//!   (our close frame sent, answered or not, or the connection failed over
//!   an error the peer caused). Sending another close frame is accepted and
//!   does nothing.
//!
//! This is tokio-tungstenite's behaviour, with two differences: the wait is
//! bounded by `close_timeout` (tokio-tungstenite waits as long as the peer
//! does), and a hang-up after our close frame is `None` (tungstenite reports
//! `ResetWithoutClosingHandshake` for some of those).
//!
//! ```no_run
//! use futures_util::StreamExt;
//! use wavesock::{CloseCode, CloseFrame, Message};
//!
//! # async fn run(mut ws: wavesock::WebSocketStream<tokio::net::TcpStream>) -> wavesock::Result<()> {
//! ws.close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "restarting"))).await?;
//! // Close and wait: everything still in flight, then the peer's answer.
//! while let Some(msg) = ws.next().await {
//!     match msg? {
//!         Message::Close(frame) => println!("peer answered: {frame:?}"),
//!         other => println!("arrived while closing: {other}"),
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # Keepalive
//!
//! Idle TCP connections can die silently (a laptop lid closed, a NAT entry
//! expired). Set [`ping_interval`](crate::Config::ping_interval) and the connection
//! sends a ping after that long without receiving anything from the peer;
//! any bytes from the peer count, not only pongs. If nothing at all arrives
//! within [`pong_timeout`](crate::Config::pong_timeout) (10 s) after the ping, the
//! peer is given up for dead: a close frame with code 1011 is attempted,
//! nothing is waited for, and `next()` returns [`Error::KeepaliveTimeout`](crate::Error::KeepaliveTimeout).
//!
//! The timers run inside `next()`: keepalive works while the connection (or
//! its receiving half) is being polled, which a read loop does anyway.
//!
//! ```
//! use std::time::Duration;
//! use wavesock::Config;
//!
//! let config = Config::default()
//!     .ping_interval(Some(Duration::from_secs(20)))
//!     .pong_timeout(Duration::from_secs(10));
//! assert!(config.validate().is_ok());
//! ```
//!
//! # Backpressure
//!
//! Memory per connection stays bounded when a peer is slower than you, or
//! hostile:
//!
//! - **Sending faster than the peer reads.** Outgoing frames are queued
//!   until written. Once the queue holds
//!   [`max_backpressure`](crate::Config::max_backpressure) bytes (128 KiB) or more,
//!   the next `send` or `feed` waits until all of it has been written, so a
//!   producer slows to the peer's pace. (The message that crosses the mark
//!   is queued whole, so the queue can exceed it by one message.)
//! - **A peer that sends but never reads.** Pongs and other replies owed to
//!   it pile up. While more than `max_backpressure` of them cannot be
//!   written, the connection stops reading the peer's input: a peer that
//!   floods pings and ignores the pongs stalls instead of growing our memory.
//! - Large payloads are not copied into the queue: server frames of 4 KiB
//!   and more, and [prepared messages](#broadcast) on server connections, are written from the
//!   buffer they are in with vectored writes.
//!
//! Lower `max_backpressure` for many small, latency-sensitive connections;
//! raise it for bulk transfers.
//!
//! # Streaming large messages
//!
//! By default a message is assembled before it is handed out, so receiving
//! one costs its size, bounded by
//! [`max_message_size`](crate::Config::max_message_size). For messages too
//! large to hold (files, exports, media), turn on
//! [`Config::stream_messages`](crate::Config::stream_messages): text and
//! binary messages then come as [`Message::Frame`](crate::Message::Frame)
//! pieces, each the payload bytes one read brought, already unmasked and
//! (for text) UTF-8-checked, split off the read buffer without a copy. The
//! first piece has the message's opcode, the rest
//! [`Continuation`](crate::OpCode::Continuation), the last `fin`. Control
//! frames between them arrive as usual. Memory stays at about one read
//! (64 KiB at most) plus what you keep of the pieces.
//!
//! The limits still hold: `max_frame_size` on every frame header and
//! `max_message_size` on the running total, both checked before the bytes
//! come; raise `max_message_size` to what you are willing to store. A piece
//! of text may end inside a code point; invalid UTF-8 fails (1007) at the
//! read that brings it, not at the end of the message.
//!
//! [`next_message_pieces`](crate::WebSocketStream::next_message_pieces) (also on
//! the split receiver) gives the pieces of the next message as a
//! `Stream` of `Bytes`, ending after the last one; wrap it in
//! [`tokio_util::io::StreamReader`] for an `AsyncRead`. To send,
//! [`send_reader`](crate::WebSocketStream::send_reader) and
//! [`send_pieces`](crate::WebSocketStream::send_pieces) (also on the split sender)
//! send each chunk as a fragment through the write buffer, so a slow peer
//! slows the source down. For text, the chunks may split code points, but
//! the whole must be valid UTF-8. If sending stops halfway (an error from
//! the source, or the future dropped), the message stays unfinished and the
//! connection can send no other data message: close it.
//!
//! ```no_run
//! // Needs tokio-util.
//! use tokio_util::io::StreamReader;
//! use wavesock::{Config, OpCode};
//!
//! # async fn run(tcp: tokio::net::TcpStream) -> wavesock::Result<()> {
//! let config = Config::default()
//!     .stream_messages(true)
//!     .max_message_size(1 << 30);
//! let mut ws = wavesock::accept_async_with_config(tcp, config).await?;
//! // Receive a message of up to 1 GiB straight to disk...
//! let mut file = tokio::fs::File::create("upload.bin").await?;
//! tokio::io::copy(&mut StreamReader::new(ws.next_message_pieces()), &mut file).await?;
//! // ...and send it back, 64 KiB at a time.
//! let file = tokio::fs::File::open("upload.bin").await?;
//! ws.send_reader(OpCode::Binary, file, 64 << 10).await?;
//! # Ok(()) }
//! ```
//!
//! The `stream_file` example does this between a client and a server.
//!
//! # Broadcast
//!
//! Sending the same message to many connections would encode (and, for
//! large payloads, queue) it once per connection. A [`PreparedMessage`] is
//! encoded once; sending it (`send_prepared`, `feed_prepared`) to a
//! server-side connection queues a reference to the same bytes, with no encoding and no copy. (On a
//! client-side connection, where every frame needs its own mask, it is
//! encoded like any message.)
//!
//! Pair it with `tokio::sync::broadcast`: each connection's writer
//! subscribes and forwards what it receives. A receiver that falls behind
//! the channel's capacity gets `Lagged` and misses messages rather than
//! holding memory for them. `examples/broadcast.rs` and `examples/chat.rs`
//! do this.
//!
//! ```no_run
//! use tokio::sync::broadcast;
//! use wavesock::{Message, PreparedMessage, WebSocketSender};
//!
//! async fn forward(
//!     mut tx: WebSocketSender<tokio::net::TcpStream>,
//!     mut news: broadcast::Receiver<PreparedMessage>,
//! ) -> wavesock::Result<()> {
//!     loop {
//!         match news.recv().await {
//!             Ok(prepared) => tx.send_prepared(&prepared).await?,
//!             Err(broadcast::error::RecvError::Lagged(_)) => continue,
//!             Err(broadcast::error::RecvError::Closed) => return Ok(()),
//!         }
//!     }
//! }
//!
//! # fn publish(hub: &broadcast::Sender<PreparedMessage>) -> wavesock::Result<()> {
//! // Encoded once, whatever the number of subscribers.
//! let _ = hub.send(PreparedMessage::new(&Message::text("market open"))?);
//! # Ok(()) }
//! ```
//!
//! ## Topics
//!
//! With many subjects (rooms, tickers, users), a channel per subject is
//! bookkeeping [`topics::Topics`](crate::topics::Topics) does for you:
//! [`Topics::subscribe`](crate::topics::Topics::subscribe) gives a
//! receiver per topic (as above, with `Lagged` when it falls behind),
//! and [`Topics::publish`](crate::topics::Topics::publish) encodes once and
//! reaches every subscriber, hub connections included
//! ([`Ws::subscribe`](crate::hub::Ws::subscribe)). With the `redis`
//! feature, [`Topics::link_redis`](crate::topics::Topics) carries publishes
//! to every server linked to the same Redis. `examples/chat.rs` (a task
//! per guest) and `examples/hub_chat.rs` (a hub) are the same chat room on
//! topics.
//!
//! ```no_run
//! use wavesock::topics::{RecvError, Topics};
//! use wavesock::WebSocketSender;
//!
//! async fn forward(
//!     mut tx: WebSocketSender<tokio::net::TcpStream>,
//!     topics: Topics,
//!     room: &str,
//! ) -> wavesock::Result<()> {
//!     let mut news = topics.subscribe(room);
//!     loop {
//!         match news.recv().await {
//!             Ok(prepared) => tx.send_prepared(&prepared).await?,
//!             // Fell behind: skipped ahead.
//!             Err(RecvError::Lagged(_)) => continue,
//!         }
//!     }
//! }
//! ```
//!
//! # Errors
//!
//! One [`Error`] type covers a connection's life; once `next()` has returned
//! an error, the next call returns `None`.
//!
//! | error | what happened | close code sent |
//! | --- | --- | --- |
//! | [`Error::Protocol`](crate::Error::Protocol) | the peer broke a framing rule ([`ProtocolError`](crate::ProtocolError) says which) | 1002 |
//! | [`Error::InvalidUtf8`](crate::Error::InvalidUtf8) | a text message or close reason was not UTF-8 (found at the first bad byte, mid-frame) | 1007 |
//! | [`Error::FrameTooLarge`](crate::Error::FrameTooLarge), [`Error::MessageTooLarge`](crate::Error::MessageTooLarge) | a limit above was crossed | 1009 |
//! | [`Error::KeepaliveTimeout`](crate::Error::KeepaliveTimeout) | the peer did not answer a keepalive ping | 1011, if it can still be written |
//! | [`Error::CloseTimeout`](crate::Error::CloseTimeout) | the closing handshake took longer than `close_timeout` | (ours was sent already) |
//! | [`Error::ShutdownTimeout`](crate::Error::ShutdownTimeout) | (hub) the hub shut down and its `shutdown_timeout` passed before this connection's closing handshake finished | (1001 was sent already) |
//! | [`Error::Io`](crate::Error::Io) | the transport failed, or ended without a close frame (`UnexpectedEof`) | none |
//! | [`Error::Handshake`](crate::Error::Handshake) | the opening handshake failed ([`HandshakeError`](crate::HandshakeError); a server answers it with the HTTP status of [`HandshakeError::status`](crate::HandshakeError::status)) | none |
//! | [`Error::Connect`](crate::Error::Connect) | a client could not open the connection the handshake runs over: DNS, TCP, a proxy, TLS, an unsupported scheme, or the connect timeout ([`ConnectError`](crate::ConnectError) says which) | none |
//! | [`Error::ConnectionClosed`](crate::Error::ConnectionClosed), [`Error::AlreadyClosed`](crate::Error::AlreadyClosed) | a message was sent after the peer, or this side, closed | none |
//! | [`Error::InvalidMessage`](crate::Error::InvalidMessage) | the message cannot be sent (a control frame over 125 bytes, a close code not allowed on the wire) | none |
//! | [`Error::InvalidConfig`](crate::Error::InvalidConfig) | [`Config::validate`](crate::Config::validate) refused the settings | none |
//!
//! [`Error::close_code`](crate::Error::close_code) returns the code for the first three rows (and
//! the memory budget's 1009 and 1013): the errors that are the peer's data's
//! fault, for which the close frame has already been written (if the
//! transport still took it) by the time you see the error. Its reason says
//! which rule or limit, in a few fixed words with nothing of the peer's
//! data in them (`"unmasked frame from a client"`, `"invalid UTF-8"`,
//! `"frame over max_frame_size"`, `"message over max_message_size"`; see
//! [`proto::Error::close_reason`](crate::proto::Error::close_reason)), so
//! the peer can log it and a browser shows it as `CloseEvent.reason`. Use
//! `close_code` to tell a misbehaving peer from a network failure:
//!
//! ```no_run
//! use futures_util::StreamExt;
//! use wavesock::Error;
//!
//! # async fn run(mut ws: wavesock::WebSocketStream<tokio::net::TcpStream>) {
//! while let Some(msg) = ws.next().await {
//!     match msg {
//!         Ok(msg) => println!("{msg:?}"),
//!         Err(e) if e.close_code().is_some() => {
//!             eprintln!("peer misbehaved, closed with {:?}: {e}", e.close_code());
//!         }
//!         Err(Error::Io(e)) => eprintln!("network: {e}"),
//!         Err(e) => eprintln!("connection ended: {e}"),
//!     }
//! }
//! # }
//! ```
//!
//! `Error` and [`ProtocolError`](crate::ProtocolError) are
//! `#[non_exhaustive]`: match the cases you handle and keep a catch-all.
//!
//! # Reconnecting
//!
//! A client that must stay connected reconnects itself: wavesock does not
//! hide a dropped connection, so that you decide what is lost and what is
//! sent again. Which endings are worth another attempt:
//!
//! | how the connection ended | retry? |
//! | --- | --- |
//! | [`Error::Connect`](crate::Error::Connect): DNS, TCP refused or reset, a proxy, the connect timeout | yes, with backoff; not for a certificate the client does not trust or an unsupported URL scheme, which another attempt will not change |
//! | [`Error::Handshake`](crate::Error::Handshake) with a `5xx` status (the server, or a proxy in front of it, is restarting) | yes, with backoff; a `4xx` (wrong URL, refused credentials, no common subprotocol) will be refused again |
//! | [`Error::Io`](crate::Error::Io): `UnexpectedEof` (the peer went away without a close frame), `ConnectionReset`, `BrokenPipe` | yes |
//! | [`Error::KeepaliveTimeout`](crate::Error::KeepaliveTimeout) (the peer, or the path to it, stopped answering) | yes |
//! | the server's close frame with 1001 (going away), 1012 (service restart) or 1013 (try again later) | yes, with backoff: the server asked for it |
//! | the server's close frame with 1000 (normal closure) | as your protocol says: often the end |
//! | 1002, 1003, 1007, 1008, 1009 or 1010 either way, or [`Error::InvalidMessage`](crate::Error::InvalidMessage) | no: one side sent what the other will not take, and reconnecting sends it again; fix the cause |
//!
//! Wait between attempts with exponential backoff and jitter: double the
//! delay after each failure up to a cap (say from 100 ms to 30 s), and wait
//! a random part of it (its upper half, or all of it), so that clients
//! dropped together by a server restart do not all come back in the same
//! instant. Reset the delay once the new connection has proved itself
//! (data has flowed, or it stayed up for some seconds), not as soon as the
//! handshake succeeds: against a server that accepts and then drops every
//! connection, the delay should still grow. What was sent into a connection
//! that then died may or may not have arrived: keep what the peer has not
//! acknowledged and send it again after reconnecting, or make messages
//! that are harmless to repeat.
//!
//! The repository's `examples/reconnect.rs` does all of this: jittered,
//! capped backoff, reset after a healthy connection, and lines kept until
//! the echo server acknowledges them. Run `cargo run --example echo_server
//! -- 127.0.0.1:9001` and `cargo run --example reconnect --
//! ws://127.0.0.1:9001/`, then restart the server to watch the client back
//! off and resume.
//!
//! # Serving over TLS
//!
//! [`accept_async`](crate::accept_async) takes any `AsyncRead +
//! AsyncWrite`, so a server runs the TLS handshake first and the WebSocket
//! one over its result. Behind a terminating proxy (nginx, a load balancer)
//! there is nothing to do: the server sees plain TCP.
//!
//! With tokio-rustls (`wavesock::tokio_rustls`, feature `rustls`), the
//! certificate chain and key loaded from PEM files:
//!
//! ```no_run
//! # #[cfg(feature = "rustls")]
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use wavesock::rustls::ServerConfig;
//! use wavesock::rustls::pki_types::pem::PemObject;
//! use wavesock::rustls::pki_types::{CertificateDer, PrivateKeyDer};
//! use wavesock::tokio_rustls::TlsAcceptor;
//!
//! let chain = CertificateDer::pem_file_iter("cert.pem")?.collect::<Result<Vec<_>, _>>()?;
//! let key = PrivateKeyDer::from_pem_file("key.pem")?;
//! let config = ServerConfig::builder_with_provider(wavesock::tls::crypto_provider()?)
//!     .with_safe_default_protocol_versions()?
//!     .with_no_client_auth()
//!     .with_single_cert(chain, key)?;
//! let acceptor = TlsAcceptor::from(Arc::new(config));
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:443").await?;
//! loop {
//!     let (tcp, _) = listener.accept().await?;
//!     let acceptor = acceptor.clone();
//!     tokio::spawn(async move {
//!         let tls = acceptor.accept(tcp).await?;
//!         let ws = wavesock::accept_async(tls).await?;
//!         // ... use ws as over plain TCP
//!         # drop(ws);
//!         Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
//!     });
//! }
//! # }
//! ```
//!
//! With tokio-native-tls (`wavesock::tokio_native_tls`, feature
//! `native-tls`: OpenSSL on Linux), the same files:
//!
//! ```no_run
//! # #[cfg(feature = "native-tls")]
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use wavesock::native_tls::Identity;
//! use wavesock::tokio_native_tls::TlsAcceptor;
//!
//! // A PEM certificate chain and a PKCS #8 PEM key.
//! let identity = Identity::from_pkcs8(&std::fs::read("cert.pem")?, &std::fs::read("key.pem")?)?;
//! let acceptor = TlsAcceptor::from(wavesock::native_tls::TlsAcceptor::new(identity)?);
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:443").await?;
//! loop {
//!     let (tcp, _) = listener.accept().await?;
//!     let acceptor = acceptor.clone();
//!     tokio::spawn(async move {
//!         let tls = acceptor.accept(tcp).await?;
//!         let ws = wavesock::accept_async(tls).await?;
//!         // ... use ws as over plain TCP
//!         # drop(ws);
//!         Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
//!     });
//! }
//! # }
//! ```
//!
//! `examples/h2_server.rs` serves HTTP/2 and HTTP/1.1 over tokio-rustls
//! with `--cert FILE --key FILE` (a self-signed certificate otherwise).
//!
//! # Testing with tokio-test
//!
//! Every entry point takes any `AsyncRead + AsyncWrite`, so a
//! [`tokio_test::io::Builder`](https://docs.rs/tokio-test/latest/tokio_test/io/struct.Builder.html)
//! mock can stand in for the peer: it hands out the bytes you script with
//! `read`, panics on a write that differs from the next `write` you
//! scripted, and, when dropped, on anything scripted that did not happen.
//!
//! A server is easy to script: it does not mask, and the client frames you
//! feed it can use any key. A client draws a random `Sec-WebSocket-Key` and
//! a random masking key per frame, so two things make its bytes known:
//!
//! - Give the request a `Sec-WebSocket-Key` header: a valid one (the base64
//!   of 16 bytes) is sent as it is, and the `101` answers it with the
//!   accept value of [`derive_accept_key`](crate::handshake::derive_accept_key).
//!   The request head lists header names in lower case, in the order of the
//!   request's headers: yours first, then `host`, `upgrade`, `connection`
//!   and `sec-websocket-version`.
//! - Set [`Config::mask_keys`](crate::Config::mask_keys):
//!   [`MaskKeys::FixedForTesting`](crate::MaskKeys::FixedForTesting) masks
//!   every frame with one key (`[0; 4]` leaves payloads readable), and
//!   [`MaskKeys::CountingForTesting`](crate::MaskKeys::CountingForTesting)
//!   masks frame `n` with `first + n`, big-endian. Keys are taken in wire
//!   order, automatic pongs and close replies included.
//!
//! Both make the client predictable, which is the point in a test and a
//! hole anywhere else: RFC 6455 §10.3 has clients mask with keys nobody can
//! guess, so that a script cannot choose what its frames look like to a
//! proxy on the way. Keep them out of production code; with the `tracing`
//! feature a client connection made with predictable keys logs a warning.
//!
//! ```
//! // Needs tokio-test (a dev-dependency for your tests).
//! use futures_util::{SinkExt, StreamExt};
//! use tokio_test::io::Builder;
//! use wavesock::{Config, MaskKeys, Message};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> wavesock::Result<()> {
//! let request = wavesock::http::Request::builder()
//!     .uri("ws://localhost/")
//!     .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
//!     .body(())
//!     .unwrap();
//! let server = Builder::new()
//!     .write(
//!         b"GET / HTTP/1.1\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
//!           host: localhost\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
//!           sec-websocket-version: 13\r\n\r\n",
//!     )
//!     .read(
//!         b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
//!           Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
//!     )
//!     // The client's "hi": FIN and text, the mask bit and length 2, the key
//!     // 00 00 00 00, and the payload, which a zero key leaves as it is.
//!     .write(&[0x81, 0x82, 0, 0, 0, 0, b'h', b'i'])
//!     // The server's answer, unmasked.
//!     .read(&[0x81, 0x03, b'y', b'o', b'u'])
//!     .build();
//!
//! let config = Config::default().mask_keys(MaskKeys::FixedForTesting([0; 4]));
//! let (mut ws, _) = wavesock::client_async_with_config(request, server, config).await?;
//! ws.send(Message::text("hi")).await?;
//! assert_eq!(ws.next().await.transpose()?, Some(Message::text("you")));
//! # Ok(()) }
//! ```
//!
//! ## The frames wavesock sends on its own
//!
//! A script must expect these too. A client masks each of them like any
//! frame (with the next key of [`MaskKeys`](crate::MaskKeys)); a server
//! sends them unmasked.
//!
//! | when | frame | bytes after the header |
//! | --- | --- | --- |
//! | a ping arrives (unless our close went out) | pong, opcode `0xA` | the ping's payload |
//! | the peer's close frame arrives first | close, opcode `0x8` | the peer's code and reason, as they came (nothing if its close had no payload) |
//! | the peer's data breaks a rule or a limit | close | code 1002, 1007 or 1009 (under a memory budget 1009 or 1013) and a fixed reason naming the rule or limit ([`proto::Error::close_reason`](crate::proto::Error::close_reason)), e.g. `03 f1` `"frame over max_frame_size"` |
//! | `ping_interval` passes with nothing heard (keepalive) | ping, opcode `0x9` | nothing |
//! | `pong_timeout` passes after that ping with nothing heard | close | code 1011 and `"keepalive timeout"`; then the connection is dropped without waiting for an answer |
//! | [`SinkExt::close`](futures_util::SinkExt::close) | close | code 1000, no reason |
//! | [`WebSocketStream::close`](crate::WebSocketStream::close) | close | the frame you give; `None` sends a close with no payload |
//!
//! When the pong goes out: a Stream (split or not) hands it to the
//! transport in the poll that yields the [`Message::Ping`](crate::Message::Ping),
//! before `next()` returns it, as it does the echo of a close, when the
//! ping is the last thing read so far (no byte of another frame after
//! it); the pongs to pings read together
//! (a burst, or a ping with the frames after it) go out together, in the
//! poll that yields the last of those pings, or with the flush before the
//! next read. A hub writes it with the other replies of the read that
//! brought the ping, after the read's callbacks and before the engine
//! waits again (several pings in one read, one write). What the transport
//! does not take at once stays queued: neither waits for a peer that does
//! not read. At most 16 pongs are owed at once on either; past that the
//! newest ping is answered.
//!
//! After our close frame nothing else is sent, pongs included. A server
//! ends the TCP connection once the closing handshake is done; a client
//! waits for the server to end it (RFC 6455 §7.1.1), within
//! `close_timeout`, so a script of a client ends with the server's last
//! frame and then nothing: the end of the script reads as the end of the
//! connection.
//!
//! A close the server starts, answered by the client with the same code
//! and reason:
//!
//! ```
//! // Needs tokio-test (a dev-dependency for your tests).
//! use futures_util::StreamExt;
//! use tokio_test::io::Builder;
//! use wavesock::{CloseCode, CloseFrame, Config, MaskKeys, Message};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> wavesock::Result<()> {
//! # let request = wavesock::http::Request::builder()
//! #     .uri("ws://localhost/")
//! #     .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
//! #     .body(())
//! #     .unwrap();
//! let server = Builder::new()
//! #   .write(
//! #       b"GET / HTTP/1.1\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
//! #         host: localhost\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
//! #         sec-websocket-version: 13\r\n\r\n",
//! #   )
//! #   .read(
//! #       b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
//! #         Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
//! #   )
//!     // (The handshake as above.) The server closes: 1001 (03 e9), "bye".
//!     .read(&[0x88, 0x05, 0x03, 0xe9, b'b', b'y', b'e'])
//!     // The client's echo: the same payload, masked with the zero key.
//!     .write(&[0x88, 0x85, 0, 0, 0, 0, 0x03, 0xe9, b'b', b'y', b'e'])
//!     // Then the server ends the connection: the script ends here.
//!     .build();
//!
//! let config = Config::default().mask_keys(MaskKeys::FixedForTesting([0; 4]));
//! let (mut ws, _) = wavesock::client_async_with_config(request, server, config).await?;
//! let bye = CloseFrame::new(CloseCode::GOING_AWAY, "bye");
//! assert_eq!(ws.next().await.transpose()?, Some(Message::Close(Some(bye))));
//! assert!(ws.next().await.is_none()); // echoed, and the server ended TCP
//! # Ok(()) }
//! ```
//!
//! The repository's `tests/protocol/scripted.rs` scripts longer exchanges with
//! counting keys: a text frame, the pong to a server's ping, and the close
//! handshake started by either side.
//!
//! [`WebSocketStream`]: crate::WebSocketStream
//! [`WebSocketSender`]: crate::WebSocketSender
//! [`Config`]: crate::Config
//! [`Error`]: crate::Error
//! [`Message::Close`]: crate::Message::Close
//! [`PreparedMessage`]: crate::PreparedMessage
//!
//! # The hub
//!
//! [`hub`](crate::hub) is the second server engine, for services holding
//! many connections. Where a [`WebSocketStream`] is a task per connection
//! with owned messages, a [`Hub`](crate::hub::Hub) is one task per engine
//! driving every connection it accepted, and calls a
//! [`Handler`](crate::hub::Handler) you write:
//!
//! - [`upgrade`](crate::hub::Handler::upgrade) sees the checked request
//!   and returns the connection's data (or a refusal with a status);
//!   [`request`](crate::hub::Handler::request) answers requests that are
//!   not upgrades (a health check).
//! - [`message`](crate::hub::Handler::message) gets each message as a
//!   [`HubMessage`](crate::hub::HubMessage): `&str` or `&[u8]` borrowed
//!   from the engine's read buffer for the length of the call. Copy what
//!   you keep. Sends ([`Ws::send_text`](crate::hub::Ws::send_text),
//!   [`send_borrowed`](crate::hub::Ws::send_borrowed),
//!   [`send_prepared`](crate::hub::Ws::send_prepared)) are corked and
//!   written at the end of the engine's turn.
//! - [`close`](crate::hub::Handler::close) reports how each opened
//!   connection ended ([`Closed`](crate::hub::Closed): the peer's close
//!   frame, or the error) and hands its data back; it is called once per
//!   connection.
//!
//! The engine reads and writes; every protocol decision is the same core's
//! as the Stream's: limits before allocation, close codes, UTF-8 checked
//! as it arrives, permessage-deflate, the memory budget, keepalive and the
//! close timeout all work as the chapters above describe.
//!
//! **Handlers must not block.** One slow call holds up every connection
//! of its engine. Hand long work to another task and send the answer
//! through a [`HubHandle`](crate::hub::HubHandle); see [Async work from
//! hub handlers](#async-work-from-hub-handlers).
//!
//! **Closing.** Once a close is asked for
//! ([`Ws::close`](crate::hub::Ws::close),
//! [`HubHandle::close`](crate::hub::HubHandle::close), shutdown), the
//! handler hears nothing more of that connection but
//! [`close`](crate::hub::Handler::close): what the same read brought after
//! the closing message is dropped unheard, and sends return
//! [`SendStatus::Closed`](crate::hub::SendStatus::Closed). What was sent
//! before, and what was published to the connection's topics in the same
//! turn, is written before the close frame (up to the turn's cap of
//! publishes: a close never waits behind a backlog of them).
//!
//! **Who is connected.** The upgrade request's extensions hold the peer's
//! [`Addresses`](crate::hub::Addresses) (as axum's `ConnectInfo`), and
//! [`Ws::remote_addr`](crate::hub::Ws::remote_addr) gives it later; a
//! connection handed over carries what its giver passed to
//! [`accept_from`](crate::hub::HubHandle::accept_from) or
//! [`adopt_from`](crate::hub::Adopter::adopt_from). A
//! [`ConnId`](crate::hub::ConnId) has a text form (`0.1.42.3`, parsed back
//! with `FromStr`) and a `u64` form, to keep in a map or a database.
//!
//! **Routes.** With the `router` feature, `hub::Router` serves several
//! paths from one hub, each with its own handler and data type, the path
//! parameters (`/rooms/{room}`) and the query string parsed for
//! `upgrade`.
//!
//! **Backpressure.** A peer that does not read stops being read (TCP then
//! slows its sender). Bytes waiting for it beyond
//! [`Config::max_backpressure`](crate::Config::max_backpressure)
//! make further sends close the connection
//! ([`BackpressurePolicy::Close`](crate::hub::BackpressurePolicy::Close):
//! what waits behind the frame being written is dropped and a 1013 close
//! frame goes next, reported as
//! [`Error::Backpressure`](crate::Error::Backpressure)) or
//! drop them ([`BackpressurePolicy::Drop`](crate::hub::BackpressurePolicy::Drop),
//! [`SendStatus::Dropped`](crate::hub::SendStatus::Dropped)); either way
//! the engine's other connections go on. After a send saw the limit,
//! [`drain`](crate::hub::Handler::drain) says when all is written.
//!
//! **From other tasks.** [`Hub::handle`](crate::hub::Hub::handle) gives a
//! cloneable [`HubHandle`](crate::hub::HubHandle) (a handler has it from
//! the start with [`Hub::with_handle`](crate::hub::Hub::with_handle), or
//! from any callback with [`Ws::handle`](crate::hub::Ws::handle)): `send`,
//! `try_send`, `send_prepared`, `close` and `try_close` by
//! [`ConnId`](crate::hub::ConnId) (an id never names a later connection),
//! through a bounded queue per engine;
//! [`accept`](crate::hub::HubHandle::accept) hands over a connection on
//! another transport (TLS from tokio-rustls, a Unix socket) whose upgrade
//! request the hub still reads; [`shutdown`](crate::hub::HubHandle::shutdown)
//! closes every connection with 1001 and lets
//! [`Hub::serve`](crate::hub::Hub::serve) return once they are closed or
//! [`HubConfig::shutdown_timeout`](crate::hub::HubConfig::shutdown_timeout)
//! passed.
//!
//! **Threads.** [`HubConfig::engines`](crate::hub::HubConfig::engines)
//! `None` runs one engine per worker of a multi-threaded runtime: each is
//! a task of its own, and the task calling `serve` accepts and hands
//! connections to them in turn. One listener as you give it, and an even
//! spread (the kernel's `SO_REUSEPORT` hashing can be uneven with few
//! client addresses).
//!
//! **Topics.** [`Ws::subscribe`](crate::hub::Ws::subscribe) (or
//! [`HubHandle::subscribe`](crate::hub::HubHandle::subscribe) by id) puts
//! a connection on a topic; [`Ws::publish`](crate::hub::Ws::publish)
//! reaches every other subscriber,
//! [`HubHandle::publish`](crate::hub::HubHandle::publish) and
//! [`Topics::publish`](crate::topics::Topics::publish) every one. The
//! frame is encoded once per publish and queued once per engine; the
//! engine writes it to each subscriber as any other send, so a subscriber
//! over `max_backpressure` meets the policy above while the others receive
//! every message, in one order per topic. Hubs share
//! [`Topics::global`](crate::topics::Topics::global) unless
//! [`HubConfig::topics`](crate::hub::HubConfig::topics) gives them
//! another; a connection's subscriptions end with it.
//!
//! ```no_run
//! use wavesock::hub::{Handler, HttpResponse, HubMessage, Ws};
//! use wavesock::http::{Request, Response};
//!
//! #[derive(Clone)]
//! struct Room;
//!
//! impl Handler for Room {
//!     type Data = ();
//!
//!     fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
//!         Ok(())
//!     }
//!
//!     fn open(&mut self, ws: &mut Ws<'_, ()>) {
//!         ws.subscribe("lobby");
//!     }
//!
//!     fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
//!         // To everyone else in the lobby, on every hub of the process.
//!         ws.publish("lobby", msg);
//!     }
//! }
//! ```
//!
//! What it costs: on Unix an engine owns a poller (epoll, kqueue) whose
//! descriptor is registered with Tokio's reactor, and reads which of its
//! sockets are ready with one call per turn
//! ([`Readiness::Owned`](crate::hub::Readiness), the default). An idle
//! TCP connection is then about 200 bytes of state and nothing else in
//! user space (`tests/memory/hub_memory.rs` holds it under 256 bytes of heap).
//! With [`Readiness::Tokio`](crate::hub::Readiness) (and for TLS and other
//! transports under either) each socket has Tokio's registration and a
//! waker too, under 512 bytes in all. Echoing small messages allocates
//! nothing once warm.
//!
//! Readiness is per socket state the engine keeps: after the poller
//! reports a socket readable, it is read until a read comes back short or
//! empty, and not again until the next report (edge-triggered, as Tokio
//! itself reads). A handler that does not read a connection for a while
//! (backpressure, a budget wait) loses nothing: the engine serves it again
//! when it resumes.
//!
//! ## Async work from hub handlers
//!
//! Handlers are plain functions on the engine's task: no `.await`. Work
//! that waits (a database, another service) is spawned, and its answer
//! sent through the handle with the connection's id. Three things need
//! care, and `examples/hub_async.rs` does all three:
//!
//! - **Order.** Two spawned tasks finish in any order. To answer a
//!   connection in the order it asked, chain its queries: each task waits
//!   for a oneshot the previous one completes after handing its answer to
//!   the hub (kept in the connection's data), then calls, then sends.
//!   [`HubHandle::send`](crate::hub::HubHandle::send) queues in order.
//! - **Time and amount.** Put a timeout on the call
//!   (`tokio::time::timeout`), and bound the calls one connection may
//!   have running (a semaphore in its data): a client that asks faster
//!   than it waits is closed (1013, try again later) rather than given
//!   unbounded tasks.
//! - **The end.** [`Handler::close`](crate::hub::Handler::close) gets the
//!   connection's data: cancel its calls there (a `CancellationToken`),
//!   or their answers go to an id that names no connection (dropped,
//!   harmlessly, but after the work).
//!
//! A slow reader needs nothing more: the hub stops reading a connection
//! whose answers it cannot write, so its next queries wait in TCP's flow
//! control, and `HubHandle::send` waits for room in the engine's queue.
//! Keep what can be in flight (calls × the largest answer) under
//! [`max_backpressure`](crate::Config::max_backpressure), so that
//! a client within the limits is never cut off.
//!
//! ```no_run
//! use std::time::Duration;
//! use wavesock::hub::{Handler, HttpResponse, HubHandle, HubMessage, Ws};
//! use wavesock::http::{Request, Response};
//! use wavesock::Message;
//!
//! #[derive(Clone)]
//! struct Lookup {
//!     hub: HubHandle,
//! }
//!
//! /// Per connection: resolved when the latest answer was handed over.
//! type Last = Option<tokio::sync::oneshot::Receiver<()>>;
//!
//! async fn query(key: String) -> String {
//!     // ... a database call ...
//!     key
//! }
//!
//! impl Handler for Lookup {
//!     type Data = Last;
//!
//!     fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<Last, HttpResponse> {
//!         Ok(None)
//!     }
//!
//!     fn message(&mut self, ws: &mut Ws<'_, Last>, msg: HubMessage<'_>) {
//!         let key = String::from_utf8_lossy(msg.as_bytes()).into_owned();
//!         let (done, next) = tokio::sync::oneshot::channel();
//!         let previous = ws.data_mut().replace(next);
//!         let (hub, id) = (self.hub.clone(), ws.id());
//!         tokio::spawn(async move {
//!             if let Some(previous) = previous {
//!                 let _ = previous.await; // the previous answer first
//!             }
//!             let answer = match tokio::time::timeout(Duration::from_secs(2), query(key)).await {
//!                 Ok(value) => value,
//!                 Err(_) => "timed out".to_owned(),
//!             };
//!             let _ = hub.send(id, Message::text(answer)).await;
//!             let _ = done.send(());
//!         });
//!     }
//! }
//! ```
