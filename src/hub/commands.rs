//! What other tasks ask of an engine through a [`HubHandle`](crate::hub::HubHandle):
//! sends, closes and subscriptions for its connections, connections to
//! take, shutting down. Done here as far as the parts they touch go; what
//! is left to the engine (settling the connection, shutting down) is
//! returned to it.

use std::task::{Context, Poll};

use tokio::sync::mpsc;

use crate::hub::accept::Acceptor;
use crate::hub::config::HubConfig;
use crate::hub::conn::{Conn, Slot, Stage};
use crate::hub::event::ConnId;
use crate::hub::handle::{Adopted, Command};
use crate::hub::handler::Handler;
use crate::hub::slots::{Key, Slots};
use crate::hub::timers::Timers;
use crate::hub::transport::Transport;
use crate::hub::turn::Turn;

/// Commands taken from handles per turn.
pub(crate) const COMMANDS_PER_TURN: usize = 1024;

/// What a command leaves to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    Done,
    /// Settle the connection the command changed or took in.
    Settle(Key),
    /// Shut down.
    ShutDown,
}

/// The next command waiting in `inbox`, if any. An inbox every sender of
/// which is gone is dropped: nothing more will come.
pub(crate) fn poll_next(
    inbox: &mut Option<mpsc::Receiver<Command>>,
    cx: &mut Context<'_>,
) -> Option<Command> {
    let rx = inbox.as_mut()?;
    match rx.poll_recv(cx) {
        Poll::Ready(Some(cmd)) => Some(cmd),
        Poll::Ready(None) => {
            *inbox = None;
            None
        }
        Poll::Pending => None,
    }
}

/// Does what a handle (or the hub's acceptor) asked.
pub(crate) fn run<H: Handler>(
    cmd: Command,
    acceptor: &mut Acceptor,
    slots: &mut Slots<Box<Slot<H::Data>>>,
    turn: &mut Turn,
    timers: &mut Timers,
    config: &HubConfig,
    handler: &mut H,
) -> Then {
    let key = match cmd {
        Command::Accept(tcp) => {
            let _ = tcp.set_nodelay(true);
            if let Some(io) = acceptor.tcp_transport(tcp, &mut turn.schedule) {
                acceptor.admit(io, slots, turn, timers, config);
            }
            None
        }
        Command::AcceptIo(io, addresses) => {
            acceptor.admit(Transport::Other(io, addresses), slots, turn, timers, config);
            None
        }
        Command::Adopt(adopted) => {
            // Sent by an `Adopter<H::Data>`, made by this hub: the type
            // always matches.
            match adopted.downcast::<Adopted<H::Data>>() {
                Ok(adopted) => acceptor.adopt(*adopted, slots, turn, timers, config, handler),
                Err(_) => None,
            }
        }
        Command::Shutdown => return Then::ShutDown,
        Command::Send(id, msg) => with_conn(slots, turn, id, |c, turn| {
            let _ = c.send_message(turn, &msg);
        }),
        Command::SendPrepared(id, msg) => with_conn(slots, turn, id, |c, turn| {
            let _ = c.send_prepared(turn, &msg);
        }),
        Command::Close(id, code, reason) => with_conn(slots, turn, id, |c, turn| {
            let _ = c.close(turn, code, &reason);
        }),
        #[cfg(feature = "topics")]
        Command::Subscribe(id, topic) => with_conn(slots, turn, id, |c, turn| {
            turn.subs.subscribe(c.key, &topic);
        }),
        #[cfg(feature = "topics")]
        Command::Unsubscribe(id, topic) => with_conn(slots, turn, id, |c, turn| {
            turn.subs.unsubscribe(c.key, &topic);
        }),
    };
    key.map_or(Then::Done, Then::Settle)
}

/// Runs `f` on open connection `id`, if it is this engine's: its key.
fn with_conn<T>(
    slots: &mut Slots<Box<Slot<T>>>,
    turn: &mut Turn,
    id: ConnId,
    f: impl FnOnce(&mut Conn, &mut Turn),
) -> Option<Key> {
    if id.hub != turn.ids.hub || id.engine != turn.ids.engine {
        // Another hub's (or engine's) connection: none of ours.
        return None;
    }
    let key = Key {
        slot: id.slot,
        generation: id.generation,
    };
    let slot = slots.get_mut(key)?;
    if slot.stage != Stage::Open {
        return None;
    }
    f(&mut slot.conn, turn);
    Some(key)
}
