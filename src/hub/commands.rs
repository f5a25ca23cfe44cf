//! What other tasks ask of an engine through a [`HubHandle`](crate::hub::HubHandle)
//! (sends, closes, subscriptions, connections to take), and shutting down.

use std::task::{Context, Poll};

use crate::error::Error;
use crate::hub::conn::{Conn, Stage};
use crate::hub::engine::Engine;
use crate::hub::event::ConnId;
use crate::hub::handle::{Adopted, Command};
use crate::hub::handler::Handler;
use crate::hub::slots::Key;
use crate::hub::transport::Transport;
use crate::hub::turn::Turn;
use crate::proto::close::Leaving;
use crate::proto::conn::{Phase, later};

/// Commands taken from handles per turn.
const COMMANDS_PER_TURN: usize = 1024;

impl<H: Handler> Engine<H> {
    /// Does what a handle (or the hub's acceptor) asked.
    pub(crate) fn command(&mut self, cmd: Command) {
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
            #[cfg(feature = "topics")]
            Command::Subscribe(id, topic) => self.with_conn(id, |c, turn| {
                turn.subs.subscribe(c.key, &topic);
            }),
            #[cfg(feature = "topics")]
            Command::Unsubscribe(id, topic) => self.with_conn(id, |c, turn| {
                turn.subs.unsubscribe(c.key, &topic);
            }),
        }
    }

    /// Runs `f` on open connection `id`, if it is this engine's.
    fn with_conn(&mut self, id: ConnId, f: impl FnOnce(&mut Conn, &mut Turn)) {
        if id.hub != self.turn.ids.hub || id.engine != self.turn.ids.engine {
            // Another hub's (or engine's) connection: none of ours.
            return;
        }
        let key = Key {
            slot: id.slot,
            generation: id.generation,
        };
        let Some(slot) = self.slots.get_mut(key) else {
            return;
        };
        if slot.stage != Stage::Open {
            return;
        }
        f(&mut slot.conn, &mut self.turn);
        self.settle(key);
    }

    /// Closes every open connection with 1001 (going away) and takes no
    /// new ones; the engine ends once they are gone or the shutdown
    /// timeout passes.
    fn start_shutdown(&mut self) {
        if self.shutdown.is_some() {
            return;
        }
        self.shutdown = Some(later(self.turn.now(), self.config.shutdown_timeout));
        self.acceptor.listener = None;
        let keys: Vec<Key> = self.slots.keys().collect();
        for key in keys {
            let Some(s) = self.slots.get_mut(key) else {
                continue;
            };
            match s.stage {
                Stage::Handshake => self.end(key),
                Stage::Open => {
                    let frame = Some(Leaving::ShuttingDown.frame());
                    let _ = s.conn.close_with(&mut self.turn, frame);
                    self.settle(key);
                }
                Stage::Ending | Stage::Lingering => {}
            }
        }
    }

    /// Takes the commands handles queued, a bounded number per turn.
    pub(crate) fn poll_commands(&mut self, cx: &mut Context<'_>) {
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

    /// The shutdown timeout passed: ends the connections left.
    pub(crate) fn end_all(&mut self) {
        let keys: Vec<Key> = self.slots.keys().collect();
        for key in keys {
            if let Some(s) = self.slots.get_mut(key) {
                // Unless it was failing already: that is why it ended.
                if s.conn.core().phase() != Phase::Failing {
                    s.conn.set_error(Error::ShutdownTimeout);
                }
                self.end(key);
            }
        }
    }
}
