//! Message decoding: frames in a byte buffer to [`Message`]s.
//!
//! Works in place on the read buffer: each payload byte is unmasked and (for
//! text) UTF-8-checked once, as it arrives, and a complete single-frame
//! message is split off the buffer as [`bytes::Bytes`] without a copy.
//! Limits are checked on the header, before any memory is reserved for the
//! payload. Control frames may come between the fragments of a message.
//!
//! With [`MessageDecoder::stream_messages`] data messages are not assembled: the
//! payload bytes of each read are handed out at once as [`Message::Frame`]
//! pieces, so memory stays bounded by what one read brings.

use std::num::NonZeroUsize;

use bytes::{Buf, BytesMut};

use crate::Role;
use crate::budget::{BudgetAccount, Grant, Growth, Held};
use crate::close::CloseFrame;
use crate::deflate::Inflater;
use crate::error::{Error, ProtocolError};
use crate::header::{FrameHeader, OpCode};
use crate::limits::Limits;
use crate::mask::apply_mask;
use crate::message::Message;
use crate::text::Utf8Bytes;
use crate::utf8::Utf8Validator;

/// The `len` payload bytes at the front of `src`, split off. A payload that
/// fills the buffer to its end gets the buffer whole: splitting would leave
/// `src` an empty view of no capacity, which can hold nothing more yet
/// shares the allocation, and so keeps the message's memory alive for as
/// long as the reader keeps its buffer (an idle connection after a large
/// message).
#[inline]
fn take_payload(src: &mut BytesMut, len: usize) -> BytesMut {
    if len == src.capacity() {
        std::mem::take(src)
    } else {
        src.split_to(len)
    }
}

/// A whole data message decoded in place
/// ([`MessageDecoder::decode_borrowed`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Borrowed<'a> {
    /// The message, borrowed from the buffer.
    pub data: BorrowedData<'a>,
    /// The bytes of the buffer the frame took, header included.
    pub used: usize,
}

/// A frame [`MessageDecoder::borrowable`] found: its header, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Borrowable {
    header: FrameHeader,
    header_len: usize,
}

impl Borrowable {
    /// A whole one-frame text or binary message at the front of `src`, by
    /// its header alone (what the decoder's state allows is checked by
    /// [`MessageDecoder::borrowable`]).
    #[inline]
    fn at_front(src: &[u8]) -> Option<Borrowable> {
        // The usual message, a frame of under 126 bytes: its header read
        // in a few operations, as `parse` reads it.
        if let [b0 @ (0x81 | 0x82), b1, ..] = *src {
            let len = usize::from(b1 & 0x7F);
            if len < 126 {
                let masked = b1 & 0x80 != 0;
                let header_len = if masked { 6 } else { 2 };
                if src.len() < header_len + len {
                    return None;
                }
                let header = FrameHeader {
                    fin: true,
                    rsv: 0,
                    opcode: if b0 == 0x81 {
                        OpCode::Text
                    } else {
                        OpCode::Binary
                    },
                    mask: masked.then(|| [src[2], src[3], src[4], src[5]]),
                    payload_len: len as u64,
                };
                return Some(Borrowable { header, header_len });
            }
        }
        Self::parsed(src)
    }

    /// [`at_front`](Self::at_front) through the full parse.
    #[inline]
    fn parsed(src: &[u8]) -> Option<Borrowable> {
        let (header, header_len) = match FrameHeader::parse(src) {
            Ok(Some(h)) => h,
            // Not all here yet, or broken: `decode` finds out and says so.
            Ok(None) | Err(_) => return None,
        };
        if !header.fin
            || header.rsv != 0
            || !matches!(header.opcode, OpCode::Text | OpCode::Binary)
            || header.payload_len > (src.len() - header_len) as u64
        {
            return None;
        }
        Some(Borrowable { header, header_len })
    }

    /// The bytes the frame takes, header included.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        // At most the buffer's length (`borrowable` checked).
        self.header_len + self.header.payload_len as usize
    }
}

/// A frame [`MessageDecoder::take_borrowable`] unmasked and checked in
/// place: where its payload lies, and whether it is validated text.
/// Neither copied nor cloned: one view per frame taken.
#[derive(Debug)]
pub(crate) struct TakenFrame {
    text: bool,
    header_len: usize,
    /// The bytes the frame took, header included.
    pub(crate) used: usize,
}

impl TakenFrame {
    /// The message, its payload copied from `src` (the bytes
    /// `take_borrowable` was given) into memory `copy` gives.
    #[inline]
    pub(crate) fn owned(self, src: &[u8], copy: impl FnOnce(&[u8]) -> BytesMut) -> Message {
        let payload = copy(&src[self.header_len..self.used]).freeze();
        if self.text {
            Message::Text(Utf8Bytes::from_validated(payload))
        } else {
            Message::Binary(payload)
        }
    }

    /// The payload, borrowed from `src`: the bytes `take_borrowable` was
    /// given, unchanged since (its callers pass the same buffer at once).
    #[inline]
    pub(crate) fn view(self, src: &[u8]) -> BorrowedData<'_> {
        let payload = &src[self.header_len..self.used];
        if self.text {
            BorrowedData::Text(crate::text::validated_str(payload))
        } else {
            BorrowedData::Binary(payload)
        }
    }
}

/// The payload of a [`Borrowed`] message, unmasked.
#[derive(Debug, PartialEq, Eq)]
pub enum BorrowedData<'a> {
    /// Validated text.
    Text(&'a str),
    /// Binary data.
    Binary(&'a [u8]),
}

#[derive(Debug)]
enum DecodeState {
    /// Waiting for a frame header.
    Head,
    /// The header was consumed; `len` payload bytes follow, of which
    /// `handed_out` were handed out as pieces (streaming only) and the next
    /// `checked`, at the front of the buffer, are already unmasked and
    /// checked.
    Payload {
        header: FrameHeader,
        len: usize,
        checked: usize,
        /// The payload is compressed: it goes to the inflater as it arrives.
        inflate: bool,
        handed_out: usize,
        /// Compressed: how many of the `checked` bytes the inflater took
        /// (fewer while the memory budget holds it back).
        fed: usize,
    },
    /// The last frame of a compressed message is in; the inflater still has
    /// to finish (it waits for memory budget).
    Finishing,
}

/// A fragmented message being put together.
#[derive(Debug)]
struct Fragments {
    text: bool,
    buf: BytesMut,
    /// `buf` is a copy of its own, not a view into the read buffer.
    owned: bool,
}

/// Turns received bytes into messages for one side of a connection.
#[derive(Debug)]
pub struct MessageDecoder {
    role: Role,
    max_frame_size: usize,
    max_message_size: usize,
    accept_unmasked: bool,
    state: DecodeState,
    fragments: Option<Fragments>,
    utf8: Utf8Validator,
    /// Text checking applies to the frame being read.
    checking_text: bool,
    /// Inflates compressed messages when permessage-deflate was negotiated.
    // Boxed: a connection without compression pays one pointer for it.
    inflater: Option<Box<Inflater>>,
    /// Hand out data payloads as pieces instead of assembling messages.
    stream: bool,
    /// Streaming: payload bytes of earlier frames of the message in progress.
    streamed: u64,
    /// The memory this connection holds against a shared budget.
    account: BudgetAccount,
    /// The last `decode` stopped for memory budget: the bytes of it wanted.
    budget_wait: Option<NonZeroUsize>,
    /// The inflater stopped for budget with output still to produce.
    inflate_pending: bool,
}

impl MessageDecoder {
    /// A decoder for `role` (the side that reads) holding the peer to
    /// `limits`.
    pub fn new(role: Role, limits: Limits) -> Self {
        let account = BudgetAccount::new(limits.budget);
        MessageDecoder {
            role,
            max_frame_size: limits.max_frame_size,
            max_message_size: limits.max_message_size,
            accept_unmasked: false,
            state: DecodeState::Head,
            fragments: None,
            utf8: Utf8Validator::new(),
            checking_text: false,
            inflater: None,
            stream: false,
            streamed: 0,
            account,
            budget_wait: None,
            inflate_pending: false,
        }
    }

    /// The memory this decoder's connection holds against its
    /// [`MemoryBudget`](crate::budget::MemoryBudget), if
    /// [`Limits::budget`] set one. The layer that owns the read buffer
    /// records its size here too ([`Held::ReadBuffer`]).
    #[inline]
    pub fn account(&self) -> &BudgetAccount {
        &self.account
    }

    /// The account, to record the read buffer in.
    #[inline]
    pub fn account_mut(&mut self) -> &mut BudgetAccount {
        &mut self.account
    }

    /// Set when the last [`decode`](Self::decode) returned `Ok(None)`
    /// because the memory budget is exhausted rather than for want of
    /// input: the bytes of budget it waits for. Stop reading, wait for
    /// budget to be given back
    /// ([`MemoryBudget::wake_on_release`](crate::budget::MemoryBudget::wake_on_release)),
    /// then call `decode` again; refuse the message with
    /// [`Error::BudgetExhausted`] if that takes too long.
    #[inline]
    pub fn budget_wait(&self) -> Option<usize> {
        self.budget_wait.map(NonZeroUsize::get)
    }

    /// Whether the decoder holds nothing of the connection it reads for:
    /// between messages, no fragments, no compression or budget state. An
    /// engine may then use it for another connection of the same limits.
    #[inline]
    pub fn is_at_rest(&self) -> bool {
        self.inflater.is_none() && self.between_messages()
    }

    /// Between messages with nothing held but, perhaps, an idle inflater.
    #[inline]
    fn between_messages(&self) -> bool {
        matches!(self.state, DecodeState::Head)
            && self.fragments.is_none()
            && !self.inflate_pending
            && !self.account.is_on()
            && self.budget_wait.is_none()
            && !self.utf8.is_incomplete()
    }

    /// Takes the inflater out when the decoder is otherwise
    /// [at rest](Self::is_at_rest), so that an engine can keep it with its
    /// connection (a few words with a shared or dedicated
    /// [`DeflatePolicy`](crate::deflate::DeflatePolicy)) and lend the
    /// decoder to others; [`restore_inflater`](Self::restore_inflater)
    /// gives it back before the connection's next read.
    #[inline]
    pub fn take_idle_inflater(&mut self) -> Option<Box<Inflater>> {
        if self.inflater.is_some() && !self.inflating() && self.between_messages() {
            self.inflater.take()
        } else {
            None
        }
    }

    /// Puts back an inflater from [`take_idle_inflater`](Self::take_idle_inflater).
    pub fn restore_inflater(&mut self, inflater: Box<Inflater>) {
        self.inflater = Some(inflater);
    }

    /// Makes the first fragment of a message in progress a copy of its own.
    /// Decoding splits payloads off the read buffer without copying; an
    /// engine whose read buffer is shared by many connections calls this
    /// after decoding from it, so that a message left unfinished does not
    /// keep the shared buffer from being reused.
    #[inline]
    pub fn detach(&mut self) {
        if let Some(f) = &mut self.fragments {
            if !f.owned {
                f.buf = BytesMut::from(&f.buf[..]);
                f.owned = true;
            }
        }
    }

    /// Drops the message in progress and gives back the memory it held
    /// (after an error).
    pub fn discard(&mut self) {
        self.fragments = None;
        if let Some(i) = &mut self.inflater {
            i.abort();
            if self.account.is_on() {
                self.account.set(Held::Compression, i.holds());
            }
        }
        self.inflate_pending = false;
        self.account.release(Held::Fragments);
        self.account.release(Held::Inflated);
    }

    /// Accepts unmasked frames from clients (a server's decoder), against
    /// RFC 6455; off by default.
    pub fn accept_unmasked_frames(mut self, accept: bool) -> Self {
        self.accept_unmasked = accept;
        self
    }

    /// Hands out data payloads as [`Message::Frame`] pieces as their bytes
    /// arrive instead of assembling messages; off by default.
    pub fn stream_messages(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Accepts compressed messages (RSV1 on their first frame) from now on,
    /// inflated by `inflater` (from [`deflate::pair`](crate::deflate::pair)).
    pub fn set_inflater(&mut self, inflater: Inflater) {
        self.inflater = Some(Box::new(inflater));
    }

    /// The message limit, which inflated messages are held to as well.
    pub fn max_message_size(&self) -> usize {
        self.max_message_size
    }

    /// Under a budget: makes room in the fragment buffer for `len` more
    /// bytes before they are appended, by the budget's growth rules
    /// ([`BudgetAccount::try_grow`]: by doubling, or at least half the
    /// buffer, or a wait; never a copy of the whole buffer per frame). The
    /// last frame (`fin`) asks for its own bytes only: the buffer grows no
    /// more. `Ok(false)` when it must wait.
    fn reserve_fragment(&mut self, len: usize, fin: bool) -> Result<bool, Error> {
        let Some(f) = &mut self.fragments else {
            return Ok(true);
        };
        let need = f.buf.len() + len;
        if need <= f.buf.capacity() {
            return Ok(true);
        }
        let held = f.buf.len();
        let roomy = if fin {
            need
        } else {
            need.max(
                f.buf
                    .capacity()
                    .saturating_mul(2)
                    .min(self.max_message_size),
            )
        };
        let growth = Growth {
            old: f.buf.capacity(),
            len: held,
            step: roomy - held,
            min_step: need - held,
            beside: 0,
        };
        match self.account.try_grow(Held::Fragments, growth) {
            Ok(step) => {
                let mut bigger = BytesMut::with_capacity(held + step);
                bigger.extend_from_slice(&f.buf);
                f.buf = bigger;
                self.account.set(Held::Fragments, f.buf.capacity());
                Ok(true)
            }
            Err(Grant::Wait { wanted }) => {
                self.budget_wait = NonZeroUsize::new(wanted);
                Ok(false)
            }
            Err(Grant::Never { charge, limit }) => Err(Error::OverBudget {
                size: charge as u64,
                budget: limit,
            }),
            // (Never the answer of a refusal.)
            Err(Grant::Granted) => Ok(true),
        }
    }

    /// Under a budget: gives back the room the message being put together
    /// holds beyond its bytes (the fragments' buffer, the inflated output,
    /// each grown by doubling), for a frame that must be held whole and
    /// would not fit beside it. Whether any was given back.
    pub fn trim_spare(&mut self) -> bool {
        let mut trimmed = false;
        if let Some(f) = &mut self.fragments {
            if f.buf.capacity() > f.buf.len() {
                f.buf = BytesMut::from(&f.buf[..]);
                self.account.set(Held::Fragments, f.buf.capacity());
                trimmed = true;
            }
        }
        if let Some(i) = &mut self.inflater {
            trimmed |= i.trim(&mut self.account);
        }
        trimmed
    }

    /// Which side this decoder reads for.
    pub fn role(&self) -> Role {
        self.role
    }

    /// How many more bytes the frame being read needs, if a payload is being
    /// read; the caller can size its next read with it.
    #[inline]
    pub fn payload_remaining(&self, buffered: usize) -> Option<usize> {
        match self.state {
            DecodeState::Head | DecodeState::Finishing => None,
            DecodeState::Payload {
                len, handed_out, ..
            } => Some((len - handed_out).saturating_sub(buffered)),
        }
    }

    /// The payload bytes of the frame being read that the read buffer must
    /// hold at once before it is decoded: all of them, unless they are
    /// handed out in pieces as they come (streaming uncompressed data).
    /// `None` between frames and while streaming.
    #[inline]
    pub fn frame_held_whole(&self) -> Option<usize> {
        match self.state {
            DecodeState::Payload {
                header,
                len,
                inflate,
                ..
            } if !self.stream || inflate || header.opcode.is_control() => Some(len),
            _ => None,
        }
    }

    /// Checks a frame header; returns the payload length and whether the
    /// payload is compressed.
    fn start_frame(&mut self, header: FrameHeader) -> Result<(usize, bool), Error> {
        let in_message = self.fragments.is_some() || self.inflating();
        match header.opcode {
            OpCode::Continuation if !in_message => {
                return Err(ProtocolError::UnexpectedContinuation.into());
            }
            OpCode::Text | OpCode::Binary if in_message => {
                return Err(ProtocolError::ExpectedContinuation.into());
            }
            _ => {}
        }
        let compressed = self.start_compressed(&header)?;
        let inflate = compressed || header.opcode == OpCode::Continuation && self.inflating();
        let len = header.payload_len;
        // A compressed message's size is checked as it inflates.
        let in_progress = if inflate {
            0
        } else {
            self.fragments.as_ref().map_or(0, |f| f.buf.len() as u64) + self.streamed
        };
        if !header.opcode.is_control() {
            if len > self.max_frame_size as u64 {
                return Err(Error::FrameTooLarge {
                    size: len,
                    max: self.max_frame_size,
                });
            }
            let total = in_progress + len;
            if total > self.max_message_size as u64 {
                return Err(Error::MessageTooLarge {
                    size: total,
                    max: self.max_message_size,
                });
            }
        }
        self.checking_text = !inflate
            && match header.opcode {
                OpCode::Text => true,
                OpCode::Continuation => self.fragments.as_ref().is_some_and(|f| f.text),
                _ => false,
            };
        // Bounded by max_frame_size or by 125 above, so it fits in usize.
        Ok((len as usize, inflate))
    }

    fn finish_frame(
        &mut self,
        header: FrameHeader,
        payload: BytesMut,
    ) -> Result<Option<Message>, Error> {
        match header.opcode {
            OpCode::Ping => Ok(Some(Message::Ping(payload.freeze()))),
            OpCode::Pong => Ok(Some(Message::Pong(payload.freeze()))),
            OpCode::Close => Ok(Some(Message::Close(CloseFrame::parse(&payload)?))),
            OpCode::Text | OpCode::Binary if header.fin => {
                let text = header.opcode == OpCode::Text;
                self.message(text, payload).map(Some)
            }
            OpCode::Text | OpCode::Binary => {
                // The read buffer's memory now holds the first fragment.
                self.account
                    .transfer(Held::ReadBuffer, Held::Fragments, payload.capacity());
                self.fragments = Some(Fragments {
                    text: header.opcode == OpCode::Text,
                    buf: payload,
                    owned: false,
                });
                Ok(None)
            }
            OpCode::Continuation => {
                let f = self.fragments.as_mut().expect("checked in start_frame");
                f.buf.extend_from_slice(&payload);
                if self.account.is_on() {
                    let cap = f.buf.capacity();
                    self.account.set(Held::Fragments, cap);
                }
                if header.fin {
                    let f = self.fragments.take().expect("present");
                    // The message is the caller's now.
                    self.account.release(Held::Fragments);
                    self.message(f.text, f.buf).map(Some)
                } else {
                    Ok(None)
                }
            }
        }
    }

    /// A frame that is all in `src` (after its header) and is not a
    /// continuation, compressed or streamed: unmasked, checked and handed
    /// out at once.
    fn whole_frame(
        &mut self,
        header: FrameHeader,
        len: usize,
        src: &mut BytesMut,
    ) -> Result<Option<Message>, Error> {
        let payload = &mut src[..len];
        if let Some(key) = header.mask {
            apply_mask(payload, key, 0);
        }
        if self.checking_text {
            self.utf8.feed(payload)?;
        }
        self.finish_frame(header, take_payload(src, len))
    }

    fn message(&mut self, text: bool, payload: BytesMut) -> Result<Message, Error> {
        if text {
            self.utf8.finish()?;
            Ok(Message::Text(Utf8Bytes::from_validated(payload.freeze())))
        } else {
            Ok(Message::Binary(payload.freeze()))
        }
    }

    /// Decodes the next message from the front of `src`.
    ///
    /// Returns `Ok(None)` when `src` needs more bytes. Consumed bytes are
    /// split off `src`; the payload bytes of a frame still arriving stay in
    /// `src`, already unmasked and checked, and are not processed again.
    ///
    /// With [`MessageDecoder::stream_messages`], text and binary payloads come out
    /// as [`Message::Frame`] pieces instead: all the payload bytes of the
    /// current frame that `src` holds, split off it, so between calls `src`
    /// keeps at most a partial header or control frame.
    ///
    /// Under a memory budget ([`Limits::budget`]), `Ok(None)` may also mean
    /// that the budget is exhausted: [`budget_wait`](Self::budget_wait)
    /// tells. A message that alone would need more than the whole budget
    /// fails with [`Error::OverBudget`]. After any error, the memory held
    /// for the message in progress is given back.
    #[inline]
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Message>, Error> {
        self.budget_wait = None;
        if src.is_empty() && matches!(self.state, DecodeState::Head) {
            // Between messages with nothing read: asked on every wait, so
            // answered here without the call.
            return Ok(None);
        }
        self.decode_some(src)
    }

    /// Decodes a whole data message that is a single frame at the front
    /// of `src`, in place: unmasked and checked there, its payload
    /// borrowed from `src`, nothing split off or counted. `Ok(None)`, with
    /// nothing consumed and no state changed, for anything else (a
    /// control frame, a fragment, a compressed or unfinished frame, a
    /// message in progress, streaming): [`decode`](Self::decode) takes it.
    ///
    /// An engine reading many connections into one buffer hands each
    /// message to its handler as a view of that buffer, as uWebSockets
    /// does; the small message that fits one read costs no reference count
    /// and no advance of the buffer. The same rules as `decode`'s apply.
    #[inline]
    pub fn decode_borrowed<'a>(
        &mut self,
        src: &'a mut [u8],
    ) -> Result<Option<Borrowed<'a>>, Error> {
        let Some(found) = self.borrowable(src) else {
            return Ok(None);
        };
        let frame = self.take_borrowable(found, src)?;
        let used = frame.used;
        Ok(Some(Borrowed {
            data: frame.view(src),
            used,
        }))
    }

    /// Whether [`decode_borrowed`](Self::decode_borrowed) would take the
    /// front of `src`: looked at without changing anything, so that a
    /// caller that goes on with `src` otherwise borrows it only once it
    /// knows (an engine's receive step returns the message borrowed, or
    /// decodes on from the same buffer).
    #[inline]
    pub(crate) fn borrowable(&self, src: &[u8]) -> Option<Borrowable> {
        if !matches!(self.state, DecodeState::Head)
            || self.stream
            || self.fragments.is_some()
            || self.inflating()
        {
            return None;
        }
        Borrowable::at_front(src)
    }

    /// Unmasks and checks the frame [`borrowable`](Self::borrowable)
    /// found at the front of `src`; [`TakenFrame::view`] on the same bytes
    /// then borrows it.
    #[inline]
    pub(crate) fn take_borrowable(
        &mut self,
        found: Borrowable,
        src: &mut [u8],
    ) -> Result<TakenFrame, Error> {
        self.budget_wait = None;
        let r = self.borrow_frame(found.header, found.header_len, src);
        if r.is_err() {
            self.discard();
        }
        r
    }

    fn borrow_frame(
        &mut self,
        header: FrameHeader,
        header_len: usize,
        src: &mut [u8],
    ) -> Result<TakenFrame, Error> {
        let (len, inflate) = self.start_frame(header)?;
        debug_assert!(!inflate, "no RSV1: not compressed");
        let used = header_len + len;
        let payload = &mut src[header_len..used];
        if let Some(key) = header.mask {
            apply_mask(payload, key, 0);
        }
        let text = header.opcode == OpCode::Text;
        if text {
            self.utf8.feed(payload)?;
            self.utf8.finish()?;
        }
        Ok(TakenFrame {
            text,
            header_len,
            used,
        })
    }

    fn decode_some(&mut self, src: &mut BytesMut) -> Result<Option<Message>, Error> {
        let r = self.decode_frames(src);
        if r.is_err() {
            self.discard();
        }
        r
    }

    fn decode_frames(&mut self, src: &mut BytesMut) -> Result<Option<Message>, Error> {
        loop {
            if let DecodeState::Finishing = self.state {
                let msg = self.finish_compressed()?;
                if msg.is_some() {
                    self.state = DecodeState::Head;
                }
                return Ok(msg);
            }
            if let DecodeState::Head = self.state {
                let Some((header, header_len)) = FrameHeader::parse(src)? else {
                    return Ok(None);
                };
                let (len, inflate) = self.start_frame(header)?;
                src.advance(header_len);
                if !inflate
                    && !self.stream
                    && header.opcode != OpCode::Continuation
                    && src.len() >= len
                {
                    // The whole frame is here and starts a message (the
                    // usual small message): no state to keep between reads.
                    match self.whole_frame(header, len, src)? {
                        Some(msg) => return Ok(Some(msg)),
                        None => continue,
                    }
                }
                self.state = DecodeState::Payload {
                    header,
                    len,
                    checked: 0,
                    inflate,
                    handed_out: 0,
                    fed: 0,
                };
            }
            let DecodeState::Payload {
                header,
                len,
                checked,
                inflate,
                handed_out,
                fed,
            } = &mut self.state
            else {
                unreachable!("state set above");
            };
            let (header, len, inflate, handed_out) = (*header, *len, *inflate, *handed_out);
            let was_fed = *fed;
            let rest = len - handed_out;
            let avail = src.len().min(rest);
            if avail > *checked {
                let start = std::mem::replace(checked, avail);
                let fresh = &mut src[start..avail];
                if let Some(key) = header.mask {
                    apply_mask(fresh, key, handed_out + start);
                }
                if !inflate && self.checking_text {
                    self.utf8.feed(fresh)?;
                }
            }
            if inflate && (was_fed < avail || self.inflate_pending) {
                let taken = self.inflate(&src[was_fed..avail])?;
                if let DecodeState::Payload { fed, .. } = &mut self.state {
                    *fed = was_fed + taken;
                }
                if self.budget_wait.is_some() {
                    return Ok(None);
                }
            }
            // Streaming hands out uncompressed data as it comes; a compressed
            // message is inflated as it arrives and handed out whole.
            if self.stream && !inflate && !header.opcode.is_control() && (avail > 0 || rest == 0) {
                return self.piece(src, avail).map(Some);
            }
            if avail < rest {
                return Ok(None);
            }
            if inflate {
                // Already inflated as it arrived.
                src.advance(len);
                self.state = if header.fin {
                    DecodeState::Finishing
                } else {
                    DecodeState::Head
                };
                continue;
            }
            if header.opcode == OpCode::Continuation
                && self.account.is_on()
                && !self.reserve_fragment(len, header.fin)?
            {
                return Ok(None);
            }
            self.state = DecodeState::Head;
            if let Some(msg) = self.finish_frame(header, take_payload(src, len))? {
                return Ok(Some(msg));
            }
        }
    }
}

// The deflate module sits below the decoder, which holds its Inflater, so it
// cannot name the decoder without the two depending on each other: the
// decoder says here what `deflate::enable` needs of it.
impl crate::deflate::sealed::Sealed for MessageDecoder {}

impl crate::deflate::TakesInflater for MessageDecoder {
    fn role(&self) -> Role {
        MessageDecoder::role(self)
    }

    fn max_message_size(&self) -> usize {
        MessageDecoder::max_message_size(self)
    }

    fn budget(&self) -> Option<&crate::budget::MemoryBudget> {
        self.account.budget()
    }

    fn set_inflater(&mut self, inflater: Inflater) {
        MessageDecoder::set_inflater(self, inflater);
    }
}

mod compressed;
mod pieces;

#[cfg(test)]
#[path = "decoder_tests.rs"]
mod tests;
