//! A publish on a Redis channel: the bytes wavesock puts there.

use bytes::{BufMut, Bytes, BytesMut};

use crate::proto::header::OpCode;
use crate::proto::message::{Message, PreparedMessage};
use crate::proto::text::Utf8Bytes;

/// The wire form of a publish on the channel: a version byte, the
/// publishing link's id, the opcode, the topic's length (u32, big-endian),
/// the topic, the payload.
pub(super) fn encode(origin: &[u8; 16], topic: &str, msg: &PreparedMessage) -> Option<Bytes> {
    let op = match msg.opcode() {
        OpCode::Text => 1,
        OpCode::Binary => 2,
        _ => return None,
    };
    let payload = msg.payload();
    let mut b = BytesMut::with_capacity(HEAD + topic.len() + payload.len());
    b.put_u8(VERSION);
    b.put_slice(origin);
    b.put_u8(op);
    b.put_u32(u32::try_from(topic.len()).ok()?);
    b.put_slice(topic.as_bytes());
    b.put_slice(payload);
    Some(b.freeze())
}

pub(super) const VERSION: u8 = 1;
pub(super) const HEAD: usize = 1 + 16 + 1 + 4;

/// A publish read from the channel.
#[derive(Debug, PartialEq)]
pub(super) struct Incoming {
    pub(super) origin: [u8; 16],
    pub(super) topic: String,
    pub(super) msg: Message,
}

#[cfg(test)]
pub(super) fn decode(wire: &[u8], max: usize) -> Option<Incoming> {
    decode_owned(Bytes::copy_from_slice(wire), max)
}

/// Reads a publish from what Redis pushed; the payload stays where it
/// came, not copied.
pub(super) fn decode_owned(wire: Bytes, max: usize) -> Option<Incoming> {
    if wire.len() < HEAD || wire.len() - HEAD > max || wire[0] != VERSION {
        return None;
    }
    let origin: [u8; 16] = wire[1..17].try_into().ok()?;
    let op = wire[17];
    let topic_len = u32::from_be_bytes(wire[18..22].try_into().ok()?) as usize;
    let rest = &wire[HEAD..];
    if topic_len > rest.len() {
        return None;
    }
    let topic = std::str::from_utf8(&rest[..topic_len]).ok()?.to_owned();
    let payload = wire.slice(HEAD + topic_len..);
    let msg = match op {
        1 => Message::Text(Utf8Bytes::try_from(payload).ok()?),
        2 => Message::Binary(payload),
        _ => return None,
    };
    Some(Incoming { origin, topic, msg })
}
