//! permessage-deflate (RFC 7692 §7) compression and decompression of whole
//! messages, without I/O.
//!
//! A message is compressed as one raw DEFLATE stream segment ending in a
//! sync flush, whose trailing `00 00 FF FF` is stripped before sending; the
//! receiver appends it back before the last inflate. The LZ77 window is kept
//! across messages ("context takeover") unless the negotiation said to reset
//! it after each message.
//!
//! Decompression is bounded before allocation: the output grows in steps
//! that never pass `max_message_size + 1` bytes, and inflating stops at the
//! first byte beyond the limit, so a small message that would inflate to
//! gigabytes costs at most the limit.

use bytes::Bytes;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use crate::Role;
use crate::budget::{BudgetAccount, Grant, Held};
use crate::deflate::{DeflateConfig, DeflateParams};
use crate::error::{Error, ProtocolError};
use crate::message::Message;
use crate::text::Utf8Bytes;
use crate::utf8::Utf8Validator;

/// Whether this build can compress (the `deflate` feature).
pub const AVAILABLE: bool = true;

/// The empty stored block a sync flush ends with (RFC 7692 §7.2.1).
pub(crate) const TAIL: [u8; 4] = [0x00, 0x00, 0xFF, 0xFF];

/// The first output step of a message, unless the input suggests less.
const FIRST_STEP: usize = 4 << 10;

/// Under a memory budget, the smallest output step worth taking when the
/// budget has less room than the usual (geometric) step.
const MIN_BUDGET_STEP: usize = 16 << 10;

/// What one [`Inflater::feed`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fed {
    /// Input bytes consumed; the rest must be fed again.
    pub(crate) consumed: usize,
    /// Set when inflating stopped because the memory budget is exhausted:
    /// the bytes of it wanted. Feed again (the rest of the input, or none)
    /// once budget is given back.
    pub(crate) wait: Option<usize>,
}

/// A compression scratch buffer larger than this is freed after use, so
/// that one large message does not pin memory on an idle connection.
const SCRATCH_KEEP: usize = 64 << 10;

/// zlib cannot make raw deflate streams with an 8-bit window. Its 9-bit
/// compressor never refers back more than 250 bytes (window size minus its
/// 262-byte lookahead), which a 256-byte window holds, so a peer limited to
/// 8 bits can read what we compress with 9; and inflating with a larger
/// window than the sender's is always safe.
pub(crate) fn zlib_window_bits(bits: u8) -> u8 {
    bits.clamp(9, 15)
}

/// The compressor and decompressor for `role` under the negotiated
/// `params`: each side compresses with its own window and context rule (and
/// `config`'s level and threshold) and inflates with the peer's.
pub(crate) fn pair(
    role: Role,
    params: &DeflateParams,
    config: &DeflateConfig,
    max_message_size: usize,
) -> Result<(Inflater, Deflater), Error> {
    let server = (
        params.server_max_window_bits,
        params.server_no_context_takeover,
    );
    let client = (
        params.client_max_window_bits,
        params.client_no_context_takeover,
    );
    let (ours, theirs) = match role {
        Role::Server => (server, client),
        Role::Client => (client, server),
    };
    let deflater = Deflater::new(config.level, ours.0, ours.1, config.compression_threshold);
    let inflater = Inflater::new(theirs.0, theirs.1, max_message_size);
    Ok((inflater, deflater))
}

/// Compresses the messages one side sends.
#[derive(Debug)]
pub struct Deflater {
    /// zlib's state (hundreds of KiB at the default window and memLevel),
    /// made by the first message compressed: a connection that never
    /// sends one of its own (it only receives, or only sends shared
    /// frames) never pays for it.
    compress: Option<Compress>,
    reset_after_message: bool,
    threshold: usize,
    level: u32,
    /// The window zlib compresses with (9–15; see [`zlib_window_bits`]).
    zlib_bits: u8,
    /// The window must restart before the next message (see
    /// [`sent_elsewhere`](Self::sent_elsewhere)).
    stale: bool,
    scratch: Vec<u8>,
}

impl Deflater {
    /// A compressor at `level` (0–9) with a window of `2^window_bits` bytes
    /// (8–15); `reset_after_message` drops the context after each message
    /// (no context takeover); messages shorter than `threshold` bytes are
    /// not compressed.
    pub(crate) fn new(
        level: u32,
        window_bits: u8,
        reset_after_message: bool,
        threshold: usize,
    ) -> Self {
        let level = level.min(9);
        let zlib_bits = zlib_window_bits(window_bits);
        Deflater {
            compress: None,
            reset_after_message,
            threshold,
            level,
            zlib_bits,
            stale: false,
            scratch: Vec::new(),
        }
    }

    /// What a message compressed for this connection alone must agree on
    /// to be shared with others: the window (a peer limited to a smaller
    /// one could not read it). The level only changes the size.
    pub(crate) fn shared_window(&self) -> u8 {
        self.zlib_bits
    }

    /// Compresses `payload` as a message of its own, from an empty window,
    /// with this connection's window and level: bytes any connection with
    /// the same window can send.
    pub(crate) fn compress_alone(&self, payload: &[u8]) -> Result<Vec<u8>, Error> {
        Deflater::new(self.level, self.zlib_bits, true, 0).compress(payload, <[u8]>::to_vec)
    }

    /// Accounts for a message the peer inflated that this compressor did
    /// not produce (a shared prepared message). With context takeover the
    /// peer's window now ends with bytes ours never saw, so back-references
    /// would point at the wrong bytes: start over from an empty window,
    /// which every peer reads correctly. Done when this compressor is next
    /// used: restarting costs about as much as compressing a kilobyte (zlib
    /// clears its hash table), which a broadcast to many connections should
    /// not pay per connection and per message.
    pub(crate) fn sent_elsewhere(&mut self) {
        self.stale = !self.reset_after_message;
    }

    /// Whether a data message of `len` bytes goes out compressed.
    pub(crate) fn wants(&self, len: usize) -> bool {
        len >= self.threshold
    }

    /// Compresses one whole message and hands the result, without the
    /// trailing `00 00 FF FF`, to `write`.
    pub(crate) fn compress<R>(
        &mut self,
        payload: &[u8],
        write: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, Error> {
        let (level, bits) = (self.level, self.zlib_bits);
        let compress = self.compress.get_or_insert_with(|| {
            Compress::new_with_window_bits(Compression::new(level), false, bits)
        });
        if std::mem::take(&mut self.stale) {
            compress.reset();
        }
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        // Compressible data usually shrinks well below half; grow if not.
        out.reserve(payload.len() / 2 + 64);
        let mut input = payload;
        loop {
            if out.len() == out.capacity() {
                out.reserve(out.capacity().max(1024));
            }
            let before = compress.total_in();
            compress
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .map_err(|e| Error::Compression(e.to_string()))?;
            let consumed = (compress.total_in() - before) as usize;
            input = &input[consumed..];
            // A sync flush is complete once it leaves output space unused.
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
        }
        if out.ends_with(&TAIL) {
            out.truncate(out.len() - TAIL.len());
        } else if out.is_empty() {
            // zlib writes nothing for a flush right after a flush (an empty
            // message after another); an empty payload would make the peer
            // read the appended tail as a broken stored block. A lone empty
            // stored block header is the empty message (RFC 7692 §7.2.3.6).
            out.push(0x00);
        }
        if self.reset_after_message {
            compress.reset();
        }
        let r = write(&out);
        if out.capacity() <= SCRATCH_KEEP {
            self.scratch = out;
        }
        Ok(r)
    }
}

/// A compressed message being inflated.
#[derive(Debug)]
struct Inflating {
    text: bool,
    out: Vec<u8>,
    /// The last inflate filled `out`: zlib may hold more output.
    full: bool,
    /// The sender ended its DEFLATE stream (a block with BFINAL set): what
    /// follows in this message is ignored, and the context starts over.
    ended: bool,
    /// Bytes of the stripped tail already fed at the end of the message.
    tail_fed: usize,
}

/// Decompresses the messages one side receives.
#[derive(Debug)]
pub struct Inflater {
    /// zlib's state and window (about 40 KiB at a 15-bit window), made by
    /// the first compressed message received.
    decompress: Option<Decompress>,
    /// The window the peer compresses with, for zlib (see
    /// [`zlib_window_bits`]).
    zlib_bits: u8,
    reset_after_message: bool,
    max_message_size: usize,
    msg: Option<Inflating>,
}

impl Inflater {
    /// A decompressor for a peer whose window is at most `2^window_bits`
    /// bytes; `reset_after_message` when the peer may not use context
    /// takeover; messages are refused past `max_message_size` bytes inflated.
    pub(crate) fn new(window_bits: u8, reset_after_message: bool, max_message_size: usize) -> Self {
        Inflater {
            decompress: None,
            zlib_bits: zlib_window_bits(window_bits),
            reset_after_message,
            max_message_size,
            msg: None,
        }
    }

    /// Whether a compressed message has started and not yet ended.
    pub(crate) fn in_message(&self) -> bool {
        self.msg.is_some()
    }

    /// Starts a compressed message (its first frame had RSV1 set).
    pub(crate) fn begin(&mut self, text: bool) {
        self.msg = Some(Inflating {
            text,
            out: Vec::new(),
            full: false,
            ended: false,
            tail_fed: 0,
        });
    }

    /// Drops the message being inflated, if any (after an error).
    pub(crate) fn abort(&mut self) {
        self.msg = None;
    }

    /// Inflates the next compressed bytes of the message, checking the size
    /// limit and, for text, UTF-8 as output appears. Output memory is asked
    /// of `account` before it is reserved: when the budget is exhausted,
    /// inflating stops with [`Fed::wait`] set and the input not consumed
    /// left for the next call.
    pub(crate) fn feed(
        &mut self,
        input: &[u8],
        utf8: &mut Utf8Validator,
        account: &mut BudgetAccount,
    ) -> Result<Fed, Error> {
        let max = self.max_message_size;
        let total = input.len();
        let mut input = input;
        let Some(m) = self.msg.as_mut() else {
            return Ok(Fed {
                consumed: total,
                wait: None,
            });
        };
        let bits = self.zlib_bits;
        let decompress = self
            .decompress
            .get_or_insert_with(|| Decompress::new_with_window_bits(false, bits));
        // Inflate while input is left, or while the last call filled the
        // output (zlib may hold more).
        while !m.ended && (!input.is_empty() || m.full) {
            if m.out.len() == m.out.capacity() {
                // Geometric growth, capped so that the buffer never exceeds
                // the limit by more than the one byte that proves it passed;
                // the step that reaches the limit takes that byte along, so
                // a message of exactly the limit is not copied once more.
                let room = max + 1 - m.out.len();
                let step = if m.out.is_empty() {
                    FIRST_STEP.min(input.len().saturating_mul(4).max(256))
                } else {
                    m.out.len()
                };
                let mut step = if step >= room - 1 { room } else { step };
                if account.is_on() {
                    match grow(account, m.out.len(), step)? {
                        Ok(granted) => step = granted,
                        Err(wanted) => {
                            return Ok(Fed {
                                consumed: total - input.len(),
                                wait: Some(wanted),
                            });
                        }
                    }
                }
                m.out.reserve_exact(step);
                account.set(Held::Inflated, m.out.capacity());
            }
            let (in_before, out_before) = (decompress.total_in(), m.out.len());
            let status = decompress
                .decompress_vec(input, &mut m.out, FlushDecompress::None)
                .map_err(|_| ProtocolError::InvalidCompressedData)?;
            let consumed = (decompress.total_in() - in_before) as usize;
            input = &input[consumed..];
            if m.out.len() > max {
                return Err(Error::MessageTooLarge {
                    size: m.out.len() as u64,
                    max,
                });
            }
            let produced = m.out.len() - out_before;
            if m.text {
                utf8.feed(&m.out[out_before..])?;
            }
            m.full = m.out.len() == m.out.capacity();
            match status {
                Status::StreamEnd => m.ended = true,
                // No progress is possible without more input.
                Status::BufError => break,
                Status::Ok if consumed == 0 && produced == 0 => {
                    return Err(ProtocolError::InvalidCompressedData.into());
                }
                Status::Ok => {}
            }
        }
        Ok(Fed {
            consumed: total,
            wait: None,
        })
    }

    /// Ends the message: inflates the stripped tail, checks that text ended
    /// on a whole code point, and resets the context if negotiated.
    /// `Ok(Err(wanted))` when the memory budget is exhausted: call again
    /// once budget is given back.
    pub(crate) fn finish(
        &mut self,
        utf8: &mut Utf8Validator,
        account: &mut BudgetAccount,
    ) -> Result<Result<Message, usize>, Error> {
        let done = self.msg.as_ref().map_or(0, |m| m.tail_fed);
        let fed = self.feed(&TAIL[done..], utf8, account)?;
        if let Some(m) = self.msg.as_mut() {
            m.tail_fed += fed.consumed;
        }
        if let Some(wanted) = fed.wait {
            return Ok(Err(wanted));
        }
        let Some(m) = self.msg.take() else {
            return Err(ProtocolError::InvalidCompressedData.into());
        };
        if self.reset_after_message || m.ended {
            if let Some(d) = &mut self.decompress {
                d.reset(false);
            }
        }
        // The output is the message's now, no longer the connection's.
        account.release(Held::Inflated);
        let payload = Bytes::from(m.out);
        if m.text {
            utf8.finish()?;
            Ok(Ok(Message::Text(Utf8Bytes::from_validated(payload))))
        } else {
            Ok(Ok(Message::Binary(payload)))
        }
    }
}

/// Asks `account` for `step` more bytes of output beyond `len`, or, if the
/// budget has less room, for what it has (at least [`MIN_BUDGET_STEP`]).
/// `Ok(Ok(step))` is the step granted, `Ok(Err(wanted))` says wait,
/// `Err` refuses a message that alone would exceed the budget.
fn grow(
    account: &mut BudgetAccount,
    len: usize,
    step: usize,
) -> Result<Result<usize, usize>, Error> {
    // Growing may move the output: the old buffer lives on while it is
    // copied, so both are asked for.
    let first = account.try_set(Held::Inflated, len + len + step);
    if first == Grant::Granted {
        return Ok(Ok(step));
    }
    let smaller = step.min(account.room().saturating_sub(len).max(MIN_BUDGET_STEP));
    let answer = if smaller < step {
        account.try_set(Held::Inflated, len + len + smaller)
    } else {
        first
    };
    match answer {
        Grant::Granted => Ok(Ok(smaller)),
        Grant::Wait { wanted } => Ok(Err(wanted)),
        Grant::Never { charge, limit } => Err(Error::OverBudget {
            size: charge as u64,
            budget: limit,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deflate(d: &mut Deflater, payload: &[u8]) -> Vec<u8> {
        d.compress(payload, <[u8]>::to_vec).unwrap()
    }

    #[test]
    fn zlib_state_is_made_by_the_first_message_each_way() {
        let mut d = Deflater::new(6, 15, false, 0);
        let mut i = Inflater::new(15, false, 1 << 20);
        assert!(
            d.compress.is_none() && i.decompress.is_none(),
            "none at first"
        );
        // Sharing a frame compressed elsewhere makes no state either.
        d.sent_elsewhere();
        assert!(d.compress.is_none());
        let wire = deflate(&mut d, b"hello hello hello");
        assert!(d.compress.is_some());
        assert!(i.decompress.is_none(), "the other direction still has none");
        assert_eq!(
            inflate(&mut i, &wire, true).unwrap(),
            Message::text("hello hello hello")
        );
        assert!(i.decompress.is_some());
        // Context takeover goes on from the state made lazily.
        let again = deflate(&mut d, b"hello hello hello");
        assert!(again.len() < wire.len(), "{again:?} vs {wire:?}");
        assert_eq!(
            inflate(&mut i, &again, true).unwrap(),
            Message::text("hello hello hello")
        );
    }

    fn inflate(i: &mut Inflater, wire: &[u8], text: bool) -> Result<Message, Error> {
        let mut utf8 = Utf8Validator::new();
        let mut acct = BudgetAccount::new(None);
        i.begin(text);
        i.feed(wire, &mut utf8, &mut acct)?;
        Ok(i.finish(&mut utf8, &mut acct)?.unwrap())
    }

    #[test]
    fn rfc7692_hello_examples() {
        // §7.2.3.1: "Hello" compressed, without the tail.
        let wire = [0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00];
        let mut i = Inflater::new(15, false, 1 << 20);
        assert_eq!(
            inflate(&mut i, &wire, true).unwrap(),
            Message::text("Hello")
        );
        // §7.2.3.2: the same again with context takeover refers back.
        let again = [0xf2, 0x00, 0x11, 0x00, 0x00];
        assert_eq!(
            inflate(&mut i, &again, true).unwrap(),
            Message::text("Hello")
        );
        // §7.2.3.3: a stored (uncompressed) block.
        let stored = [
            0x00, 0x05, 0x00, 0xfa, 0xff, 0x48, 0x65, 0x6c, 0x6c, 0x6f, 0x00,
        ];
        let mut i = Inflater::new(15, false, 1 << 20);
        assert_eq!(
            inflate(&mut i, &stored, true).unwrap(),
            Message::text("Hello")
        );
        // §7.2.3.4: two blocks, the first with BFINAL unset.
        let two = [
            0xf2, 0x48, 0x05, 0x00, 0x00, 0x00, 0xff, 0xff, 0xca, 0xc9, 0xc9, 0x07, 0x00,
        ];
        let mut i = Inflater::new(15, false, 1 << 20);
        assert_eq!(inflate(&mut i, &two, true).unwrap(), Message::text("Hello"));
    }

    #[test]
    fn bfinal_block_ends_the_message_and_resets() {
        // §7.2.3.5: "Hello" in a final block; the tail we append is ignored.
        let wire = [0xf3, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00, 0x00];
        let mut i = Inflater::new(15, false, 1 << 20);
        assert_eq!(
            inflate(&mut i, &wire, true).unwrap(),
            Message::text("Hello")
        );
        assert_eq!(
            inflate(&mut i, &wire, true).unwrap(),
            Message::text("Hello")
        );
    }

    #[test]
    fn round_trips_with_and_without_context_takeover() {
        for reset in [false, true] {
            let mut d = Deflater::new(6, 15, reset, 0);
            let mut i = Inflater::new(15, reset, 1 << 20);
            let mut sizes = Vec::new();
            for n in 0..200 {
                let msg =
                    format!("{{\"seq\": {n}, \"kind\": \"update\", \"payload\": \"abcdefgh\"}}");
                let wire = deflate(&mut d, msg.as_bytes());
                sizes.push(wire.len());
                assert_eq!(inflate(&mut i, &wire, true).unwrap(), Message::text(msg));
            }
            // With the context kept, repeats compress to a few bytes.
            let later = sizes[100..].iter().sum::<usize>() / 100;
            if reset {
                assert!(later > 30, "{later}");
            } else {
                assert!(later < 20, "{later}");
            }
        }
    }

    #[test]
    fn a_reset_receiver_cannot_read_context_takeover() {
        let mut d = Deflater::new(6, 15, false, 0);
        let mut i = Inflater::new(15, true, 1 << 20);
        let msg = b"the same words, the same words, the same words";
        inflate(&mut i, &deflate(&mut d, msg), false).unwrap();
        // The second message refers to the first one's window.
        assert!(inflate(&mut i, &deflate(&mut d, msg), false).is_err());
    }

    #[test]
    fn every_window_size_round_trips() {
        let data: Vec<u8> = (0..200_000u32)
            .map(|i| (i * 7 % 251) as u8 ^ (i / 1000) as u8)
            .collect();
        for bits in 8..=15 {
            let mut d = Deflater::new(9, bits, false, 0);
            let mut i = Inflater::new(bits, false, 1 << 20);
            for _ in 0..3 {
                let wire = deflate(&mut d, &data);
                assert_eq!(
                    inflate(&mut i, &wire, false).unwrap(),
                    Message::binary(data.clone()),
                    "{bits} bits"
                );
            }
        }
    }

    #[test]
    fn consecutive_empty_messages_are_one_zero_byte() {
        // Regression: the second empty message came out as no bytes at all,
        // which Node's zlib refused ("invalid stored block lengths").
        let mut d = Deflater::new(3, 15, false, 0);
        let mut i = Inflater::new(15, false, 16);
        for m in ["", "", "x", "", "", "hello hello"] {
            let wire = deflate(&mut d, m.as_bytes());
            assert!(!wire.is_empty(), "{m:?}");
            assert_eq!(inflate(&mut i, &wire, true).unwrap(), Message::text(m));
        }
    }

    #[test]
    fn empty_message() {
        let mut d = Deflater::new(6, 15, false, 0);
        let mut i = Inflater::new(15, false, 16);
        let wire = deflate(&mut d, b"");
        assert!(!wire.is_empty() && wire.len() < 3, "{wire:x?}");
        assert_eq!(inflate(&mut i, &wire, true).unwrap(), Message::text(""));
        assert_eq!(
            inflate(&mut i, &[0x00], false).unwrap(),
            Message::binary("")
        );
    }

    #[test]
    fn limit_is_exact_and_checked_while_inflating() {
        let mut d = Deflater::new(6, 15, true, 0);
        let wire = deflate(&mut d, &[b'a'; 1000]);
        let mut i = Inflater::new(15, true, 1000);
        assert_eq!(inflate(&mut i, &wire, false).unwrap().len(), 1000);
        let mut i = Inflater::new(15, true, 999);
        let e = inflate(&mut i, &wire, false).unwrap_err();
        assert!(
            matches!(
                e,
                Error::MessageTooLarge {
                    size: 1000,
                    max: 999
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn bomb_stops_at_the_limit() {
        // 1 GiB of zeros compresses to about 1 MiB; feeding a slice of it
        // inflates far past a 64 KiB limit.
        let mut d = Deflater::new(9, 15, true, 0);
        let wire = deflate(&mut d, &vec![0; 8 << 20]);
        let mut i = Inflater::new(15, true, 64 << 10);
        let mut utf8 = Utf8Validator::new();
        i.begin(false);
        let e = i
            .feed(&wire[..1024], &mut utf8, &mut BudgetAccount::new(None))
            .unwrap_err();
        assert!(
            matches!(e, Error::MessageTooLarge { max: 65536, .. }),
            "{e}"
        );
        let cap = i.msg.as_ref().unwrap().out.capacity();
        assert!(cap <= (64 << 10) + 1, "{cap}");
    }

    #[test]
    fn invalid_text_fails_on_the_chunk_that_shows_it() {
        let mut d = Deflater::new(6, 15, false, 0);
        let mut payload = "κόσμε".repeat(10).into_bytes();
        payload.extend_from_slice(&[0xED, 0xA0, 0x80]);
        let wire = deflate(&mut d, &payload);
        let mut i = Inflater::new(15, false, 1 << 20);
        let mut utf8 = Utf8Validator::new();
        i.begin(true);
        // Inflating the message body is enough; no need for the tail.
        let r = i.feed(&wire, &mut utf8, &mut BudgetAccount::new(None));
        assert!(matches!(r, Err(Error::InvalidUtf8)));
    }

    #[test]
    fn corrupt_data_is_a_protocol_error() {
        let mut i = Inflater::new(15, false, 1 << 20);
        // BTYPE 11 is reserved.
        let e = inflate(&mut i, &[0xff, 0xff, 0xff], false).unwrap_err();
        assert!(matches!(
            e,
            Error::Protocol(ProtocolError::InvalidCompressedData)
        ));
    }

    #[test]
    fn fed_in_any_pieces() {
        let mut d = Deflater::new(6, 15, false, 0);
        let text = "Bytes arrive in pieces; inflating must not care where they split. ".repeat(50);
        let wire = deflate(&mut d, text.as_bytes());
        for piece in [1, 2, 3, 7, 64, 1000] {
            let mut i = Inflater::new(15, false, 1 << 20);
            let mut utf8 = Utf8Validator::new();
            i.begin(true);
            let mut acct = BudgetAccount::new(None);
            for chunk in wire.chunks(piece) {
                i.feed(chunk, &mut utf8, &mut acct).unwrap();
            }
            let msg = i.finish(&mut utf8, &mut acct).unwrap().unwrap();
            assert_eq!(msg, Message::text(text.clone()));
        }
    }
}
