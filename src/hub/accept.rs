//! How connections come to an engine: its listener (on Tokio's reactor or
//! its own poller), the poller's readiness events, and connections handed
//! over by the hub's acceptor, a handle or an adopter. Each is admitted
//! into a slot here.

use std::io;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

#[cfg(unix)]
use crate::error::Error;
use crate::hub::config::HubConfig;
use crate::hub::conn::{Conn, Slot, Stage};
use crate::hub::handle::{Adopted, Command};
use crate::hub::handler::Handler;
#[cfg(unix)]
use crate::hub::poller::{LISTENER, Polled, Poller};
use crate::hub::slots::{Key, Slots};
use crate::hub::timers::Timers;
use crate::hub::transport::Transport;
use crate::hub::turn::{Schedule, Turn};
use crate::hub::wake::ConnWaker;
use crate::hub::ws::Ws;
use crate::meter::{self, Refused};
use crate::proto::Role;
use crate::proto::conn::{Connection, later};

/// Connections accepted (or taken from those handed over) per turn.
pub(crate) const ACCEPTS_PER_TURN: usize = 64;
/// How long accepting pauses after an error (out of file descriptors).
pub(crate) const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// Where an engine's connections come from, and how it learns that its
/// TCP sockets are ready.
#[derive(Debug)]
pub(crate) struct Acceptor {
    pub(crate) listener: Option<Listener>,
    /// Accepting failed (out of file descriptors): paused until then.
    pub(crate) paused_until: Option<Instant>,
    /// Connections handed to this engine (see `ACCEPT_QUEUE`).
    pub(crate) handed_over: Option<mpsc::Receiver<Command>>,
    /// The engine's own poller ([`Readiness::Owned`](crate::hub::Readiness)),
    /// made with the first TCP socket (it needs the runtime's reactor).
    #[cfg(unix)]
    pub(crate) poller: Option<Poller>,
    /// A poller is wanted and not known to be out of reach.
    #[cfg_attr(not(unix), allow(dead_code))]
    pub(crate) wants_poller: bool,
    /// The hub is shutting down: no connection is taken any more.
    stopped: bool,
}

impl Acceptor {
    pub(crate) fn new(handed_over: mpsc::Receiver<Command>, wants_poller: bool) -> Self {
        Acceptor {
            listener: None,
            paused_until: None,
            handed_over: Some(handed_over),
            #[cfg(unix)]
            poller: None,
            wants_poller,
            stopped: false,
        }
    }
}

/// What an engine accepts connections from.
#[derive(Debug)]
pub(crate) enum Listener {
    Tokio(TcpListener),
    /// Registered with the engine's poller: `ready` from its event until
    /// an accept finds no connection waiting.
    #[cfg(unix)]
    Owned {
        listener: mio::net::TcpListener,
        ready: bool,
    },
}

impl Acceptor {
    /// Takes no more connections: the hub is shutting down.
    pub(crate) fn stop(&mut self) {
        self.stopped = true;
        self.listener = None;
    }

    /// Takes a connection upgraded elsewhere: open from the start. Its key,
    /// for the engine to settle.
    pub(crate) fn adopt<H: Handler>(
        &mut self,
        adopted: Adopted<H::Data>,
        slots: &mut Slots<Box<Slot<H::Data>>>,
        turn: &mut Turn,
        timers: &mut Timers,
        config: &HubConfig,
        handler: &mut H,
    ) -> Option<Key> {
        let io = Transport::Other(adopted.io, adopted.addresses);
        let key = self.admit(io, slots, turn, timers, config)?;
        let slot = slots.get_mut(key)?;
        // Upgraded already: an open connection's core (its keepalive, no
        // handshake deadline), as after the hub's own upgrade. The
        // handshake's timer entry left behind misses it (settling keeps
        // the connection's own).
        *slot.conn.core_mut() = Connection::new(Role::Server, config.config.timers(), turn.now());
        slot.stage = Stage::Open;
        slot.timer_at = None;
        // Accepted as any connection the hub upgrades itself, as a Stream
        // made over an upgraded transport is.
        turn.meter.opened(true);
        let data = slot.data.insert(adopted.data);
        handler.open(&mut Ws {
            io: &slot.io,
            conn: &mut slot.conn,
            data,
            turn,
        });
        Some(key)
    }

    /// Takes a new connection into `slots`; its key, unless the hub is
    /// shutting down.
    pub(crate) fn admit<T>(
        &mut self,
        io: Transport,
        slots: &mut Slots<Box<Slot<T>>>,
        turn: &mut Turn,
        timers: &mut Timers,
        config: &HubConfig,
    ) -> Option<Key> {
        if self.stopped {
            return None;
        }
        let now = turn.now();
        let deadline = config.config.handshake.timeout.map(|t| later(now, t));
        #[cfg(unix)]
        let poller = &self.poller;
        let ready = &turn.schedule.ready;
        // `None` when every slot an id can name is taken (or retired), or
        // the kernel has no room for the socket: refused, the transport
        // dropped.
        let inserted = slots.insert_with(|key| {
            let mut io = io;
            let waker = match &mut io {
                #[cfg(unix)]
                Transport::Polled(p) => {
                    let registered = poller
                        .as_ref()
                        .map(|poller| poller.register(p.source(), mio::Token(key.slot as usize)));
                    if !matches!(registered, Some(Ok(()))) {
                        return None;
                    }
                    None
                }
                _ => Some(ConnWaker::new(key, ready.clone())),
            };
            Some(Box::new(Slot {
                io,
                waker,
                queued: false,
                receiver: None,
                idle_inflater: None,
                #[cfg(feature = "topics")]
                held: None,
                timer_at: deadline,
                #[cfg(feature = "metrics")]
                admitted: std::time::Instant::now(),
                stage: Stage::Handshake,
                data: None,
                // The core keeps the handshake's deadline, and the
                // answer's if the request is refused.
                conn: Conn::new(key, Connection::handshaking(Role::Server, deadline)),
            }))
        });
        let Some((key, slot)) = inserted else {
            // No slot, or the kernel had no room to watch the socket.
            meter::refused(Refused::Overloaded);
            return None;
        };
        // Served at once: the request may be there already, and the first
        // read registers the waker.
        slot.requeue(&mut turn.schedule);
        if let Some(at) = deadline {
            timers.push(at, key);
        }
        Some(key)
    }

    /// A TCP connection as this engine reads it: on its poller if it has
    /// one (taken off Tokio's reactor), else as it is. `None` if the socket
    /// could not be taken off Tokio's reactor (it is gone then, as a
    /// connection refused past the slot limit).
    pub(crate) fn tcp_transport(
        &mut self,
        tcp: TcpStream,
        schedule: &mut Schedule,
    ) -> Option<Transport> {
        #[cfg(unix)]
        if self.ensure_poller(schedule) {
            let std = tcp.into_std().ok()?;
            return Some(Transport::Polled(Polled::new(
                mio::net::TcpStream::from_std(std),
            )));
        }
        #[cfg(not(unix))]
        let _ = schedule;
        Some(Transport::Tcp(tcp))
    }

    /// Makes the engine's poller when first needed, if it is to have one:
    /// with the first TCP socket, so on a runtime that has I/O (a Tokio
    /// socket needs it too). Whether it has one.
    #[cfg(unix)]
    fn ensure_poller(&mut self, schedule: &mut Schedule) -> bool {
        if self.wants_poller && self.poller.is_none() {
            match Poller::new() {
                Ok(p) => {
                    self.poller = Some(p);
                    // Its first harvest, next turn, registers the task
                    // with the reactor for its events.
                    schedule.again_now = true;
                }
                // Out of descriptors: the sockets register with Tokio one
                // by one instead.
                Err(_) => self.wants_poller = false,
            }
        }
        self.poller.is_some()
    }

    /// Moves a Tokio listener onto the engine's poller.
    #[cfg(unix)]
    fn own_listener(&mut self, schedule: &mut Schedule) {
        if !matches!(self.listener, Some(Listener::Tokio(_))) || !self.ensure_poller(schedule) {
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

    /// Accepts what the listener has, a bounded number per turn, into
    /// `slots`.
    pub(crate) fn poll_accept<T>(
        &mut self,
        cx: &mut Context<'_>,
        slots: &mut Slots<Box<Slot<T>>>,
        turn: &mut Turn,
        timers: &mut Timers,
        config: &HubConfig,
    ) {
        if let Some(until) = self.paused_until {
            if turn.now() < until {
                return;
            }
            self.paused_until = None;
        }
        #[cfg(unix)]
        self.own_listener(&mut turn.schedule);
        for _ in 0..ACCEPTS_PER_TURN {
            let accepted = match &mut self.listener {
                None => return,
                Some(Listener::Tokio(listener)) => match listener.poll_accept(cx) {
                    Poll::Ready(Ok((tcp, _))) => {
                        let _ = tcp.set_nodelay(true);
                        match self.tcp_transport(tcp, &mut turn.schedule) {
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
                    self.admit(io, slots, turn, timers, config);
                }
                Err(_) => {
                    self.paused_until = Some(later(turn.now(), ACCEPT_PAUSE));
                    return;
                }
            }
        }
        // More may wait: come back after serving the others.
        cx.waker().wake_by_ref();
    }

    /// Reads the poller's events: each connection named is queued in
    /// `again`, to be served this turn, and the listener accepts again.
    /// Should the poller fail, the connections on it, each given the
    /// error, for the engine to end.
    #[cfg(unix)]
    pub(crate) fn harvest<T>(
        &mut self,
        cx: &mut Context<'_>,
        slots: &mut Slots<Box<Slot<T>>>,
        again: &mut Vec<Key>,
    ) -> Result<(), Vec<Key>> {
        let Some(poller) = &mut self.poller else {
            return Ok(());
        };
        let listener = &mut self.listener;
        let harvested = poller.harvest(cx, |token, ready| {
            if token == LISTENER {
                if let Some(Listener::Owned { ready, .. }) = listener {
                    *ready = true;
                }
                return;
            }
            let Some((key, s)) = slots.at_mut(token.0 as u32) else {
                return;
            };
            if let Transport::Polled(p) = &mut s.io {
                p.ready(ready);
            }
            if !s.queued {
                s.queued = true;
                again.push(key);
            }
        });
        let Err(e) = harvested else {
            return Ok(());
        };
        // The poller itself failed (never seen): no socket on it can be
        // told apart from an idle one any more. Its connections end with
        // the error, and the engine goes on with Tokio's readiness for
        // what comes next.
        self.poller = None;
        self.wants_poller = false;
        if matches!(self.listener, Some(Listener::Owned { .. })) {
            self.listener = None;
        }
        let mut lost: Vec<Key> = slots.keys().collect();
        lost.retain(|&key| {
            let Some(s) = slots.get_mut(key) else {
                return false;
            };
            if !matches!(s.io, Transport::Polled(_)) {
                return false;
            }
            s.conn
                .set_error(Error::Io(io::Error::new(e.kind(), e.to_string())));
            true
        });
        Err(lost)
    }
}
