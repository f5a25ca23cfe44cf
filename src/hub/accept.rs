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
use crate::hub::conn::{Conn, Slot, Stage};
use crate::hub::engine::Engine;
use crate::hub::handle::{Adopted, Command};
use crate::hub::handler::Handler;
#[cfg(unix)]
use crate::hub::poller::{LISTENER, Polled, Poller};
use crate::hub::slots::Key;
use crate::hub::transport::Transport;
use crate::hub::wake::ConnWaker;
use crate::hub::ws::Ws;
use crate::proto::Role;
use crate::proto::conn::{Connection, later};

/// Connections accepted per turn.
const ACCEPTS_PER_TURN: usize = 64;
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

impl<H: Handler> Engine<H> {
    /// Takes a connection upgraded elsewhere: open from the start.
    pub(crate) fn adopt(&mut self, adopted: Adopted<H::Data>) {
        let Some(key) = self.admit(Transport::Other(adopted.io, adopted.addresses)) else {
            return;
        };
        let Some(slot) = self.slots.get_mut(key) else {
            return;
        };
        slot.stage = Stage::Open;
        slot.timer_at = None;
        let data = slot.data.insert(adopted.data);
        self.handler.open(&mut Ws {
            io: &slot.io,
            conn: &mut slot.conn,
            data,
            turn: &mut self.turn,
        });
        self.settle(key);
    }

    /// Takes a new connection; its key, unless the hub is shutting down.
    pub(crate) fn admit(&mut self, io: Transport) -> Option<Key> {
        if self.shutdown.is_some() {
            return None;
        }
        let now = self.turn.now();
        let deadline = self.config.config.handshake.timeout.map(|t| later(now, t));
        #[cfg(unix)]
        let poller = &self.acceptor.poller;
        let ready = &self.turn.schedule.ready;
        // `None` when every slot an id can name is taken (or retired), or
        // the kernel has no room for the socket: refused, the transport
        // dropped.
        let (key, slot) = self.slots.insert_with(|key| {
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
                timer_at: deadline,
                stage: Stage::Handshake,
                data: None,
                // The core keeps the handshake's deadline, and the
                // answer's if the request is refused.
                conn: Conn::new(key, Connection::handshaking(Role::Server, deadline)),
            }))
        })?;
        // Served at once: the request may be there already, and the first
        // read registers the waker.
        slot.requeue(&mut self.turn.schedule);
        if let Some(at) = deadline {
            self.timers.push(at, key);
        }
        Some(key)
    }

    /// A TCP connection as this engine reads it: on its poller if it has
    /// one (taken off Tokio's reactor), else as it is. `None` if the socket
    /// could not be taken off Tokio's reactor (it is gone then, as a
    /// connection refused past the slot limit).
    pub(crate) fn tcp_transport(&mut self, tcp: TcpStream) -> Option<Transport> {
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
        if self.acceptor.wants_poller && self.acceptor.poller.is_none() {
            match Poller::new() {
                Ok(p) => {
                    self.acceptor.poller = Some(p);
                    // Its first harvest, next turn, registers the task
                    // with the reactor for its events.
                    self.turn.schedule.again_now = true;
                }
                // Out of descriptors: the sockets register with Tokio one
                // by one instead.
                Err(_) => self.acceptor.wants_poller = false,
            }
        }
        self.acceptor.poller.is_some()
    }

    /// Moves a Tokio listener onto the engine's poller.
    #[cfg(unix)]
    fn own_listener(&mut self) {
        if !matches!(self.acceptor.listener, Some(Listener::Tokio(_))) || !self.ensure_poller() {
            return;
        }
        let Some(poller) = &self.acceptor.poller else {
            return;
        };
        let Some(Listener::Tokio(l)) = self.acceptor.listener.take() else {
            return;
        };
        let std = match l.into_std() {
            Ok(std) => std,
            Err(_) => return,
        };
        let mut listener = mio::net::TcpListener::from_std(std);
        self.acceptor.listener = match poller.register_listener(&mut listener) {
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

    pub(crate) fn poll_accept(&mut self, cx: &mut Context<'_>) {
        if let Some(until) = self.acceptor.paused_until {
            if self.turn.now() < until {
                return;
            }
            self.acceptor.paused_until = None;
        }
        #[cfg(unix)]
        self.own_listener();
        for _ in 0..ACCEPTS_PER_TURN {
            let accepted = match &mut self.acceptor.listener {
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
                    self.acceptor.paused_until = Some(later(self.turn.now(), ACCEPT_PAUSE));
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
    pub(crate) fn harvest(&mut self, cx: &mut Context<'_>) {
        let Some(poller) = &mut self.acceptor.poller else {
            return;
        };
        let listener = &mut self.acceptor.listener;
        let slots = &mut self.slots;
        let again = &mut self.turn.schedule.again;
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
        if let Err(e) = harvested {
            // The poller itself failed (never seen): no socket on it can
            // be told apart from an idle one any more. Its connections end
            // with the error, and the engine goes on with Tokio's
            // readiness for what comes next.
            self.acceptor.poller = None;
            self.acceptor.wants_poller = false;
            if matches!(self.acceptor.listener, Some(Listener::Owned { .. })) {
                self.acceptor.listener = None;
            }
            let keys: Vec<Key> = self.slots.keys().collect();
            for key in keys {
                if let Some(s) = self.slots.get_mut(key) {
                    if matches!(s.io, Transport::Polled(_)) {
                        s.conn
                            .set_error(Error::Io(io::Error::new(e.kind(), e.to_string())));
                        self.end(key);
                    }
                }
            }
        }
    }

    /// Takes the connections handed to this engine.
    pub(crate) fn poll_handed_over(&mut self, cx: &mut Context<'_>) {
        for _ in 0..ACCEPTS_PER_TURN {
            let Some(rx) = &mut self.acceptor.handed_over else {
                return;
            };
            match rx.poll_recv(cx) {
                Poll::Ready(Some(cmd)) => self.command(cmd),
                Poll::Ready(None) => {
                    self.acceptor.handed_over = None;
                    return;
                }
                Poll::Pending => return,
            }
        }
        cx.waker().wake_by_ref();
    }
}
