//! What handlers and handles see of connections: ids, messages, send
//! outcomes, how a connection ended.

use std::net::SocketAddr;

use crate::error::Error;
use crate::proto::close::CloseFrame;

/// What became of a message sent on a hub connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendStatus {
    /// Queued, with less than `max_backpressure` waiting.
    Sent,
    /// Queued, but now more than `max_backpressure` waits: further sends
    /// are refused until [`Handler::drain`](crate::hub::Handler::drain).
    Backpressure,
    /// Not sent: too much waited already ([`BackpressurePolicy::Drop`](crate::hub::BackpressurePolicy::Drop)), or
    /// the connection was closed for it ([`BackpressurePolicy::Close`](crate::hub::BackpressurePolicy::Close)).
    Dropped,
    /// Not sent: the connection is closing or closed.
    Closed,
}

/// A received message, borrowed from the hub's read buffer for the length
/// of a [`Handler::message`](crate::hub::Handler::message) call. Copy what you keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HubMessage<'a> {
    /// A text message, valid UTF-8.
    Text(&'a str),
    /// A binary message.
    Binary(&'a [u8]),
}

impl<'a> HubMessage<'a> {
    /// The payload's bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        match *self {
            HubMessage::Text(t) => t.as_bytes(),
            HubMessage::Binary(b) => b,
        }
    }

    /// Whether it is a text message.
    pub fn is_text(&self) -> bool {
        matches!(self, HubMessage::Text(_))
    }
}

/// Every HTTP answer a hub writes but the `101`: a refusal from
/// [`Handler::upgrade`](crate::hub::Handler::upgrade), a page from
/// [`Handler::request`](crate::hub::Handler::request). The body is sent
/// as it is, with a `Content-Length`.
pub type HttpResponse = http::Response<Vec<u8>>;

/// An answer with `status` and `body` (as `text/plain; charset=utf-8`
/// when the body is text), for [`Handler::upgrade`](crate::hub::Handler::upgrade)'s
/// refusals and [`Handler::request`](crate::hub::Handler::request)'s pages.
///
/// ```
/// use wavesock::hub::respond;
/// use wavesock::http::StatusCode;
///
/// let refusal = respond(StatusCode::FORBIDDEN, "banned");
/// assert_eq!(refusal.status(), 403);
/// assert_eq!(refusal.body(), b"banned");
/// ```
pub fn respond(status: http::StatusCode, body: impl Into<Vec<u8>>) -> HttpResponse {
    let body = body.into();
    let mut response = http::Response::new(Vec::new());
    *response.status_mut() = status;
    if !body.is_empty() {
        let kind = if std::str::from_utf8(&body).is_ok() {
            "text/plain; charset=utf-8"
        } else {
            "application/octet-stream"
        };
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(kind),
        );
    }
    *response.body_mut() = body;
    response
}

/// The two ends of a hub connection, as far as its transport tells: for
/// TCP, the socket's own addresses; for a transport handed over
/// ([`HubHandle::accept_from`](crate::hub::HubHandle::accept_from),
/// [`Adopter::adopt_from`](crate::hub::Adopter::adopt_from)), what its
/// giver said (axum's `ConnectInfo`, a TLS acceptor's TCP socket); `None`
/// where there is no IP address (a Unix socket) or none was given.
///
/// [`Handler::upgrade`](crate::hub::Handler::upgrade) and
/// [`Handler::request`](crate::hub::Handler::request) find it in the
/// request's extensions, as axum's handlers find `ConnectInfo`;
/// [`Ws::remote_addr`](crate::hub::Ws::remote_addr) gives it later.
///
/// ```
/// use wavesock::hub::Addresses;
/// use wavesock::http::Request;
///
/// fn client_ip(request: &Request<()>) -> Option<std::net::IpAddr> {
///     let addrs = request.extensions().get::<Addresses>()?;
///     Some(addrs.remote?.ip())
/// }
/// # assert_eq!(client_ip(&Request::new(())), None);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Addresses {
    /// The peer's address.
    pub remote: Option<SocketAddr>,
    /// This end's address.
    pub local: Option<SocketAddr>,
}

impl Addresses {
    /// Addresses with the peer's `remote` and this end's `local`.
    pub fn new(remote: Option<SocketAddr>, local: Option<SocketAddr>) -> Self {
        Addresses { remote, local }
    }
}

/// Names a connection of a hub, for [`HubHandle`](crate::hub::HubHandle):
/// the hub, the engine serving it, its slot in the engine's table, and the
/// slot's generation.
///
/// Never reused: an id of a connection that is gone never names another
/// one (a slot is retired once its generation has counted to 65 535), and
/// an id of another hub's connection names none of this one's. Hubs are
/// numbered per process, 0 to 65 535, and the numbering wraps after
/// 65 536 hubs have been made: a hub made after that may share a number
/// with an old one, which should be long gone by then.
///
/// Its two stable forms, for keeping an id outside the process (a
/// database row, a URL, a message to another service):
///
/// - **Text**: `hub.engine.slot.generation` in decimal, such as `0.1.42.3`
///   ([`Display`](std::fmt::Display) writes it, [`FromStr`](std::str::FromStr) reads it back);
/// - **`u64`**: the hub in bits 48–63, the engine in 40–47, the slot in
///   16–39 and the generation in 0–15 ([`as_u64`](Self::as_u64),
///   [`from_u64`](Self::from_u64)).
///
/// Both name the same connection on every version of this crate that
/// has them.
///
/// ```
/// use wavesock::hub::ConnId;
///
/// let id: ConnId = "0.1.42.3".parse()?;
/// assert_eq!(id.engine(), 1);
/// assert_eq!(id.to_string(), "0.1.42.3");
/// assert_eq!(ConnId::from_u64(id.as_u64()), id);
/// assert_eq!(id.as_u64(), (1 << 40) | (42 << 16) | 3);
/// # Ok::<(), wavesock::hub::ParseConnIdError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    pub(crate) hub: u32,
    pub(crate) engine: u32,
    pub(crate) slot: u32,
    pub(crate) generation: u32,
}

/// The widths of a [`ConnId`]'s parts in its `u64` form.
const HUB_BITS: u32 = 16;
const ENGINE_BITS: u32 = 8;
const SLOT_BITS: u32 = 24;
const GENERATION_BITS: u32 = 16;

/// Engines one hub may have: each has a number in its connections' ids.
pub(crate) const MAX_ENGINES: usize = 1 << ENGINE_BITS;
/// Slots one engine may have: a connection past them is refused.
pub(crate) const MAX_SLOTS: usize = 1 << SLOT_BITS;
/// The last generation of a slot: after it, the slot is retired.
pub(crate) const LAST_GENERATION: u32 = (1 << GENERATION_BITS) - 1;
/// Hub numbers wrap at this.
pub(crate) const HUB_MASK: u32 = (1 << HUB_BITS) - 1;

fn mask(bits: u32) -> u64 {
    (1 << bits) - 1
}

impl ConnId {
    /// The engine (task) serving the connection.
    pub fn engine(&self) -> usize {
        self.engine as usize
    }

    /// The `u64` form: see the [type's docs](Self).
    pub fn as_u64(&self) -> u64 {
        (u64::from(self.hub) << (ENGINE_BITS + SLOT_BITS + GENERATION_BITS))
            | (u64::from(self.engine) << (SLOT_BITS + GENERATION_BITS))
            | (u64::from(self.slot) << GENERATION_BITS)
            | u64::from(self.generation)
    }

    /// The id whose [`as_u64`](Self::as_u64) is `id`. Every `u64` reads
    /// as some id; one that no hub gave out names no connection, and a
    /// [`HubHandle`](crate::hub::HubHandle) call with it does nothing.
    pub fn from_u64(id: u64) -> ConnId {
        ConnId {
            hub: ((id >> (ENGINE_BITS + SLOT_BITS + GENERATION_BITS)) & mask(HUB_BITS)) as u32,
            engine: ((id >> (SLOT_BITS + GENERATION_BITS)) & mask(ENGINE_BITS)) as u32,
            slot: ((id >> GENERATION_BITS) & mask(SLOT_BITS)) as u32,
            generation: (id & mask(GENERATION_BITS)) as u32,
        }
    }
}

impl From<ConnId> for u64 {
    fn from(id: ConnId) -> u64 {
        id.as_u64()
    }
}

impl From<u64> for ConnId {
    fn from(id: u64) -> ConnId {
        ConnId::from_u64(id)
    }
}

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}.{}.{}.{}",
            self.hub, self.engine, self.slot, self.generation
        )
    }
}

/// Why a text did not read as a [`ConnId`]: not four numbers separated by
/// dots, or a number too large for its part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a connection id (hub.engine.slot.generation): {0:?}")]
pub struct ParseConnIdError(String);

impl std::str::FromStr for ConnId {
    type Err = ParseConnIdError;

    fn from_str(s: &str) -> Result<ConnId, ParseConnIdError> {
        let err = || ParseConnIdError(s.chars().take(64).collect());
        let mut parts = s.split('.');
        let mut part = |bits: u32| -> Result<u32, ParseConnIdError> {
            let p = parts.next().ok_or_else(err)?;
            // Digits only: `u32::from_str` would take a sign.
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err());
            }
            match p.parse::<u64>() {
                Ok(n) if n <= mask(bits) => Ok(n as u32),
                _ => Err(err()),
            }
        };
        let id = ConnId {
            hub: part(HUB_BITS)?,
            engine: part(ENGINE_BITS)?,
            slot: part(SLOT_BITS)?,
            generation: part(GENERATION_BITS)?,
        };
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(id)
    }
}

/// How a connection ended, for [`Handler::close`](crate::hub::Handler::close).
#[derive(Debug)]
#[non_exhaustive]
pub struct Closed {
    /// The connection.
    pub id: ConnId,
    /// The peer's close frame, if one came (its code and reason).
    pub frame: Option<CloseFrame>,
    /// Why it ended otherwise: a protocol violation of the peer's (the
    /// close code sent for it is [`Error::close_code`]), a timeout, the
    /// transport failing or ending without a closing handshake, or
    /// [`Error::Backpressure`]. `None` after a clean closing handshake.
    pub error: Option<Error>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(hub: u32, engine: u32, slot: u32, generation: u32) -> ConnId {
        ConnId {
            hub,
            engine,
            slot,
            generation,
        }
    }

    #[test]
    fn ids_round_trip_through_text_and_u64_at_every_part_s_limits() {
        let ids = [
            id(0, 0, 0, 0),
            id(1, 2, 3, 4),
            id(HUB_MASK, 0, 0, 0),
            id(0, MAX_ENGINES as u32 - 1, 0, 0),
            id(0, 0, MAX_SLOTS as u32 - 1, 0),
            id(0, 0, 0, LAST_GENERATION),
            id(
                HUB_MASK,
                MAX_ENGINES as u32 - 1,
                MAX_SLOTS as u32 - 1,
                LAST_GENERATION,
            ),
        ];
        for id in ids {
            assert_eq!(id.to_string().parse::<ConnId>(), Ok(id), "{id}");
            assert_eq!(ConnId::from_u64(id.as_u64()), id, "{id}");
            assert_eq!(ConnId::from(u64::from(id)), id, "{id}");
        }
        assert_eq!(u64::MAX, ids[6].as_u64());
    }

    #[test]
    fn the_u64_form_puts_each_part_in_its_documented_bits() {
        assert_eq!(id(5, 0, 0, 0).as_u64(), 5 << 48);
        assert_eq!(id(0, 7, 0, 0).as_u64(), 7 << 40);
        assert_eq!(id(0, 0, 9, 0).as_u64(), 9 << 16);
        assert_eq!(id(0, 0, 0, 11).as_u64(), 11);
        assert_eq!(id(1, 2, 3, 4).to_string(), "1.2.3.4");
    }

    #[test]
    fn text_that_is_not_four_numbers_in_range_is_refused() {
        for bad in [
            "",
            "1.2.3",
            "1.2.3.4.5",
            "1.2..4",
            "a.2.3.4",
            "+1.2.3.4",
            "-1.2.3.4",
            " 1.2.3.4",
            "65536.0.0.0",
            "0.256.0.0",
            "0.0.16777216.0",
            "0.0.0.65536",
            "99999999999999999999.0.0.0",
        ] {
            assert!(bad.parse::<ConnId>().is_err(), "{bad:?}");
        }
        assert!("65535.255.16777215.65535".parse::<ConnId>().is_ok());
    }
}
