//! Messages and raw frames.

use std::fmt;
use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};

use crate::error::Error;

use crate::close::CloseFrame;
use crate::header::{FrameHeader, MAX_HEADER_LEN, OpCode};
use crate::text::Utf8Bytes;

/// A WebSocket message, as received from [`WebSocketStream`](https://docs.rs/wavesock/latest/wavesock/struct.WebSocketStream.html)
/// or given to it to send.
///
/// Text is validated UTF-8 and, like binary data, shares the buffer it was
/// read into: receiving a message copies nothing. The variants are those of
/// tungstenite's `Message`, so a `match` written for it compiles here. A
/// message encoded once for many connections is a [`PreparedMessage`], sent
/// with `send_prepared`; it is never received.
///
/// ```
/// use wavesock_proto::Message;
///
/// let m = Message::text("hello");
/// assert!(m.is_text());
/// assert_eq!(m.to_text()?, "hello");
/// assert_eq!(m.to_string(), "hello");
/// assert_eq!(m.into_data().as_ref(), b"hello");
///
/// let m: Message = vec![0xFF, 0x00].into();
/// assert!(m.is_binary());
/// assert!(m.to_text().is_err());
/// # Ok::<(), wavesock_proto::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A text message.
    Text(Utf8Bytes),
    /// A binary message.
    Binary(Bytes),
    /// A ping. Received pings are answered automatically; you see them too.
    Ping(Bytes),
    /// A pong.
    Pong(Bytes),
    /// A close frame, with its code and reason if it carried one.
    Close(Option<CloseFrame>),
    /// A raw frame, sent as given (masked if this side is a client). Lets you
    /// send a message in fragments of your choosing.
    ///
    /// Received only with [`Config::stream_messages`](https://docs.rs/wavesock/latest/wavesock/struct.Config.html#method.stream_messages),
    /// as a piece of a text or binary message: the first piece of a message
    /// has opcode [`OpCode::Text`] or [`OpCode::Binary`], the others
    /// [`OpCode::Continuation`], and the last has `fin` set. Pieces follow
    /// the bytes as they arrive, not the sender's frames (a frame may come
    /// in several pieces); text is checked as it comes, but a piece may end
    /// inside a code point.
    Frame(Frame),
}

impl Message {
    /// A text message.
    pub fn text(s: impl Into<Utf8Bytes>) -> Message {
        Message::Text(s.into())
    }

    /// A binary message.
    pub fn binary(b: impl Into<Bytes>) -> Message {
        Message::Binary(b.into())
    }

    /// Whether this is a text message.
    pub fn is_text(&self) -> bool {
        matches!(self, Message::Text(_))
    }

    /// Whether this is a binary message.
    pub fn is_binary(&self) -> bool {
        matches!(self, Message::Binary(_))
    }

    /// Whether this is a text or binary message.
    pub fn is_data(&self) -> bool {
        self.is_text() || self.is_binary()
    }

    /// Whether this is a ping.
    pub fn is_ping(&self) -> bool {
        matches!(self, Message::Ping(_))
    }

    /// Whether this is a pong.
    pub fn is_pong(&self) -> bool {
        matches!(self, Message::Pong(_))
    }

    /// Whether this is a close frame.
    pub fn is_close(&self) -> bool {
        matches!(self, Message::Close(_))
    }

    /// A close message's code and reason, if it has them.
    pub fn close_frame(&self) -> Option<&CloseFrame> {
        match self {
            Message::Close(f) => f.as_ref(),
            _ => None,
        }
    }

    /// Whether this is a ping, a pong or a close frame.
    pub fn is_control(&self) -> bool {
        matches!(
            self,
            Message::Ping(_) | Message::Pong(_) | Message::Close(_)
        )
    }

    /// The opcode and FIN bit of the (first) frame this message goes out as.
    pub fn head(&self) -> (OpCode, bool) {
        match self {
            Message::Frame(f) => (f.opcode, f.fin),
            Message::Text(_) => (OpCode::Text, true),
            Message::Binary(_) => (OpCode::Binary, true),
            Message::Ping(_) => (OpCode::Ping, true),
            Message::Pong(_) => (OpCode::Pong, true),
            Message::Close(_) => (OpCode::Close, true),
        }
    }

    /// The text, for a text message.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Message::Text(t) => Some(t.as_str()),
            _ => None,
        }
    }

    /// The payload as text: a text message's text, a close frame's reason,
    /// or any other payload if it is valid UTF-8 ([`Error::InvalidUtf8`]
    /// otherwise).
    pub fn to_text(&self) -> Result<&str, Error> {
        match self {
            Message::Text(t) => Ok(t.as_str()),
            Message::Close(f) => Ok(f.as_ref().map_or("", |f| f.reason.as_str())),
            Message::Binary(b) | Message::Ping(b) | Message::Pong(b) => utf8(b),
            Message::Frame(f) => utf8(&f.payload),
        }
    }

    /// Like [`to_text`](Self::to_text), by value and without copying.
    pub fn into_text(self) -> Result<Utf8Bytes, Error> {
        match self {
            Message::Text(t) => Ok(t),
            Message::Close(f) => Ok(f.map(|f| f.reason).unwrap_or_default()),
            Message::Binary(b) | Message::Ping(b) | Message::Pong(b) => Ok(Utf8Bytes::try_from(b)?),
            Message::Frame(f) => Ok(Utf8Bytes::try_from(f.payload)?),
        }
    }

    /// The data, without copying: the payload of text, binary, ping, pong
    /// and raw frames, and a close frame's reason (as in tungstenite; see
    /// [`into_payload`](Self::into_payload) for the code too).
    pub fn into_data(self) -> Bytes {
        match self {
            Message::Close(f) => f.map(|f| f.reason.into_bytes()).unwrap_or_default(),
            other => other.into_payload(),
        }
    }

    /// The payload as it goes on the wire (unmasked, uncompressed): for a
    /// close frame, the code and reason encoded, else the same as
    /// [`into_data`](Self::into_data).
    pub fn into_payload(self) -> Bytes {
        match self {
            Message::Text(t) => t.into_bytes(),
            Message::Binary(b) | Message::Ping(b) | Message::Pong(b) => b,
            Message::Close(f) => CloseFrame::encode(f.as_ref()).unwrap_or_default(),
            Message::Frame(f) => f.payload,
        }
    }

    /// Length in bytes of [`into_data`](Self::into_data): a close frame
    /// counts its reason only, as in tungstenite.
    pub fn len(&self) -> usize {
        match self {
            Message::Text(t) => t.len(),
            Message::Binary(b) | Message::Ping(b) | Message::Pong(b) => b.len(),
            Message::Close(f) => f.as_ref().map_or(0, |f| f.reason.len()),
            Message::Frame(f) => f.payload.len(),
        }
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn utf8(b: &[u8]) -> Result<&str, Error> {
    Ok(std::str::from_utf8(b)?)
}

/// Text as itself; any other payload as text if it is valid UTF-8, else as
/// `Binary Data<length=N>` (what tungstenite shows).
impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_text() {
            Ok(text) => f.write_str(text),
            Err(_) => write!(f, "Binary Data<length={}>", self.len()),
        }
    }
}

impl From<Utf8Bytes> for Message {
    fn from(t: Utf8Bytes) -> Self {
        Message::Text(t)
    }
}

impl From<&[u8]> for Message {
    fn from(b: &[u8]) -> Self {
        Message::Binary(Bytes::copy_from_slice(b))
    }
}

impl From<String> for Message {
    fn from(s: String) -> Self {
        Message::Text(s.into())
    }
}

impl From<&str> for Message {
    fn from(s: &str) -> Self {
        Message::Text(s.into())
    }
}

impl From<Vec<u8>> for Message {
    fn from(v: Vec<u8>) -> Self {
        Message::Binary(v.into())
    }
}

impl From<Bytes> for Message {
    fn from(b: Bytes) -> Self {
        Message::Binary(b)
    }
}

/// A single frame, for sending messages fragment by fragment, or a piece of
/// a message received with [`Config::stream_messages`](https://docs.rs/wavesock/latest/wavesock/struct.Config.html#method.stream_messages)
/// (see [`Message::Frame`]).
///
/// ```
/// use wavesock_proto::{Frame, Message, OpCode};
///
/// // "Hello" as two fragments.
/// let first = Message::Frame(Frame::new(false, OpCode::Text, "Hel"));
/// let last = Message::Frame(Frame::new(true, OpCode::Continuation, "lo"));
/// # let _ = (first, last);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Last frame of its message.
    pub fin: bool,
    /// The opcode.
    pub opcode: OpCode,
    /// The unmasked payload.
    pub payload: Bytes,
}

impl Frame {
    /// A frame with the given FIN bit, opcode and payload.
    pub fn new(fin: bool, opcode: OpCode, payload: impl Into<Bytes>) -> Frame {
        Frame {
            fin,
            opcode,
            payload: payload.into(),
        }
    }
}

/// A message encoded once as a server frame, to broadcast to many
/// connections.
///
/// Server frames are not masked, so the same encoded bytes serve every
/// server-side connection: sending a prepared message (`send_prepared` or
/// `feed_prepared` on a [`WebSocketStream`](https://docs.rs/wavesock/latest/wavesock/struct.WebSocketStream.html) or a
/// [`WebSocketSender`](https://docs.rs/wavesock/latest/wavesock/struct.WebSocketSender.html)) queues a reference to them,
/// with no encoding and no copy per connection. On a client-side connection
/// it is encoded (and masked, and compressed if negotiated) like any
/// message.
///
/// On server connections that negotiated permessage-deflate, a text or
/// binary message at least as large as the compression threshold is
/// compressed once per window size the connections agreed on (at the level
/// of the first connection that needs it) and that compressed frame is
/// shared the same way. Each such message is compressed on its own, from an
/// empty window: with `server_no_context_takeover` that is what every
/// message is; with context takeover, the connection's own compressor
/// restarts its window after a shared message (its next messages compress
/// a little less well until the window fills again), because the peer's
/// window now holds bytes the connection's compressor did not produce.
///
/// ```
/// use wavesock_proto::{Message, PreparedMessage};
///
/// let news = PreparedMessage::new(&Message::text("breaking news"))?;
/// // for ws in &mut connections { ws.feed_prepared(&news).await?; }
/// assert_eq!(&news.frame()[..2], &[0x81, 13]);
/// # Ok::<(), wavesock_proto::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct PreparedMessage {
    pub(crate) opcode: OpCode,
    pub(crate) payload: Bytes,
    pub(crate) frame: Bytes,
    /// Compressed frames, made the first time a connection needs one; for
    /// data messages only. Clones share them.
    compressed: Option<Arc<Compressed>>,
}

/// A prepared message's compressed frames, one per zlib window size (9–15).
#[derive(Debug, Default)]
struct Compressed([OnceLock<Bytes>; 7]);

impl PartialEq for PreparedMessage {
    fn eq(&self, other: &Self) -> bool {
        // The compressed frames follow from these.
        self.opcode == other.opcode && self.payload == other.payload && self.frame == other.frame
    }
}

impl Eq for PreparedMessage {}

impl PreparedMessage {
    /// Encodes `msg` (text, binary, ping, pong or close) once.
    pub fn new(msg: &Message) -> Result<PreparedMessage, Error> {
        let (opcode, payload) = match msg {
            Message::Text(t) => (OpCode::Text, t.as_bytes().clone()),
            Message::Binary(b) => (OpCode::Binary, b.clone()),
            Message::Ping(b) => (OpCode::Ping, b.clone()),
            Message::Pong(b) => (OpCode::Pong, b.clone()),
            Message::Close(f) => (OpCode::Close, CloseFrame::encode(f.as_ref())?),
            Message::Frame(_) => {
                return Err(Error::InvalidMessage("a raw frame cannot be prepared"));
            }
        };
        // The frame a server sends: unmasked, so the same for every
        // connection.
        let header = FrameHeader {
            fin: true,
            rsv: 0,
            opcode,
            mask: None,
            payload_len: payload.len() as u64,
        };
        header.check_outgoing()?;
        let mut head = [0; MAX_HEADER_LEN];
        let n = header.encode(&mut head);
        let mut frame = BytesMut::with_capacity(n + payload.len());
        frame.extend_from_slice(&head[..n]);
        frame.extend_from_slice(&payload);
        let data = matches!(opcode, OpCode::Text | OpCode::Binary);
        Ok(PreparedMessage {
            opcode,
            payload,
            frame: frame.freeze(),
            compressed: data.then(Default::default),
        })
    }

    /// The compressed server frame for connections compressing with a
    /// `zlib_bits` window (9–15), made by `compress` the first time.
    /// `None` for control messages, which are never compressed.
    pub(crate) fn compressed_frame(
        &self,
        zlib_bits: u8,
        compress: impl FnOnce(&[u8]) -> Result<Bytes, Error>,
    ) -> Option<Result<Bytes, Error>> {
        let slot = &self.compressed.as_ref()?.0[usize::from(zlib_bits.clamp(9, 15) - 9)];
        if let Some(frame) = slot.get() {
            return Some(Ok(frame.clone()));
        }
        // Two tasks racing here both compress; one result is kept, and
        // either is a valid frame.
        Some(compress(&self.payload).map(|frame| slot.get_or_init(|| frame).clone()))
    }

    /// The message's opcode.
    pub fn opcode(&self) -> OpCode {
        self.opcode
    }

    /// The payload.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// The whole encoded server frame: header and payload.
    pub fn frame(&self) -> &Bytes {
        &self.frame
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::close::CloseCode;

    fn bye() -> Message {
        Message::Close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "bye")))
    }

    #[test]
    fn predicates_name_one_kind_each() {
        let all = [
            Message::text("t"),
            Message::binary(vec![1]),
            Message::Ping(Bytes::new()),
            Message::Pong(Bytes::new()),
            bye(),
        ];
        let kinds: Vec<[bool; 5]> = all
            .iter()
            .map(|m| {
                [
                    m.is_text(),
                    m.is_binary(),
                    m.is_ping(),
                    m.is_pong(),
                    m.is_close(),
                ]
            })
            .collect();
        for (i, k) in kinds.iter().enumerate() {
            let mut want = [false; 5];
            want[i] = true;
            assert_eq!(*k, want, "{:?}", all[i]);
        }
    }

    #[test]
    fn text_views_follow_tungstenite() {
        assert_eq!(Message::text("héllo").to_text().unwrap(), "héllo");
        assert_eq!(Message::binary(&b"ok"[..]).to_text().unwrap(), "ok");
        assert_eq!(
            Message::Ping(Bytes::from_static(b"p")).to_text().unwrap(),
            "p"
        );
        assert_eq!(bye().to_text().unwrap(), "bye");
        assert_eq!(Message::Close(None).to_text().unwrap(), "");
        assert!(matches!(
            Message::binary(vec![0xFF]).to_text(),
            Err(Error::InvalidUtf8)
        ));
        let f = Frame::new(true, OpCode::Binary, vec![0xC3]);
        assert!(Message::Frame(f).into_text().is_err());
        assert_eq!(bye().into_text().unwrap(), "bye");
        assert_eq!(Message::binary(&b"ok"[..]).into_text().unwrap(), "ok");
        assert!(
            Message::Pong(Bytes::from_static(b"\xFF"))
                .into_text()
                .is_err()
        );
    }

    #[test]
    fn data_and_length_count_a_close_frames_reason_only() {
        assert_eq!(bye().len(), 3);
        assert_eq!(bye().into_data(), Bytes::from_static(b"bye"));
        assert_eq!(bye().into_payload(), Bytes::from_static(b"\x03\xE9bye"));
        assert!(Message::Close(None).is_empty());
        assert!(Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).is_empty());
        assert_eq!(Message::text("abc").into_data(), Bytes::from_static(b"abc"));
        assert_eq!(Message::text("abc").len(), 3);
        assert!(!Message::Ping(Bytes::from_static(b"x")).is_empty());
    }

    #[test]
    fn display_shows_text_or_the_binary_length() {
        assert_eq!(Message::text("hi").to_string(), "hi");
        assert_eq!(
            Message::binary(vec![0xFF, 0]).to_string(),
            "Binary Data<length=2>"
        );
        assert_eq!(bye().to_string(), "bye");
    }

    #[test]
    fn conversions_pick_text_for_strings_and_binary_for_bytes() {
        assert_eq!(Message::from("a"), Message::text("a"));
        assert_eq!(Message::from(String::from("a")), Message::text("a"));
        assert_eq!(Message::from(Utf8Bytes::from("a")), Message::text("a"));
        assert_eq!(Message::from(vec![1u8]), Message::binary(vec![1u8]));
        assert_eq!(Message::from(&[1u8][..]), Message::binary(vec![1u8]));
        assert_eq!(
            Message::from(Bytes::from_static(b"\x01")),
            Message::binary(vec![1u8])
        );
    }
}
