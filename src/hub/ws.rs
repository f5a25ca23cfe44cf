//! [`Ws`]: a hub connection as a handler sees it during a call.

#[cfg(feature = "topics")]
use bytes::Bytes;

use crate::error::Result;
use crate::hub::conn::Conn;
use crate::hub::event::{ConnId, HubMessage, SendStatus};
use crate::hub::handle::HubHandle;
#[cfg(feature = "topics")]
use crate::hub::subs::token;
use crate::hub::transport::Transport;
use crate::hub::turn::Turn;
use crate::proto::close::CloseCode;
use crate::proto::header::OpCode;
use crate::proto::message::{Message, PreparedMessage};
#[cfg(feature = "topics")]
use crate::topics::{Published, Topics};

/// A hub connection as a [`Handler`](crate::hub::Handler) sees it during a
/// call: its id and data, and sending to it. What is sent is corked and
/// written at the end of the engine's turn.
#[derive(Debug)]
pub struct Ws<'a, T> {
    pub(crate) io: &'a Transport,
    pub(crate) conn: &'a mut Conn,
    pub(crate) data: &'a mut T,
    pub(crate) turn: &'a mut Turn,
}

impl<T> Ws<'_, T> {
    /// The connection's id, for [`HubHandle`](crate::hub::HubHandle).
    pub fn id(&self) -> ConnId {
        self.turn.id(self.conn.key)
    }

    /// The peer's address: for TCP the socket's (`None` once the socket
    /// is gone), for a transport handed over what its giver said (see
    /// [`Addresses`](crate::hub::Addresses)).
    ///
    /// ```
    /// use wavesock::hub::{HubMessage, Ws};
    ///
    /// fn log(ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
    ///     match ws.remote_addr() {
    ///         Some(peer) => println!("{} bytes from {peer}", msg.as_bytes().len()),
    ///         None => println!("{} bytes from {}", msg.as_bytes().len(), ws.id()),
    ///     }
    /// }
    /// ```
    pub fn remote_addr(&self) -> Option<std::net::SocketAddr> {
        self.io.remote_addr()
    }

    /// This end's address, as [`remote_addr`](Self::remote_addr).
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.io.local_addr()
    }

    /// The hub's handle: to reach this connection (or others) later, from
    /// a task the handler spawns.
    pub fn handle(&self) -> &HubHandle {
        &self.turn.ids.handle
    }

    /// The connection's data.
    pub fn data(&self) -> &T {
        self.data
    }

    /// The connection's data, to change.
    pub fn data_mut(&mut self) -> &mut T {
        self.data
    }

    /// Sends a text message from a borrowed string.
    pub fn send_text(&mut self, text: &str) -> Result<SendStatus> {
        self.conn
            .send_data(self.turn, OpCode::Text, text.as_bytes())
    }

    /// Sends a binary message from a borrowed slice.
    pub fn send_binary(&mut self, data: &[u8]) -> Result<SendStatus> {
        self.conn.send_data(self.turn, OpCode::Binary, data)
    }

    /// Sends a received message back as it is (an echo), or any other
    /// borrowed message.
    pub fn send_borrowed(&mut self, msg: HubMessage<'_>) -> Result<SendStatus> {
        match msg {
            HubMessage::Text(t) => self.send_text(t),
            HubMessage::Binary(b) => self.send_binary(b),
        }
    }

    /// Sends any message: data, a ping or pong, a close frame (as
    /// [`close`](Self::close)), or a fragment ([`Message::Frame`]).
    pub fn send(&mut self, msg: &Message) -> Result<SendStatus> {
        match msg {
            Message::Close(frame) => self
                .conn
                .close_with(self.turn, frame.clone())
                .map(|()| SendStatus::Sent),
            _ => self.conn.send_message(self.turn, msg),
        }
    }

    /// Sends a message prepared once for many connections.
    pub fn send_prepared(&mut self, msg: &PreparedMessage) -> Result<SendStatus> {
        self.conn.send_prepared(self.turn, msg)
    }

    /// Starts the closing handshake with `code` and `reason` (cut to 123
    /// bytes); the connection ends when the peer answers or the close
    /// timeout passes. Closing twice does nothing.
    ///
    /// From this call on, the handler hears no more `message`, `ping`,
    /// `pong` or `drain` for the connection (the rest of what the same
    /// read brought is dropped), and sends to it return
    /// [`SendStatus::Closed`]. What was sent before the call, and what was
    /// published to its topics before the end of the engine's turn, is
    /// written before the close frame, which goes out at the end of the
    /// turn (up to the turn's cap of publishes: past it, the close does
    /// not wait for the rest, which the connection then does not get).
    pub fn close(&mut self, code: CloseCode, reason: &str) -> Result<()> {
        self.conn.close(self.turn, code, reason)
    }

    /// Bytes waiting to be written to this peer.
    pub fn buffered_amount(&self) -> usize {
        self.conn.buffered()
    }

    /// Whether the connection is closing: [`close`](Self::close) was
    /// called (here or through a handle), or a close frame came in; data
    /// can no longer be sent.
    pub fn is_closing(&self) -> bool {
        self.conn.is_closing()
    }
}

// Topics: the engine's subscriptions are part of its turn (`Turn::subs`).
#[cfg(feature = "topics")]
impl<T> Ws<'_, T> {
    /// Subscribes the connection to `topic`: what is published to it from
    /// now on is sent to this peer, until it unsubscribes or is gone. False
    /// if it was subscribed already.
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub fn subscribe(&mut self, topic: &str) -> bool {
        self.turn.subs.subscribe(self.conn.key, topic)
    }

    /// Unsubscribes the connection from `topic`; false if it was not
    /// subscribed.
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub fn unsubscribe(&mut self, topic: &str) -> bool {
        self.turn.subs.unsubscribe(self.conn.key, topic)
    }

    /// Whether the connection subscribes to `topic`.
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub fn is_subscribed(&self, topic: &str) -> bool {
        self.turn.subs.is_subscribed(self.conn.key, topic)
    }

    /// The topics the connection subscribes to.
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub fn topics(&self) -> impl Iterator<Item = &str> {
        self.turn.subs.of(self.conn.key).iter().map(|t| &**t)
    }

    /// The registry the hub's topics live in, to publish to everyone
    /// (this connection included) or look around.
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub fn registry(&self) -> &Topics {
        &self.turn.subs.topics
    }

    /// Publishes a message to `topic`: to every subscriber but this
    /// connection (as uWebSockets' `ws.publish`; publish through
    /// [`registry`](Self::registry) to include it), on every hub of the
    /// registry and, with a link, every linked server. Encoded once.
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub fn publish(&mut self, topic: &str, msg: HubMessage<'_>) -> Published {
        let msg = match msg {
            HubMessage::Text(t) => Message::text(t.to_owned()),
            HubMessage::Binary(b) => Message::binary(Bytes::copy_from_slice(b)),
        };
        let prepared = PreparedMessage::new(&msg).expect("data messages always prepare");
        self.publish_prepared(topic, &prepared)
    }

    /// Publishes a prepared message to `topic`, as [`publish`](Self::publish).
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub fn publish_prepared(&mut self, topic: &str, msg: &PreparedMessage) -> Published {
        let subs = &self.turn.subs;
        let except = subs
            .is_subscribed(self.conn.key, topic)
            .then(|| (subs.mailbox.id(), token(self.conn.key)));
        subs.topics.publish_except(topic, msg, except)
    }
}
