//! The engine: one task that accepts, reads, dispatches, writes and keeps
//! time for all of its connections. It moves bytes and time; every
//! protocol decision is the core's (`proto::conn`, the decoder and
//! encoder) or the handshake's.

// Decoders are boxed: they move between the pool and the connections that
// hold them (a pointer each), and a connection holds only the pointer.
#![allow(clippy::vec_box)]

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::AsyncWrite;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Sleep;

use crate::discard::{Discarded, discard};
use crate::error::{Error, HandshakeError, Result};
use crate::handshake::server::{Accepting, error_response, parse_request, write_response};
use crate::hub::config::{BackpressurePolicy, HubConfig};
use crate::hub::event::{
    Closed, ConnId, HUB_MASK, HubMessage, LAST_GENERATION, MAX_ENGINES, MAX_SLOTS,
};
use crate::hub::handle::{Adopted, Adopter, Command, HubHandle};
use crate::hub::handler::Handler;
#[cfg(unix)]
use crate::hub::poller::{LISTENER, Polled, Poller};
use crate::hub::slot::{Conn, POOL_LIMITS, Slot, Stage, Transport, Turn, Ws};
use crate::hub::subs::{Subs, token};
use crate::hub::timers::Timers;
use crate::hub::wake::{ConnWaker, Key, ReadyQueue};
use crate::proto::Role;
use crate::proto::close::Leaving;
use crate::proto::conn::{Connection, Phase, State, later};
use crate::proto::decoder::{BorrowedData, MessageDecoder};
use crate::proto::encoder::SHARE_PAYLOAD_MIN;
use crate::proto::inbox::{Inbox, OwnMemory, Plan, ReadMemory};
use crate::proto::message::Message;
use crate::proto::outbox::QueuePool;
use crate::proto::receive::{DISCARD_AT_ONCE, Ended, Input, Link, Receiver, Step, Stepped};
use crate::topics::Delivery;

/// Times per turn a connection whose memory budget had room at once goes
/// on before the others get their turn.
const BUDGET_RETRIES_PER_TURN: usize = 4;

/// Reads per connection per turn before the others get theirs.
const READS_PER_TURN: usize = 4;
/// Connections accepted per turn.
const ACCEPTS_PER_TURN: usize = 64;
/// Commands taken from handles per turn.
const COMMANDS_PER_TURN: usize = 1024;
/// Publishes sent to subscribers per turn (one send per subscriber).
const DELIVERIES_PER_TURN: usize = 16 << 10;
/// How long accepting pauses after an error (out of file descriptors).
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);
/// Connections waiting to be taken by an engine (accepted by the acceptor
/// of several engines, handed over, adopted).
const ACCEPT_QUEUE: usize = 1024;
/// Inboxes kept for connections between messages.
const READER_POOL_MAX: usize = 1024;

/// A server engine for many connections; see the [module docs](crate::hub).
#[derive(Debug)]
pub struct Hub<H: Handler> {
    engines: Vec<Engine<H>>,
    handle: HubHandle,
}

impl<H: Handler> Hub<H> {
    /// A hub running `handler` (cloned into each engine) with `config`.
    ///
    /// With [`HubConfig::engines`] `None`, there is one engine per worker
    /// thread of the current Tokio runtime (one outside a runtime, at most
    /// 256).
    pub fn new(handler: H, config: HubConfig) -> Result<Self> {
        Self::with_handle(config, |_| handler)
    }

    /// A hub whose handler is made with the hub's handle, for a handler
    /// that reaches connections other than the one it is called for (a
    /// task it spawns that answers later, a kick by id). Within a
    /// callback, [`Ws::handle`] gives the same handle.
    ///
    /// ```no_run
    /// use wavesock::hub::{Handler, HttpResponse, Hub, HubConfig, HubHandle, HubMessage, Ws};
    /// use wavesock::http::{Request, Response};
    /// use wavesock::Message;
    ///
    /// #[derive(Clone)]
    /// struct Later {
    ///     hub: HubHandle,
    /// }
    ///
    /// impl Handler for Later {
    ///     type Data = ();
    ///
    ///     fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
    ///         Ok(())
    ///     }
    ///
    ///     fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
    ///         let (hub, id, text) = (self.hub.clone(), ws.id(), msg.as_bytes().len().to_string());
    ///         tokio::spawn(async move {
    ///             // ... a call that takes a while ...
    ///             let _ = hub.send(id, Message::text(text)).await;
    ///         });
    ///     }
    /// }
    ///
    /// # async fn run() -> wavesock::Result<()> {
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:9001").await?;
    /// let hub = Hub::with_handle(HubConfig::default(), |hub| Later { hub: hub.clone() })?;
    /// hub.serve(listener).await
    /// # }
    /// ```
    pub fn with_handle(config: HubConfig, handler: impl FnOnce(&HubHandle) -> H) -> Result<Self> {
        config.validate()?;
        let count = config.engines.unwrap_or_else(|| {
            tokio::runtime::Handle::try_current()
                .map(|h| h.metrics().num_workers())
                .unwrap_or(1)
                .min(MAX_ENGINES)
        });
        // Numbers this hub's connection ids apart from other hubs'.
        static HUBS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let hub = HUBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & HUB_MASK;
        let mut senders = Vec::with_capacity(count);
        let mut accept_senders = Vec::with_capacity(count);
        let mut receivers = Vec::with_capacity(count);
        for _ in 0..count {
            let (tx, rx) = mpsc::channel(config.handle_capacity);
            let (accept_tx, accept_rx) = mpsc::channel(ACCEPT_QUEUE);
            senders.push(tx);
            accept_senders.push(accept_tx);
            receivers.push((rx, accept_rx));
        }
        let handle = HubHandle::new(senders, accept_senders, config.topics.clone());
        let handler = handler(&handle);
        let engines = receivers
            .into_iter()
            .enumerate()
            .map(|(index, (rx, accept_rx))| {
                let mut engine = Engine::new(
                    index as u32,
                    handler.clone(),
                    config.clone(),
                    rx,
                    handle.clone(),
                );
                engine.turn.hub = hub;
                engine.accepts = Some(accept_rx);
                engine
            })
            .collect();
        Ok(Hub { engines, handle })
    }

    /// A handle to send to connections from other tasks and to shut the
    /// hub down.
    pub fn handle(&self) -> HubHandle {
        self.handle.clone()
    }

    /// Hands this hub connections upgraded elsewhere (hyper, axum); see
    /// [`Adopter`].
    pub fn adopter(&self) -> Adopter<H::Data> {
        Adopter::new(self.handle.clone())
    }

    /// Serves connections accepted from `listener` until
    /// [`HubHandle::shutdown`].
    ///
    /// One engine accepts on its own task. With several, each runs on a
    /// task of its own (`tokio::spawn`, so the runtime spreads them over
    /// its workers) and this task accepts and hands the connections out in
    /// turn: one listener, as given, and an even spread whatever the
    /// kernel's hashing of `SO_REUSEPORT` would do with few client
    /// addresses. Accepted sockets get `TCP_NODELAY`: replies are
    /// written whole, once per read, so Nagle's delay would only add
    /// latency.
    pub async fn serve(self, listener: TcpListener) -> Result<()> {
        match self.run_with(Some(listener)).await {
            None => Ok(()),
            Some(e) => Err(Error::Io(io::Error::other(e))),
        }
    }

    /// Serves only the connections handed over through
    /// [`HubHandle::accept`] and [`Adopter::adopt`] (a hyper or axum
    /// server, a TLS acceptor of your own), until [`HubHandle::shutdown`].
    ///
    /// An engine that panics shuts the others down (their connections are
    /// closed with 1001, as on [`HubHandle::shutdown`]); its panic then
    /// resumes here. [`serve`](Self::serve) returns it as an error instead.
    pub async fn run(self) {
        if let Some(e) = self.run_with(None).await {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }

    /// Runs the engines (accepting from `listener` if given) until they
    /// have all ended; the first engine's failure, if one failed.
    async fn run_with(self, listener: Option<TcpListener>) -> Option<tokio::task::JoinError> {
        let Hub {
            mut engines,
            handle,
        } = self;
        if engines.len() == 1 {
            // On this task: a panic goes up as any other would.
            let mut engine = engines.pop().expect("one engine");
            engine.listener = listener.map(Listener::Tokio);
            drop(handle);
            tokio::task::unconstrained(engine).await;
            return None;
        }
        let count = engines.len();
        let mut tasks = tokio::task::JoinSet::new();
        for e in engines {
            tasks.spawn(tokio::task::unconstrained(e));
        }
        let mut stop = handle.stopped();
        let mut listener = listener;
        let mut failed = None;
        let mut next = 0;
        enum Next {
            Accepted(io::Result<TcpStream>),
            Stopped,
            Ended(Option<std::result::Result<(), tokio::task::JoinError>>),
        }
        loop {
            let event = {
                let mut ended = std::pin::pin!(tasks.join_next());
                let mut stopped = std::pin::pin!(stop.wait_for(|stopped| *stopped));
                let mut accept = std::pin::pin!(async {
                    match &listener {
                        Some(l) => l.accept().await.map(|(tcp, _)| tcp),
                        None => std::future::pending().await,
                    }
                });
                std::future::poll_fn(|cx| {
                    if let Poll::Ready(r) = ended.as_mut().poll(cx) {
                        return Poll::Ready(Next::Ended(r));
                    }
                    if listener.is_some() && stopped.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Next::Stopped);
                    }
                    accept.as_mut().poll(cx).map(Next::Accepted)
                })
                .await
            };
            match event {
                // Every engine has ended.
                Next::Ended(None) => break,
                Next::Ended(Some(Ok(()))) => {}
                Next::Ended(Some(Err(e))) => {
                    // An engine panicked (or was cancelled): stop taking
                    // connections and shut the others down, then report it.
                    listener = None;
                    if failed.is_none() {
                        failed = Some(e);
                        let _ = handle.shutdown().await;
                    }
                }
                Next::Stopped => listener = None,
                Next::Accepted(Ok(tcp)) => {
                    // An engine that stopped was shut down (or failed,
                    // which the next turn of this loop hears).
                    if handle.hand_over(next, Command::Accept(tcp)).await.is_err() {
                        listener = None;
                    }
                    next = (next + 1) % count;
                }
                Next::Accepted(Err(_)) => {
                    // Out of file descriptors, or a connection that went
                    // away before it was accepted: try again shortly.
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                }
            }
        }
        failed
    }
}

/// What an engine accepts connections from.
#[derive(Debug)]
enum Listener {
    Tokio(TcpListener),
    /// Registered with the engine's poller: `ready` from its event until
    /// an accept finds no connection waiting.
    #[cfg(unix)]
    Owned {
        listener: mio::net::TcpListener,
        ready: bool,
    },
}

/// A slot of the table: its generation, and its connection if in use.
type Entry<T> = (u32, Option<Box<Slot<T>>>);

/// One engine: a task and its connections.
///
/// It runs outside Tokio's cooperative budget (`unconstrained`): the budget
/// is per task, and an engine is one task doing the I/O of thousands of
/// connections, so past 128 operations every transport would answer
/// `Pending` and wake its connection again, a spurious service each. The
/// engine yields on its own instead: each turn serves the connections
/// queued when it began, and one that had more to read is queued for the
/// next turn, after the runtime's other tasks.
struct Engine<H: Handler> {
    index: u32,
    handler: H,
    config: HubConfig,
    /// Connections by slot, with each slot's generation.
    slots: Vec<Entry<H::Data>>,
    /// Free slots, oldest first: reuse goes round them all, so that no
    /// slot's generation runs far ahead of the others'.
    free: std::collections::VecDeque<u32>,
    live: usize,
    queue: Arc<ReadyQueue>,
    keys: Vec<Key>,
    /// The engine's own poller ([`Readiness::Owned`](crate::hub::Readiness)),
    /// made with the first TCP socket (it needs the runtime's reactor).
    #[cfg(unix)]
    poller: Option<Poller>,
    /// A poller is wanted and not known to be out of reach.
    #[cfg_attr(not(unix), allow(dead_code))]
    owned: bool,
    /// The read buffer every connection reads into in turn.
    shared: BytesMut,
    /// Reading state for connections between messages.
    readers: Vec<Box<Receiver>>,
    turn: Turn,
    timers: Timers,
    /// Armed only while a deadline is pending: a registered timer costs
    /// Tokio's time driver work at every park.
    sleep: Option<(Instant, Pin<Box<Sleep>>)>,
    listener: Option<Listener>,
    accept_paused_until: Option<Instant>,
    commands: Option<mpsc::Receiver<Command>>,
    /// Connections handed to this engine (see `ACCEPT_QUEUE`).
    accepts: Option<mpsc::Receiver<Command>>,
    /// Shutting down, until this deadline.
    shutdown: Option<Instant>,
    /// Publishes taken from the inbox, being delivered.
    published: std::collections::VecDeque<Delivery>,
    /// Subscribers of the publish being delivered.
    subscribers: Vec<Key>,
    /// How many of them it was sent to (in earlier turns).
    delivered: usize,
    /// Topics whose publishes the inbox dropped for this engine, with the
    /// place of the last one dropped.
    missed: Vec<(Arc<str>, u64)>,
}

impl<H: Handler> std::fmt::Debug for Engine<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("index", &self.index)
            .field("live", &self.live)
            .finish_non_exhaustive()
    }
}

impl<H: Handler> Engine<H> {
    fn new(
        index: u32,
        handler: H,
        config: HubConfig,
        commands: mpsc::Receiver<Command>,
        handle: HubHandle,
    ) -> Self {
        let queue = Arc::new(ReadyQueue::default());
        let owned = config.readiness.owned();
        let turn = Turn {
            handle,
            hub: 0,
            engine: index,
            current: None,
            now: None,
            pool: QueuePool::new(POOL_LIMITS),
            dirty: Vec::new(),
            max_backpressure: config.backpressure(),
            policy: config.backpressure_policy,
            subs: Subs::new(config.topics.clone()),
            closing: Vec::new(),
            again: Vec::new(),
            again_now: false,
            queue: queue.clone(),
        };
        Engine {
            index,
            handler,
            shared: BytesMut::new(),
            config,
            slots: Vec::new(),
            free: Default::default(),
            live: 0,
            queue,
            keys: Vec::new(),
            #[cfg(unix)]
            poller: None,
            owned,
            readers: Vec::new(),
            turn,
            timers: Timers::default(),
            sleep: None,
            listener: None,
            accept_paused_until: None,
            commands: Some(commands),
            accepts: None,
            shutdown: None,
            published: Default::default(),
            subscribers: Vec::new(),
            delivered: 0,
            missed: Vec::new(),
        }
    }

    /// Takes a connection upgraded elsewhere: open from the start.
    fn adopt(&mut self, adopted: Adopted<H::Data>) {
        let Some(key) = self.admit(Transport::Other(adopted.io, adopted.addresses)) else {
            return;
        };
        let Engine {
            slots,
            handler,
            turn,
            ..
        } = self;
        let Some((_, Some(slot))) = slots.get_mut(key.slot as usize) else {
            return;
        };
        slot.stage = Stage::Open;
        slot.timer_at = None;
        let data = slot.data.insert(adopted.data);
        handler.open(&mut Ws {
            io: &slot.io,
            c: &mut slot.c,
            data,
            turn,
        });
        self.settle(key);
    }

    /// Takes a new connection; its key, unless the hub is shutting down.
    fn admit(&mut self, io: Transport) -> Option<Key> {
        if self.shutdown.is_some() {
            return None;
        }
        let slot = match self.free.pop_front() {
            Some(s) => s,
            // Every slot an id can name is taken (or retired): refused,
            // the transport dropped.
            None if self.slots.len() >= MAX_SLOTS => return None,
            None => {
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
        };
        let generation = self.slots[slot as usize].0;
        let key = Key { slot, generation };
        let now = self.turn.now();
        let c = &self.config.config;
        let mut io = io;
        let waker = match &mut io {
            #[cfg(unix)]
            Transport::Polled(p) => {
                let registered = self
                    .poller
                    .as_ref()
                    .map(|poller| poller.register(p.source(), mio::Token(slot as usize)));
                if !matches!(registered, Some(Ok(()))) {
                    // No room in the kernel for it: refused, as past the
                    // slot limit.
                    self.free.push_front(slot);
                    return None;
                }
                None
            }
            _ => Some(ConnWaker::new(key, self.queue.clone())),
        };
        let deadline = c.handshake.timeout.map(|t| later(now, t));
        let s = Slot {
            io,
            waker,
            queued: false,
            reading: None,
            parked: None,
            timer_at: deadline,
            stage: Stage::Handshake,
            data: None,
            // The core keeps the handshake's deadline, and the answer's if
            // the request is refused.
            c: Conn::new(key, Connection::handshaking(Role::Server, deadline)),
        };
        let s = self.slots[slot as usize].1.insert(Box::new(s));
        // Served at once: the request may be there already, and the first
        // read registers the waker.
        s.requeue(&mut self.turn);
        if let Some(at) = deadline {
            self.timers.push(at, key);
        }
        self.live += 1;
        Some(key)
    }

    fn slot_mut(&mut self, key: Key) -> Option<&mut Slot<H::Data>> {
        match self.slots.get_mut(key.slot as usize) {
            Some((generation, Some(s))) if *generation == key.generation => Some(s),
            _ => None,
        }
    }

    fn key_of(&self, slot: u32) -> Key {
        Key {
            slot,
            generation: self.slots[slot as usize].0,
        }
    }

    /// Serves a connection its transport woke.
    fn service(&mut self, key: Key) {
        let Engine {
            slots,
            handler,
            config,
            shared,
            readers,
            turn,
            ..
        } = self;
        let Some((generation, Some(slot))) = slots.get_mut(key.slot as usize) else {
            return;
        };
        if *generation != key.generation {
            return;
        }
        slot.serving();
        let waker = slot.io_waker();
        let mut cx = Context::from_waker(waker.as_ref().unwrap_or(Waker::noop()));
        match slot.stage {
            Stage::Handshake => read_handshake(slot, &mut cx, handler, config, readers, turn),
            Stage::Open => {
                if slot.c.write_blocked {
                    flush(slot, &mut cx, handler, turn);
                }
                read_frames(slot, &mut cx, handler, config, shared, readers, turn);
            }
            Stage::Ending => flush(slot, &mut cx, handler, turn),
            Stage::Lingering => linger(slot, &mut cx, turn),
        }
        self.settle(key);
    }

    /// After anything happened to a connection: ends it if it is over,
    /// moves it to `Ending` when only writing is left, and keeps its timer.
    fn settle(&mut self, key: Key) {
        let Engine { slots, turn, .. } = self;
        let slot = match slots.get_mut(key.slot as usize) {
            Some((generation, Some(s))) if *generation == key.generation => s,
            _ => return,
        };
        if slot.c.abandoned {
            self.end(key);
            return;
        }
        match slot.c.conn().phase() {
            Phase::TimedOut => {
                self.end(key);
                return;
            }
            Phase::Closed | Phase::Failing if slot.stage == Stage::Open => {
                slot.stage = Stage::Ending;
                if !slot.c.dirty {
                    // Nothing corked to write: finish now.
                    slot.requeue(turn);
                }
            }
            _ => {}
        }
        let want = slot.c.conn().poll_timeout();
        if want != slot.timer_at {
            slot.timer_at = want;
            if let Some(at) = want {
                self.timers.push(at, key);
            }
        }
    }

    /// Removes a connection, telling the handler if it was open.
    fn end(&mut self, key: Key) {
        let entry = &mut self.slots[key.slot as usize];
        let Some(mut slot) = entry.1.take() else {
            return;
        };
        // A slot whose generation would leave its bits in the id is
        // retired for good (after 65 536 connections in it): an old id
        // must never name a new connection.
        if entry.0 < LAST_GENERATION {
            entry.0 += 1;
            self.free.push_back(key.slot);
        }
        self.live -= 1;
        self.turn.subs.end(key.slot);
        slot.c.discard_out(&mut self.turn.pool);
        if let Some(r) = slot.reading.take() {
            lend_back(r, &mut self.readers);
        }
        let (frame, error) = match slot.c.ending.take() {
            Some(e) => (e.peer_close, e.error),
            None => (None, None),
        };
        let closed = Closed {
            id: self.turn.id(key),
            frame,
            error: error.or_else(|| slot.c.conn().take_error().map(Error::from)),
        };
        if let Some(data) = slot.data.take() {
            self.handler.close(closed, data);
        }
    }

    /// A timer entry came due.
    fn on_timer(&mut self, at: Instant, key: Key) {
        let now = self.turn.now();
        let Engine { slots, turn, .. } = self;
        let Some((generation, Some(slot))) = slots.get_mut(key.slot as usize) else {
            return;
        };
        if *generation != key.generation || slot.timer_at != Some(at) {
            return;
        }
        slot.timer_at = None;
        slot.c.conn().handle_timeout(now);
        if slot.stage == Stage::Handshake && slot.c.conn().phase() == Phase::TimedOut {
            // No answer: the request never came whole (the core's error
            // says so).
            slot.c.abandoned = true;
        } else {
            slot.c.transmit_owed(turn);
        }
        self.settle(key);
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Accept(tcp) => {
                let _ = tcp.set_nodelay(true);
                if let Some(io) = self.tcp_transport(tcp) {
                    self.admit(io);
                }
            }
            Command::AcceptIo(io, addresses) => {
                self.admit(Transport::Other(io, addresses));
            }
            Command::Adopt(adopted) => {
                // Sent by an `Adopter<H::Data>`, made by this hub: the type
                // always matches.
                if let Ok(adopted) = adopted.downcast::<Adopted<H::Data>>() {
                    self.adopt(*adopted);
                }
            }
            Command::Shutdown => self.start_shutdown(),
            Command::Send(id, msg) => self.with_conn(id, |c, turn| {
                let _ = c.send_message(turn, &msg);
            }),
            Command::SendPrepared(id, msg) => self.with_conn(id, |c, turn| {
                let _ = c.send_prepared(turn, &msg);
            }),
            Command::Close(id, code, reason) => self.with_conn(id, |c, turn| {
                let _ = c.close(turn, code, &reason);
            }),
            Command::Subscribe(id, topic) => self.with_conn(id, |c, turn| {
                turn.subs.subscribe(c.key, &topic);
            }),
            Command::Unsubscribe(id, topic) => self.with_conn(id, |c, turn| {
                turn.subs.unsubscribe(c.key, &topic);
            }),
        }
    }

    fn with_conn(&mut self, id: ConnId, f: impl FnOnce(&mut Conn, &mut Turn)) {
        if id.hub != self.turn.hub || id.engine != self.index {
            // Another hub's (or engine's) connection: none of ours.
            return;
        }
        let key = Key {
            slot: id.slot,
            generation: id.generation,
        };
        let Engine { slots, turn, .. } = self;
        let Some((generation, Some(slot))) = slots.get_mut(key.slot as usize) else {
            return;
        };
        if *generation != key.generation || slot.stage != Stage::Open {
            return;
        }
        f(&mut slot.c, turn);
        self.settle(key);
    }

    fn start_shutdown(&mut self) {
        if self.shutdown.is_some() {
            return;
        }
        self.shutdown = Some(later(self.turn.now(), self.config.shutdown_timeout));
        self.listener = None;
        for slot in 0..self.slots.len() as u32 {
            let key = self.key_of(slot);
            let Some(s) = self.slot_mut(key) else {
                continue;
            };
            match s.stage {
                Stage::Handshake => self.end(key),
                Stage::Open => {
                    let Engine { slots, turn, .. } = self;
                    if let Some((_, Some(s))) = slots.get_mut(slot as usize) {
                        let _ = s.c.close_with(turn, Some(Leaving::ShuttingDown.frame()));
                    }
                    self.settle(key);
                }
                Stage::Ending | Stage::Lingering => {}
            }
        }
    }

    /// Sends what was published to topics to this engine's subscribers:
    /// each publish is one prepared frame, written to each subscriber as to
    /// any other send (its backpressure policy included). At most
    /// `DELIVERIES_PER_TURN` sends a turn, as reads and commands are
    /// capped: the rest, in order, next turn. True if some are left.
    fn deliver_published(&mut self) -> bool {
        let mut published = std::mem::take(&mut self.published);
        let mut missed = std::mem::take(&mut self.missed);
        self.turn.subs.inbox.take(&mut published, &mut missed);
        if !missed.is_empty() {
            self.missed_publishes(&mut missed);
        }
        self.missed = missed;
        let mut keys = std::mem::take(&mut self.subscribers);
        let mut budget = DELIVERIES_PER_TURN;
        let (mut sent, mut sent_bytes) = (0, 0);
        while budget > 0 {
            let Some(d) = published.front() else {
                break;
            };
            if self.delivered == 0 {
                // The subscribers are fixed when a publish's delivery
                // starts; one that ends meanwhile is skipped below.
                keys.clear();
                self.turn.subs.subscribers(&d.topic, d.seq, &mut keys);
            }
            let end = keys.len().min(self.delivered + budget);
            // Entries naming a connection come only from this engine.
            let except = d.except.map(|(_, t)| t);
            for &key in &keys[self.delivered..end] {
                if except == Some(token(key)) {
                    continue;
                }
                let Engine { slots, turn, .. } = self;
                let Some((generation, Some(slot))) = slots.get_mut(key.slot as usize) else {
                    continue;
                };
                if *generation != key.generation || slot.stage != Stage::Open {
                    continue;
                }
                let _ = slot.c.deliver(turn, &d.msg);
                self.settle(key);
            }
            // A publish with no subscriber here costs a send's worth too.
            budget -= (end - self.delivered).clamp(1, budget);
            if end == keys.len() {
                if let Some(d) = published.pop_front() {
                    sent += 1;
                    sent_bytes += d.size();
                }
                self.delivered = 0;
            } else {
                self.delivered = end;
            }
        }
        if sent > 0 {
            // Room in the inbox's bounds for as many more.
            self.turn.subs.inbox.sent(sent, sent_bytes);
        }
        let more = !published.is_empty();
        if !more {
            keys.clear();
        }
        self.subscribers = keys;
        self.published = published;
        more
    }

    /// Publishes to `missed` topics were dropped for this engine: its
    /// inbox was full (the engine fell that far behind). Their subscribers
    /// here meet the slow-subscriber policy, as if each were the one that
    /// fell behind: closed under `Close`, the publish skipped under `Drop`.
    /// Only those a dropped publish was for: a connection that subscribed
    /// after the last one dropped (in this turn's handlers, say) missed
    /// nothing.
    #[cold]
    fn missed_publishes(&mut self, missed: &mut Vec<(Arc<str>, u64)>) {
        if self.turn.policy == BackpressurePolicy::Drop {
            missed.clear();
            return;
        }
        let mut keys = Vec::new();
        for (topic, last) in missed.drain(..) {
            keys.clear();
            self.turn.subs.subscribers(&topic, last, &mut keys);
            for &key in &keys {
                let Engine { slots, turn, .. } = self;
                let Some((generation, Some(slot))) = slots.get_mut(key.slot as usize) else {
                    continue;
                };
                if *generation != key.generation || slot.stage != Stage::Open {
                    continue;
                }
                // Closed as the handler would close it, so that a peer
                // that reads is told (1013: come back and resubscribe),
                // and `Handler::close` hears why.
                slot.c.set_error(Error::PublishesMissed {
                    topic: topic.to_string(),
                });
                let _ = slot
                    .c
                    .close_with(turn, Some(Leaving::MissedPublishes.frame()));
                self.settle(key);
            }
        }
    }

    /// Sends the close frames handlers and handles asked for this turn.
    fn send_closes(&mut self) {
        let mut closing = std::mem::take(&mut self.turn.closing);
        for &key in &closing {
            let Engine { slots, turn, .. } = self;
            let Some((generation, Some(slot))) = slots.get_mut(key.slot as usize) else {
                continue;
            };
            if *generation != key.generation {
                continue;
            }
            slot.c.send_close(turn);
            // What came after the closing message, and what comes next,
            // is read now that the close is out: the peer's answer.
            slot.requeue(turn);
            self.settle(key);
        }
        closing.clear();
        self.turn.closing = closing;
    }

    /// Writes out every connection that has bytes corked this turn.
    fn flush_dirty(&mut self) {
        let mut dirty = std::mem::take(&mut self.turn.dirty);
        for &slot in &dirty {
            let key = self.key_of(slot);
            let Engine {
                slots,
                handler,
                turn,
                ..
            } = self;
            let Some((_, Some(s))) = slots.get_mut(slot as usize) else {
                continue;
            };
            s.c.dirty = false;
            if s.c.buffered() == 0 && s.stage == Stage::Open && !s.c.wants_drain && !s.c.abandoned {
                // Written out already, by the read that corked it (the
                // usual echo): nothing left to do, and its service
                // settled it.
                continue;
            }
            let waker = s.io_waker();
            let mut cx = Context::from_waker(waker.as_ref().unwrap_or(Waker::noop()));
            flush(s, &mut cx, handler, turn);
            self.settle(key);
        }
        dirty.clear();
        // Connections marked while flushing (a drain handler's sends) are
        // written next turn.
        if self.turn.dirty.is_empty() {
            self.turn.dirty = dirty;
        } else {
            self.queue_dirty_again();
        }
    }

    fn queue_dirty_again(&mut self) {
        let dirty = std::mem::take(&mut self.turn.dirty);
        for &slot in &dirty {
            if let Some((_, Some(s))) = self.slots.get_mut(slot as usize) {
                s.requeue(&mut self.turn);
            }
        }
        self.turn.dirty = dirty;
    }

    /// A TCP connection as this engine reads it: on its poller if it has
    /// one (taken off Tokio's reactor), else as it is. `None` if the socket
    /// could not be taken off Tokio's reactor (it is gone then, as a
    /// connection refused past the slot limit).
    fn tcp_transport(&mut self, tcp: TcpStream) -> Option<Transport> {
        #[cfg(unix)]
        if self.ensure_poller() {
            let std = tcp.into_std().ok()?;
            return Some(Transport::Polled(Polled::new(
                mio::net::TcpStream::from_std(std),
            )));
        }
        Some(Transport::Tcp(tcp))
    }

    /// Makes the engine's poller when first needed, if it is to have one:
    /// with the first TCP socket, so on a runtime that has I/O (a Tokio
    /// socket needs it too). Whether it has one.
    #[cfg(unix)]
    fn ensure_poller(&mut self) -> bool {
        if self.owned && self.poller.is_none() {
            match Poller::new() {
                Ok(p) => {
                    self.poller = Some(p);
                    // Its first harvest, next turn, registers the task
                    // with the reactor for its events.
                    self.turn.again_now = true;
                }
                // Out of descriptors: the sockets register with Tokio one
                // by one instead.
                Err(_) => self.owned = false,
            }
        }
        self.poller.is_some()
    }

    /// Moves a Tokio listener onto the engine's poller.
    #[cfg(unix)]
    fn own_listener(&mut self) {
        if !matches!(self.listener, Some(Listener::Tokio(_))) || !self.ensure_poller() {
            return;
        }
        let Some(poller) = &self.poller else {
            return;
        };
        let Some(Listener::Tokio(l)) = self.listener.take() else {
            return;
        };
        let std = match l.into_std() {
            Ok(std) => std,
            Err(_) => return,
        };
        let mut listener = mio::net::TcpListener::from_std(std);
        self.listener = match poller.register_listener(&mut listener) {
            Ok(()) => Some(Listener::Owned {
                listener,
                ready: true,
            }),
            // Back on Tokio's reactor: its connections still come to the
            // poller, one by one.
            Err(_) => TcpListener::from_std(listener.into())
                .ok()
                .map(Listener::Tokio),
        };
    }

    fn poll_accept(&mut self, cx: &mut Context<'_>) {
        if let Some(until) = self.accept_paused_until {
            if self.turn.now() < until {
                return;
            }
            self.accept_paused_until = None;
        }
        #[cfg(unix)]
        self.own_listener();
        for _ in 0..ACCEPTS_PER_TURN {
            let accepted = match &mut self.listener {
                None => return,
                Some(Listener::Tokio(listener)) => match listener.poll_accept(cx) {
                    Poll::Ready(Ok((tcp, _))) => {
                        let _ = tcp.set_nodelay(true);
                        match self.tcp_transport(tcp) {
                            Some(io) => Ok(io),
                            None => continue,
                        }
                    }
                    Poll::Ready(Err(e)) => Err(e),
                    Poll::Pending => return,
                },
                #[cfg(unix)]
                Some(Listener::Owned { listener, ready }) => {
                    if !*ready {
                        return;
                    }
                    match listener.accept() {
                        Ok((tcp, _)) => {
                            let _ = tcp.set_nodelay(true);
                            Ok(Transport::Polled(Polled::new(tcp)))
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            *ready = false;
                            return;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => Err(e),
                    }
                }
            };
            match accepted {
                Ok(io) => {
                    self.admit(io);
                }
                Err(_) => {
                    self.accept_paused_until = Some(later(self.turn.now(), ACCEPT_PAUSE));
                    return;
                }
            }
        }
        // More may wait: come back after serving the others.
        cx.waker().wake_by_ref();
    }

    /// Reads the poller's events: each connection named is served this
    /// turn, and the listener accepts again.
    #[cfg(unix)]
    fn harvest(&mut self, cx: &mut Context<'_>) {
        let Engine {
            poller,
            slots,
            turn,
            listener,
            ..
        } = self;
        let Some(poller) = poller else {
            return;
        };
        let harvested = poller.harvest(cx, |token, ready| {
            if token == LISTENER {
                if let Some(Listener::Owned { ready, .. }) = listener {
                    *ready = true;
                }
                return;
            }
            let Some((generation, Some(s))) = slots.get_mut(token.0) else {
                return;
            };
            if let Transport::Polled(p) = &mut s.io {
                p.ready(ready);
            }
            if !s.queued {
                s.queued = true;
                turn.again.push(Key {
                    slot: token.0 as u32,
                    generation: *generation,
                });
            }
        });
        if let Err(e) = harvested {
            // The poller itself failed (never seen): no socket on it can
            // be told apart from an idle one any more. Its connections end
            // with the error, and the engine goes on with Tokio's
            // readiness for what comes next.
            self.poller = None;
            self.owned = false;
            if matches!(self.listener, Some(Listener::Owned { .. })) {
                self.listener = None;
            }
            for slot in 0..self.slots.len() as u32 {
                let key = self.key_of(slot);
                if let Some(s) = self.slot_mut(key) {
                    if matches!(s.io, Transport::Polled(_)) {
                        s.c.set_error(Error::Io(io::Error::new(e.kind(), e.to_string())));
                        self.end(key);
                    }
                }
            }
        }
    }

    /// Takes the connections handed to this engine.
    fn poll_handed_over(&mut self, cx: &mut Context<'_>) {
        for _ in 0..ACCEPTS_PER_TURN {
            let Some(rx) = &mut self.accepts else {
                return;
            };
            match rx.poll_recv(cx) {
                Poll::Ready(Some(cmd)) => self.command(cmd),
                Poll::Ready(None) => {
                    self.accepts = None;
                    return;
                }
                Poll::Pending => return,
            }
        }
        cx.waker().wake_by_ref();
    }

    fn poll_commands(&mut self, cx: &mut Context<'_>) {
        for _ in 0..COMMANDS_PER_TURN {
            let Some(rx) = &mut self.commands else {
                return;
            };
            match rx.poll_recv(cx) {
                Poll::Ready(Some(cmd)) => self.command(cmd),
                Poll::Ready(None) => {
                    // Every handle is gone: nothing more will come.
                    self.commands = None;
                    return;
                }
                Poll::Pending => return,
            }
        }
        cx.waker().wake_by_ref();
    }

    fn end_all(&mut self) {
        for slot in 0..self.slots.len() as u32 {
            let key = self.key_of(slot);
            if let Some(s) = self.slot_mut(key) {
                // Unless it was failing already: that is why it ended.
                if s.c.conn().phase() != Phase::Failing {
                    s.c.set_error(Error::ShutdownTimeout);
                }
                self.end(key);
            }
        }
    }

    /// Drops entries at the top of the timer heap whose connection wants
    /// another deadline (or is gone), so that the engine sleeps only for
    /// deadlines that matter: one past handshake keeps no timer armed.
    fn drop_stale_timers(&mut self) {
        while let Some((at, key)) = self.timers.peek() {
            let live = match self.slots.get(key.slot as usize) {
                Some((generation, Some(s))) => {
                    *generation == key.generation && s.timer_at == Some(at)
                }
                _ => false,
            };
            if live {
                return;
            }
            self.timers.pop();
        }
    }

    fn poll_turn(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.queue.register(cx.waker());
        self.turn.subs.inbox.register(cx.waker());
        // Read from the clock when first needed this turn: an echo
        // without timers needs none.
        self.turn.now = None;
        #[cfg(unix)]
        self.harvest(cx);
        self.poll_commands(cx);
        self.poll_handed_over(cx);
        self.poll_accept(cx);
        let mut keys = std::mem::take(&mut self.keys);
        self.queue.take(&mut keys);
        keys.append(&mut self.turn.again);
        for &key in &keys {
            self.service(key);
        }
        keys.clear();
        self.keys = keys;
        self.drop_stale_timers();
        if self.timers.next().is_some() {
            let now = self.turn.now();
            while let Some((at, key)) = self.timers.pop_due(now) {
                self.on_timer(at, key);
            }
            self.drop_stale_timers();
        }
        // After the handlers ran: what they published goes out this turn,
        // before the close frames asked for meanwhile (up to the turn's
        // cap: past it, a close does not wait for a backlog, and a
        // closing connection gets no publish after its close frame).
        let deliveries_left = self.deliver_published();
        self.send_closes();
        self.flush_dirty();
        if let Some(deadline) = self.shutdown {
            if self.live == 0 {
                return Poll::Ready(());
            }
            if self.turn.now() >= deadline {
                self.end_all();
                return Poll::Ready(());
            }
        }
        if !self.queue.is_empty()
            || !self.turn.again.is_empty()
            || std::mem::take(&mut self.turn.again_now)
            || !self.turn.closing.is_empty()
            || deliveries_left
        {
            // Connections that stopped to let others go first, close
            // frames a drain handler asked for as the turn ended, or
            // publishes past this turn's cap.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let next = [self.timers.next(), self.shutdown, self.accept_paused_until]
            .into_iter()
            .flatten()
            .min();
        match next {
            None => self.sleep = None,
            Some(at) => {
                let sleep = match &mut self.sleep {
                    Some((armed, sleep)) => {
                        if *armed != at {
                            *armed = at;
                            sleep.as_mut().reset(at.into());
                        }
                        sleep
                    }
                    None => {
                        let sleep = Box::pin(tokio::time::sleep_until(at.into()));
                        &mut self.sleep.insert((at, sleep)).1
                    }
                };
                if sleep.as_mut().poll(cx).is_ready() {
                    self.sleep = None;
                    cx.waker().wake_by_ref();
                }
            }
        }
        Poll::Pending
    }
}

impl<H: Handler> Future for Engine<H> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().poll_turn(cx)
    }
}

// Engine holds only Unpin parts (the sleep is boxed).
impl<H: Handler> Unpin for Engine<H> {}

/// A receiver from the pool (made new for this connection), or a new one.
#[inline(always)]
fn lend(readers: &mut Vec<Box<Receiver>>, config: &HubConfig) -> Box<Receiver> {
    match readers.pop() {
        Some(mut rx) => {
            rx.reset();
            rx
        }
        None => {
            let c = &config.config;
            let decoder = MessageDecoder::new(Role::Server, c.limits())
                .accept_unmasked_frames(c.accept_unmasked_frames);
            // Replies are written before the next read (the engine sends
            // from the task that reads); a handler that asked to close
            // hears no more messages.
            let mut rx = Receiver::new(Inbox::new(decoder, BytesMut::new()), true);
            rx.set_quiet_after_close(true);
            // Timers are the engine's (its heap, served every turn).
            rx.set_engine_timers(true);
            Box::new(rx)
        }
    }
}

/// A receiver back to the pool, if it holds nothing of its connection.
#[inline(always)]
fn lend_back(rx: Box<Receiver>, readers: &mut Vec<Box<Receiver>>) {
    if rx.inbox().is_at_rest() && readers.len() < READER_POOL_MAX {
        readers.push(rx);
    }
}

/// Reads the upgrade request; answers it.
fn read_handshake<H: Handler>(
    slot: &mut Slot<H::Data>,
    cx: &mut Context<'_>,
    handler: &mut H,
    config: &HubConfig,
    readers: &mut Vec<Box<Receiver>>,
    turn: &mut Turn,
) {
    /// What the bytes read so far call for.
    enum Step {
        Answer(http::Request<()>),
        Refuse(HandshakeError),
        Read(Poll<io::Result<usize>>),
    }
    let max = config.config.handshake.max_size;
    let mut r = slot.reading.take().unwrap_or_else(|| lend(readers, config));
    loop {
        let io = &mut slot.io;
        let step = r.inbox_mut().with_buffered(|bytes| {
            match parse_request(bytes, config.config.handshake.max_headers) {
                Ok(Some((_, len))) if len > max => Step::Refuse(HandshakeError::TooLarge(max)),
                Ok(Some((request, len))) => {
                    bytes.advance(len);
                    Step::Answer(request)
                }
                Ok(None) if bytes.len() >= max => Step::Refuse(HandshakeError::TooLarge(max)),
                Ok(None) => {
                    let room = max - bytes.len();
                    bytes.reserve(room.min(1024));
                    Step::Read(tokio_util::io::poll_read_buf(Pin::new(io), cx, bytes))
                }
                Err(e) => Step::Refuse(e),
            }
        });
        match step {
            Step::Answer(request) => return answer(slot, r, request, handler, config, turn),
            Step::Refuse(e) => return refuse(slot, turn, &e),
            Step::Read(Poll::Pending) => break,
            Step::Read(Poll::Ready(Ok(n))) if n > 0 => {}
            // Gone before asking anything: nothing to answer.
            Step::Read(Poll::Ready(_)) => {
                slot.c.abandoned = true;
                break;
            }
        }
    }
    slot.reading = Some(r);
}

/// Answers a request that is not a valid upgrade, then ends.
fn refuse<T>(slot: &mut Slot<T>, turn: &mut Turn, err: &HandshakeError) {
    match error_response(err) {
        Some(resp) => write_http(slot, turn, &resp, resp.body()),
        None => slot.c.abandoned = true,
    }
}

fn write_http<T, B>(slot: &mut Slot<T>, turn: &mut Turn, resp: &http::Response<B>, body: &[u8]) {
    let mut head = Vec::with_capacity(160 + body.len());
    write_response(resp, body, &mut head);
    slot.c.queue_raw(turn, &head);
    // Nothing but this answer goes out, within the handshake's deadline.
    slot.c.conn().handle_refused();
    slot.stage = Stage::Ending;
}

fn answer<H: Handler>(
    slot: &mut Slot<H::Data>,
    mut r: Box<Receiver>,
    mut request: http::Request<()>,
    handler: &mut H,
    config: &HubConfig,
    turn: &mut Turn,
) {
    request.extensions_mut().insert(slot.io.addresses());
    let mut accepting = match Accepting::http1(&request) {
        Ok(a) => a,
        Err(e) => {
            if let Some(resp) = handler.request(&request) {
                return write_http(slot, turn, &resp, resp.body());
            }
            return refuse(slot, turn, &e);
        }
    };
    accepting.negotiate(request.headers(), config.config.deflate.as_ref());
    let mut response = accepting.required().clone();
    let data = match handler.upgrade(&request, &mut response) {
        Ok(data) => data,
        Err(refusal) => return write_http(slot, turn, &refusal, refusal.body()),
    };
    accepting.respond(&mut response);
    if let Some((params, deflate)) = accepting.into_deflate() {
        let encoder = slot.c.d.encoder_mut();
        if let Err(e) =
            crate::proto::deflate::enable(r.inbox_mut().decoder_mut(), encoder, &params, &deflate)
        {
            slot.c.fail(e.into());
            return;
        }
    }
    let mut head = Vec::with_capacity(160);
    write_response(&response, &[], &mut head);
    slot.c.queue_raw(turn, &head);
    // What followed the request waits in memory of its size.
    r.inbox_mut().wait(&mut OwnMemory);
    slot.reading = Some(r);
    *slot.c.conn() = Connection::new(Role::Server, config.config.timers(), turn.now());
    slot.stage = Stage::Open;
    let data = slot.data.insert(data);
    handler.open(&mut Ws {
        io: &slot.io,
        c: &mut slot.c,
        data,
        turn,
    });
    // Frames that came with the request are read on the next service.
    slot.requeue(turn);
}

/// Reads and dispatches what the transport has, a few reads at most: a
/// loop around the core's receive step ([`Receiver::step_in`]) over the
/// engine's shared read buffer. The core decides (what to decode, when to
/// flush, read, wait or end); this reads, writes and calls the handler.
fn read_frames<H: Handler>(
    slot: &mut Slot<H::Data>,
    cx: &mut Context<'_>,
    handler: &mut H,
    config: &HubConfig,
    shared: &mut BytesMut,
    readers: &mut Vec<Box<Receiver>>,
    turn: &mut Turn,
) {
    if slot.data.is_none() {
        return;
    }
    let mut rx = slot.reading.take().unwrap_or_else(|| {
        let mut rx = lend(readers, config);
        if let Some(inflater) = slot.parked.take() {
            rx.inbox_mut().decoder_mut().restore_inflater(inflater);
        }
        rx
    });
    let mem = &mut SharedRead(config.read_buffer_size);
    let mut reads = 0;
    let mut budget_retries = 0;
    // Served again next turn with input still buffered.
    let mut requeued = false;
    let mut input = Input::Start;
    // The turn's time (read once a turn, shared by its connections): the
    // step's clock as well.
    let now = turn.now();
    loop {
        let mut link = Reach {
            c: &mut slot.c,
            turn,
        };
        let step = rx.step_in(&mut link, input, shared, mem, &|| now);
        input = match step {
            Stepped::Borrowed(data) => {
                let Some(data_) = slot.data.as_mut() else {
                    break;
                };
                let mut ws = Ws {
                    io: &slot.io,
                    c: &mut slot.c,
                    data: data_,
                    turn,
                };
                match data {
                    BorrowedData::Text(t) => handler.message(&mut ws, HubMessage::Text(t)),
                    BorrowedData::Binary(b) => handler.message(&mut ws, HubMessage::Binary(b)),
                }
                ws.c.transmit_owed(ws.turn);
                Input::Start
            }
            Stepped::Step(Step::Message(msg)) => {
                if let Message::Close(frame) = msg {
                    slot.c.peer_closed(frame);
                    Input::Start
                } else {
                    let own = !rx.decodes_in_scratch();
                    dispatch(slot, handler, turn, &msg, own);
                    Input::Start
                }
            }
            Stepped::Step(step @ (Step::Read(_) | Step::FlushRead(_))) => {
                let plan = match step {
                    Step::FlushRead(plan) => {
                        // The replies to what one read brought leave
                        // together, now: a peer waiting for them should
                        // not wait for the rest of the turn. Sends to
                        // other connections stay corked until the turn
                        // ends.
                        flush(slot, cx, handler, turn);
                        if slot.c.abandoned {
                            break;
                        }
                        if slot.c.write_blocked {
                            input = Input::FlushBlocked;
                            continue;
                        }
                        plan
                    }
                    Step::Read(plan) => plan,
                    _ => unreachable!(),
                };
                if reads == READS_PER_TURN {
                    // Others first; this one comes back next turn.
                    if let Plan::Scratch { .. } = plan {
                        rx.inbox_mut().scratch_unused();
                    }
                    slot.requeue(turn);
                    requeued = true;
                    break;
                }
                reads += 1;
                let read = match plan {
                    Plan::Scratch { limit } => {
                        // Reclaimed only when a quarter is left: reading
                        // into what remains saves the bookkeeping on most
                        // reads.
                        if shared.capacity() < config.read_buffer_size / 4 {
                            shared.reserve(config.read_buffer_size);
                        }
                        read_buf(&mut slot.io, cx, shared, limit)
                    }
                    Plan::Own => {
                        let inbox = rx.inbox_mut();
                        let read = tokio_util::io::poll_read_buf(
                            Pin::new(&mut slot.io),
                            cx,
                            &mut inbox.target(),
                        );
                        let got = match &read {
                            Poll::Ready(Ok(n)) => Some(*n),
                            _ => None,
                        };
                        inbox.read_done(got, &mut OwnMemory);
                        read
                    }
                    // The step asks the budget itself.
                    Plan::Refused(_) => break,
                };
                match read {
                    Poll::Pending => {
                        if rx.read_pending(&Reach {
                            c: &mut slot.c,
                            turn,
                        }) {
                            break;
                        }
                        Input::ReadPending
                    }
                    Poll::Ready(r) => Input::Read(r),
                }
            }
            Stepped::Step(Step::Flush) => {
                flush(slot, cx, handler, turn);
                if slot.c.abandoned {
                    break;
                }
                if slot.c.write_blocked {
                    Input::FlushBlocked
                } else {
                    Input::Flushed(false)
                }
            }
            Stepped::Step(Step::WriteNow) => Input::Start,
            Stepped::Step(Step::WaitForBudget(wanted)) => {
                // The transport's waker, or one made now for a socket of
                // the engine's poller (which wakes nothing but for the
                // socket): woken when the budget has room, the step asks
                // again and this finds it.
                let waker = slot.waker(turn);
                if !rx.inbox().wait_for_budget(wanted, &waker) {
                    break;
                }
                // Room already: go on, a few times a turn at most.
                if budget_retries == BUDGET_RETRIES_PER_TURN {
                    slot.requeue(turn);
                    break;
                }
                budget_retries += 1;
                Input::BudgetReady
            }
            Stepped::Step(Step::End(how)) => {
                match how {
                    Some(Ended::Error(e)) => slot.c.set_error(e.into()),
                    Some(Ended::Transport(e)) => slot.c.set_error(e.into()),
                    None => {}
                }
                slot.c.abandoned = true;
                break;
            }
            // Waiting for input, the peer or the close to go out; ending
            // (the engine writes out the close and shuts down); timed out.
            Stepped::Step(_) => break,
        };
    }
    // Left mid-read (a write failed, or the handler's data is gone): the
    // rest of the read is not this connection's any more, and must not be
    // the next one's.
    rx.quit_scratch(shared);
    debug_assert!(shared.is_empty());
    // What a connection keeps between reads: nothing once its bytes are
    // decoded (after a large message too), and no more than in proportion
    // to an unfinished frame while it waits for the rest.
    if !requeued || rx.inbox().buffered().is_empty() {
        rx.inbox_mut().wait(&mut OwnMemory);
    }
    // An idle compressing connection keeps only its inflater (a few words
    // under the shared and dedicated policies), not a whole inbox.
    slot.parked = rx.inbox_mut().park_inflater();
    if rx.inbox().is_at_rest() {
        lend_back(rx, readers);
    } else {
        slot.reading = Some(rx);
    }
}

/// Hands a message the core decoded (not borrowed) to the handler.
fn dispatch<H: Handler>(
    slot: &mut Slot<H::Data>,
    handler: &mut H,
    turn: &mut Turn,
    msg: &Message,
    own: bool,
) {
    let Some(data) = slot.data.as_mut() else {
        return;
    };
    let mut ws = Ws {
        io: &slot.io,
        c: &mut slot.c,
        data,
        turn,
    };
    if own {
        // Only a message decoded from the connection's own buffer may
        // have its payload kept (sent on without a copy): the shared read
        // buffer is not held past the read.
        let payload = match msg {
            Message::Text(t) => Some(t.as_bytes()),
            Message::Binary(b) => Some(b),
            _ => None,
        };
        // Kept only where the core would queue it by reference: below
        // that it copies, and a reference kept would cost a count.
        ws.turn.current = payload.filter(|p| p.len() >= SHARE_PAYLOAD_MIN).cloned();
    }
    match msg {
        Message::Text(t) => handler.message(&mut ws, HubMessage::Text(t.as_str())),
        Message::Binary(b) => handler.message(&mut ws, HubMessage::Binary(b)),
        Message::Ping(p) => handler.ping(&mut ws, p),
        Message::Pong(p) => handler.pong(&mut ws, p),
        // Hub decoders assemble messages; close frames are taken apart.
        Message::Close(_) | Message::Frame(_) => {}
    }
    ws.turn.current = None;
    ws.c.transmit_owed(ws.turn);
}

/// A hub connection as the core's receive step reaches it: owned by the
/// engine, so every call is direct; what the core owes is encoded (and
/// corked) at once.
struct Reach<'a> {
    c: &'a mut Conn,
    turn: &'a mut Turn,
}

impl Link for Reach<'_> {
    #[inline]
    fn state(&self) -> State {
        self.c.d.conn().state()
    }

    #[inline]
    fn with_conn<T>(
        &mut self,
        f: impl FnOnce(&mut Connection) -> T,
    ) -> std::result::Result<T, crate::proto::Error> {
        let out = f(self.c.conn());
        self.c.transmit_owed(self.turn);
        Ok(out)
    }

    fn transport_ended(&mut self) {
        self.c.abandoned = true;
    }

    fn abandon(&mut self) {
        self.c.abandoned = true;
    }

    #[inline]
    fn has_writes(&self) -> bool {
        self.c.dirty || self.c.write_blocked
    }

    #[inline]
    fn queued(&self) -> usize {
        self.c.buffered()
    }

    /// A close asked for and not yet out: nothing more of the peer's input
    /// is decoded until it is (see [`Conn::close_pending`]); nor once the
    /// connection is given up.
    #[inline]
    fn holds_input(&self) -> bool {
        self.c.close_pending() || self.c.abandoned
    }
}

/// Reads and drops what the peer sends after the connection shut down
/// ([`Stage::Lingering`]) until it ends the transport; the close deadline
/// bounds the wait, and a turn reads no more than the core's share.
#[cold]
#[inline(never)]
fn linger<T>(slot: &mut Slot<T>, cx: &mut Context<'_>, turn: &mut Turn) {
    match discard(&mut slot.io, cx, DISCARD_AT_ONCE) {
        Discarded::Pending => {}
        Discarded::Ended => slot.c.abandoned = true,
        // Others first.
        Discarded::More => slot.requeue(turn),
    }
}

/// Reads into `buf`: straight into its spare capacity for a socket of the
/// engine's poller, through `AsyncRead` for the others.
#[inline]
fn read_buf(
    io: &mut Transport,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
    limit: usize,
) -> Poll<io::Result<usize>> {
    #[cfg(unix)]
    if let Transport::Polled(p) = io {
        return p.read_buf(buf, limit);
    }
    tokio_util::io::poll_read_buf(Pin::new(io), cx, &mut buf.limit(limit))
}

/// The engine's shared read buffer as the core's plan sees it: reads into
/// it take at most `.0` bytes (what a budget sets aside for one).
struct SharedRead(usize);

impl ReadMemory for SharedRead {
    fn scratch_len(&self) -> usize {
        self.0
    }
}

/// Writes out what waits for the peer; tells the handler when a backed-up
/// connection drains; shuts an ending connection down once all is out.
fn flush<H: Handler>(
    slot: &mut Slot<H::Data>,
    cx: &mut Context<'_>,
    handler: &mut H,
    turn: &mut Turn,
) {
    if slot.c.abandoned {
        return;
    }
    match slot.c.poll_write_out(&mut slot.io, cx, &mut turn.pool) {
        Poll::Ready(Ok(())) => {}
        Poll::Ready(Err(e)) => {
            slot.c.transport_ended(Some(e));
            return;
        }
        Poll::Pending => {
            slot.c.write_blocked = true;
            return;
        }
    }
    if std::mem::replace(&mut slot.c.write_blocked, false) {
        // Reading paused while the peer was behind: go on.
        slot.requeue(turn);
    }
    if std::mem::replace(&mut slot.c.wants_drain, false) && !slot.c.is_closing() {
        if let (Stage::Open, Some(data)) = (slot.stage, slot.data.as_mut()) {
            handler.drain(&mut Ws {
                io: &slot.io,
                c: &mut slot.c,
                data,
                turn,
            });
        }
    }
    if slot.stage == Stage::Ending && slot.c.buffered() == 0 {
        match Pin::new(&mut slot.io).poll_shutdown(cx) {
            Poll::Pending => {}
            // Shut down, or failed to: either way the connection is over.
            Poll::Ready(Ok(())) if slot.c.linger && slot.c.conn().poll_timeout().is_some() => {
                slot.stage = Stage::Lingering;
                slot.requeue(turn);
            }
            Poll::Ready(_) => {
                // Not for a refused upgrade: a peer flooding its request
                // is read no further than the head's limit.
                if slot.data.is_some() {
                    discard(&mut slot.io, cx, DISCARD_AT_ONCE);
                }
                slot.c.abandoned = true;
            }
        }
    }
}
