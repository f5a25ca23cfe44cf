//! permessage-deflate (RFC 7692 §7) compression and decompression of whole
//! messages, without I/O.
//!
//! A message is compressed as one raw DEFLATE stream segment ending in a
//! sync flush, whose trailing `00 00 FF FF` is stripped before sending; the
//! receiver appends it back before the last inflate. The LZ77 window is kept
//! across messages ("context takeover") unless the negotiation said to reset
//! it after each message.
//!
//! Where each direction's memory lives follows the [`DeflatePolicy`]: in
//! zlib's own state, made by the first message that needs it; nowhere, with
//! zlib's state lent by a per-thread pool for one message at a time; or in
//! the window's last bytes alone, which prime a lent state before each
//! message (a preset dictionary reaches back exactly as far as the peer's
//! window does).
//!
//! Decompression is bounded before allocation: the output grows in steps
//! that never pass `max_message_size + 1` bytes, and inflating stops at the
//! first byte beyond the limit, so a small message that would inflate to
//! gigabytes costs at most the limit.

use bytes::Bytes;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use crate::Role;
use crate::budget::{BudgetAccount, Grant, Growth, Held};
use crate::deflate::observe::{self, Through};
use crate::deflate::pool::{
    give_compress, give_decompress, give_scratch, lend_compress, lend_decompress, lend_scratch,
};
use crate::deflate::{DeflateConfig, DeflateParams, DeflatePolicy};
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
/// budget has less room than the usual (geometric) step, for a small
/// output (a large one steps by at least half its size).
const MIN_BUDGET_STEP: usize = 16 << 10;

/// What a decompressor costs, as the memory budget counts it: zlib-rs'
/// inflate state (about 7 KiB) and its window, which a lent one has at the
/// full 32 KiB.
pub(crate) const INFLATE_STATE: usize = 40 << 10;

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
/// `config`'s level, threshold and policy) and inflates with the peer's.
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
    let policy = config.policy;
    // A dedicated side compresses within its own window whatever the peer
    // allows (a client's offer leaves the server free to allow more).
    let own_window = match (role, policy.windows()) {
        (Role::Server, Some((server, _))) => server,
        (Role::Client, Some((_, client))) => client,
        _ => 15,
    };
    let deflater = Deflater::under(
        policy,
        config.level,
        ours.0.min(own_window),
        ours.1,
        config.compression_threshold,
    );
    let inflater = Inflater::under(policy, theirs.0, theirs.1, max_message_size);
    Ok((inflater, deflater))
}

/// What one direction of a connection keeps between messages.
///
/// A boxed `Vec` keeps this a pointer and a tag: every compressing
/// connection carries a `Kept` each way, while few of them have a window.
#[derive(Debug)]
#[allow(clippy::box_collection)]
enum Kept<S> {
    /// Nothing: no context takeover, and each message borrows zlib's state
    /// from the thread's pool.
    Nothing,
    /// Context takeover, remembered as the window's last bytes (`None`
    /// until there are some): each message borrows zlib's state and primes
    /// it with them.
    Window(Option<Box<Vec<u8>>>),
    /// Context takeover in zlib's own state, made by the first message.
    Own(Own<S>),
}

/// zlib's own state for one direction, once made.
#[derive(Debug)]
enum Own<S> {
    /// Not yet: made by the first message that needs it, if the account
    /// (a compressor's; a decompressor asks its decoder's) lets it.
    Unmade(BudgetAccount),
    Made(Box<Made<S>>),
}

#[derive(Debug)]
struct Made<S> {
    state: S,
    /// What the state is charged to, for as long as it lives.
    _account: BudgetAccount,
}

impl<S> Own<S> {
    fn made(&mut self) -> Option<&mut S> {
        match self {
            Own::Made(m) => Some(&mut m.state),
            Own::Unmade(_) => None,
        }
    }
}

/// What zlib-rs' compressor holds at a `2^bits` window and memLevel 8: the
/// window twice over and its chain (4 bytes per window byte), a 64 Ki-entry
/// hash table (128 KiB), the pending and symbol buffers (112 KiB) and its
/// state (about 6 KiB).
pub(crate) fn deflate_state(bits: u8) -> usize {
    (4 << bits) + (246 << 10)
}

impl<S> Kept<S> {
    fn new(policy: DeflatePolicy, no_takeover: bool) -> Self {
        match policy {
            _ if no_takeover => Kept::Nothing,
            DeflatePolicy::Takeover => Kept::Own(Own::Unmade(BudgetAccount::default())),
            _ => Kept::Window(None),
        }
    }

    /// The window's bytes, when they are kept apart from zlib's state.
    fn window(&self) -> Option<&[u8]> {
        match self {
            Kept::Window(Some(w)) => Some(w),
            _ => None,
        }
    }
}

/// Appends `data` to a `window`, keeping its last `size` bytes. Its memory
/// grows with what was sent, by doubling, never past `size`.
#[allow(clippy::box_collection)]
fn remember(window: &mut Option<Box<Vec<u8>>>, size: usize, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let w = window.get_or_insert_with(Box::default);
    let data = &data[data.len().saturating_sub(size)..];
    let over = (w.len() + data.len()).saturating_sub(size);
    w.drain(..over);
    let want = w.len() + data.len();
    if want > w.capacity() {
        let target = want.max(w.capacity() * 2).min(size);
        w.reserve_exact(target - w.len());
    }
    w.extend_from_slice(data);
}

/// Compresses `payload` into `out` as one message ending in a sync flush,
/// without the trailing `00 00 FF FF`.
fn deflate_message(c: &mut Compress, payload: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
    // Compressible data usually shrinks well below half; grow if not.
    out.reserve(payload.len() / 2 + 64);
    let mut input = payload;
    loop {
        if out.len() == out.capacity() {
            out.reserve(out.capacity().max(1024));
        }
        let before = c.total_in();
        c.compress_vec(input, out, FlushCompress::Sync)
            .map_err(|e| Error::Compression(e.to_string()))?;
        let consumed = (c.total_in() - before) as usize;
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
    Ok(())
}

/// Compresses the messages one side sends.
#[derive(Debug)]
pub struct Deflater {
    /// zlib's state (about 330 KiB at the default window), the window's
    /// bytes, or nothing, as the policy says.
    kept: Kept<Compress>,
    /// A `u32` (larger thresholds saturate: no message that large is
    /// compressed anyway) keeps an idle shared-policy connection's
    /// compressor at 24 bytes.
    threshold: u32,
    level: u8,
    /// The window zlib compresses with (9–15; see [`zlib_window_bits`]).
    zlib_bits: u8,
    /// The window must restart before the next message (see
    /// [`sent_elsewhere`](Self::sent_elsewhere)).
    stale: bool,
}

impl Deflater {
    /// A compressor at `level` (0–9) with a window of `2^window_bits` bytes
    /// (8–15) and zlib's own state for context takeover;
    /// `reset_after_message` drops the context after each message (no
    /// context takeover); messages shorter than `threshold` bytes are not
    /// compressed.
    #[cfg(test)]
    pub(crate) fn new(
        level: u32,
        window_bits: u8,
        reset_after_message: bool,
        threshold: usize,
    ) -> Self {
        Self::under(
            DeflatePolicy::Takeover,
            level,
            window_bits,
            reset_after_message,
            threshold,
        )
    }

    /// As [`new`](Self::new), keeping memory as `policy` says.
    pub(crate) fn under(
        policy: DeflatePolicy,
        level: u32,
        window_bits: u8,
        reset_after_message: bool,
        threshold: usize,
    ) -> Self {
        Deflater {
            kept: Kept::new(policy, reset_after_message),
            threshold: u32::try_from(threshold).unwrap_or(u32::MAX),
            level: level.min(9) as u8,
            zlib_bits: zlib_window_bits(window_bits),
            stale: false,
        }
    }

    /// What a message compressed for this connection alone must agree on
    /// to be shared with others: the window (a peer limited to a smaller
    /// one could not read it). The level only changes the size, and the
    /// context rule only what this compressor does afterwards.
    pub(crate) fn shared_window(&self) -> u8 {
        self.zlib_bits
    }

    /// Compresses `payload` as a message of its own, from an empty window,
    /// with this connection's window and level: bytes any connection with
    /// the same window can send. The state is lent by the thread's pool.
    pub(crate) fn compress_alone(&self, payload: &[u8]) -> Result<Vec<u8>, Error> {
        let (bits, level) = (self.zlib_bits, u32::from(self.level));
        let mut c = lend_compress(bits, level);
        let mut out = Vec::new();
        deflate_message(&mut c, payload, &mut out)?;
        give_compress(bits, level, c);
        observe::tell(Through::Compressed {
            plain: payload.len(),
            compressed: out.len(),
        });
        Ok(out)
    }

    /// Accounts for a message the peer inflated that this compressor did
    /// not produce (a shared prepared message, `payload`). With context
    /// takeover the peer's window now ends with `payload`: a kept window
    /// takes it in too; zlib's own state cannot, so it starts over from an
    /// empty window, which every peer reads correctly. That is done when
    /// the compressor is next used: restarting costs about as much as
    /// compressing a kilobyte (zlib clears its hash table), which a
    /// broadcast to many connections should not pay per connection and
    /// per message.
    pub(crate) fn sent_elsewhere(&mut self, payload: &[u8]) {
        match &mut self.kept {
            Kept::Own(own) => self.stale = matches!(own, Own::Made(_)),
            Kept::Window(w) => remember(w, 1 << self.zlib_bits, payload),
            Kept::Nothing => {}
        }
    }

    /// Whether a data message of `len` bytes goes out compressed.
    pub(crate) fn wants(&self, len: usize) -> bool {
        len >= self.threshold as usize
    }

    /// Charges zlib's own state, when it is made, to `budget`; see
    /// [`compress`](Self::compress).
    pub(crate) fn count_in(&mut self, budget: &crate::budget::MemoryBudget) {
        if let Kept::Own(Own::Unmade(account)) = &mut self.kept {
            *account = BudgetAccount::new(Some(budget.clone()));
        }
    }

    /// Compresses one whole message and hands the result, without the
    /// trailing `00 00 FF FF`, to `write`. `Ok(None)`: not compressed, and
    /// `write` not called, because zlib's own state is yet to be made and
    /// the memory budget has no room for it now; the message goes out
    /// uncompressed, as RFC 7692 allows, and the next one asks again.
    pub(crate) fn compress<R>(
        &mut self,
        payload: &[u8],
        write: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, Error> {
        let (bits, level) = (self.zlib_bits, u32::from(self.level));
        if let Kept::Own(own) = &mut self.kept {
            if let Own::Unmade(account) = own {
                if account.is_on()
                    && account.try_set(Held::Compression, deflate_state(bits)) != Grant::Granted
                {
                    return Ok(None);
                }
                let account = std::mem::take(account);
                let state = Compress::new_with_window_bits(Compression::new(level), false, bits);
                *own = Own::Made(Box::new(Made {
                    state,
                    _account: account,
                }));
            }
        }
        let mut out = lend_scratch();
        let done = match &mut self.kept {
            Kept::Own(own) => {
                let Some(c) = own.made() else {
                    return Ok(None);
                };
                if std::mem::take(&mut self.stale) {
                    c.reset();
                }
                deflate_message(c, payload, &mut out)
            }
            Kept::Nothing => {
                let mut c = lend_compress(bits, level);
                let r = deflate_message(&mut c, payload, &mut out);
                give_compress(bits, level, c);
                r
            }
            Kept::Window(window) => {
                let mut c = lend_compress(bits, level);
                let primed = match window.as_deref() {
                    Some(w) => c
                        .set_dictionary(w)
                        .map(drop)
                        .map_err(|e| Error::Compression(e.to_string())),
                    None => Ok(()),
                };
                let r = primed.and_then(|()| deflate_message(&mut c, payload, &mut out));
                give_compress(bits, level, c);
                if r.is_ok() {
                    remember(window, 1 << bits, payload);
                }
                r
            }
        };
        if done.is_ok() {
            observe::tell(Through::Compressed {
                plain: payload.len(),
                compressed: out.len(),
            });
        }
        let r = done.map(|()| Some(write(&out)));
        give_scratch(out);
        r
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
    /// Compressed bytes fed, the tail's among them.
    fed: usize,
    /// zlib's state lent for this message, unless the connection has its own.
    lent: Option<Decompress>,
}

/// Decompresses the messages one side receives.
#[derive(Debug)]
pub struct Inflater {
    /// zlib's state (about 40 KiB at a 15-bit window), the window's bytes,
    /// or nothing, as the policy says.
    kept: Kept<Decompress>,
    msg: Option<Box<Inflating>>,
    max_message_size: usize,
    /// The window the peer compresses with, for zlib (see
    /// [`zlib_window_bits`]).
    zlib_bits: u8,
}

impl Inflater {
    /// A decompressor for a peer whose window is at most `2^window_bits`
    /// bytes, with zlib's own state for context takeover;
    /// `reset_after_message` when the peer may not use context takeover;
    /// messages are refused past `max_message_size` bytes inflated.
    #[cfg(test)]
    pub(crate) fn new(window_bits: u8, reset_after_message: bool, max_message_size: usize) -> Self {
        Self::under(
            DeflatePolicy::Takeover,
            window_bits,
            reset_after_message,
            max_message_size,
        )
    }

    /// As [`new`](Self::new), keeping memory as `policy` says.
    pub(crate) fn under(
        policy: DeflatePolicy,
        window_bits: u8,
        reset_after_message: bool,
        max_message_size: usize,
    ) -> Self {
        Inflater {
            kept: Kept::new(policy, reset_after_message),
            msg: None,
            max_message_size,
            zlib_bits: zlib_window_bits(window_bits),
        }
    }

    /// Whether a compressed message has started and not yet ended.
    pub(crate) fn in_message(&self) -> bool {
        self.msg.is_some()
    }

    /// The decompression memory held now, as the budget counts it
    /// ([`Held::Compression`]).
    pub(crate) fn holds(&self) -> usize {
        let own = matches!(self.kept, Kept::Own(Own::Made(_)));
        let lent = self.msg.as_ref().is_some_and(|m| m.lent.is_some());
        let window = match &self.kept {
            Kept::Window(Some(w)) => w.capacity(),
            _ => 0,
        };
        (usize::from(own) + usize::from(lent)) * INFLATE_STATE + window
    }

    /// Starts a compressed message (its first frame had RSV1 set).
    pub(crate) fn begin(&mut self, text: bool) {
        self.msg = Some(Box::new(Inflating {
            text,
            out: Vec::new(),
            full: false,
            ended: false,
            tail_fed: 0,
            fed: 0,
            lent: None,
        }));
    }

    /// Drops the message being inflated, if any (after an error).
    pub(crate) fn abort(&mut self) {
        if let Some(lent) = self.msg.take().and_then(|m| m.lent) {
            give_decompress(lent);
        }
    }

    /// Makes sure the message in progress has zlib's state, asking
    /// `account` for its memory first: `Ok(Some(wanted))` says wait.
    fn ready(&mut self, account: &mut BudgetAccount) -> Result<Option<usize>, Error> {
        let Some(m) = self.msg.as_deref_mut() else {
            return Ok(None);
        };
        let needed = match &self.kept {
            Kept::Own(Own::Unmade(_)) => true,
            Kept::Own(Own::Made(_)) => false,
            Kept::Nothing | Kept::Window(_) => m.lent.is_none(),
        };
        if !needed {
            return Ok(None);
        }
        if account.is_on() {
            let total = account.held(Held::Compression) + INFLATE_STATE;
            match account.try_set(Held::Compression, total) {
                Grant::Granted => {}
                Grant::Wait { wanted } => return Ok(Some(wanted)),
                Grant::Never { charge, limit } => {
                    return Err(Error::OverBudget {
                        size: charge as u64,
                        budget: limit,
                    });
                }
            }
        }
        match &mut self.kept {
            Kept::Own(own) => {
                // Charged to the decoder's account above, not its own.
                *own = Own::Made(Box::new(Made {
                    state: Decompress::new_with_window_bits(false, self.zlib_bits),
                    _account: BudgetAccount::default(),
                }));
            }
            kept => {
                let mut d = lend_decompress();
                if let Some(w) = kept.window() {
                    d.set_dictionary(w)
                        .map_err(|_| ProtocolError::InvalidCompressedData)?;
                }
                m.lent = Some(d);
            }
        }
        Ok(None)
    }

    /// Inflates the next compressed bytes of the message, checking the size
    /// limit and, for text, UTF-8 as output appears. Memory (zlib's state,
    /// then output) is asked of `account` before it is reserved: when the
    /// budget is exhausted, inflating stops with [`Fed::wait`] set and the
    /// input not consumed left for the next call. `beside`: what the read
    /// buffer still needs to hold the frame being inflated whole, which
    /// the output leaves to it.
    pub(crate) fn feed(
        &mut self,
        input: &[u8],
        utf8: &mut Utf8Validator,
        account: &mut BudgetAccount,
        beside: usize,
    ) -> Result<Fed, Error> {
        let max = self.max_message_size;
        let total = input.len();
        if let Some(wanted) = self.ready(account)? {
            return Ok(Fed {
                consumed: 0,
                wait: Some(wanted),
            });
        }
        let mut input = input;
        let Some(m) = self.msg.as_deref_mut() else {
            return Ok(Fed {
                consumed: total,
                wait: None,
            });
        };
        let decompress = match (&mut self.kept, &mut m.lent) {
            (Kept::Own(Own::Made(m)), _) => &mut m.state,
            (_, Some(d)) => d,
            // `ready` made one or the other.
            _ => return Err(ProtocolError::InvalidCompressedData.into()),
        };
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
                    match grow(account, m.out.len(), step, beside)? {
                        Ok(granted) => step = granted,
                        Err(wanted) => {
                            m.fed += total - input.len();
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
        m.fed += total;
        Ok(Fed {
            consumed: total,
            wait: None,
        })
    }

    /// Gives back the output's room beyond what it holds (it grows by
    /// doubling), for a frame of the same message that needs it; whether
    /// there was any.
    pub(crate) fn trim(&mut self, account: &mut BudgetAccount) -> bool {
        let Some(m) = self.msg.as_deref_mut() else {
            return false;
        };
        if m.out.capacity() == m.out.len() {
            return false;
        }
        m.out.shrink_to_fit();
        account.set(Held::Inflated, m.out.capacity());
        true
    }

    /// Ends the message: inflates the stripped tail, checks that text ended
    /// on a whole code point, and keeps or resets the context as
    /// negotiated. `Ok(Err(wanted))` when the memory budget is exhausted:
    /// call again once budget is given back.
    pub(crate) fn finish(
        &mut self,
        utf8: &mut Utf8Validator,
        account: &mut BudgetAccount,
    ) -> Result<Result<Message, usize>, Error> {
        let done = self.msg.as_ref().map_or(0, |m| m.tail_fed);
        let fed = self.feed(&TAIL[done..], utf8, account, 0)?;
        if let Some(m) = self.msg.as_mut() {
            m.tail_fed += fed.consumed;
        }
        if let Some(wanted) = fed.wait {
            return Ok(Err(wanted));
        }
        let Some(m) = self.msg.take() else {
            return Err(ProtocolError::InvalidCompressedData.into());
        };
        let Inflating {
            text,
            out,
            ended,
            lent,
            fed,
            tail_fed,
            ..
        } = *m;
        observe::tell(Through::Inflated {
            compressed: fed - tail_fed,
            plain: out.len(),
        });
        let size = 1 << self.zlib_bits;
        match &mut self.kept {
            Kept::Own(Own::Made(m)) if ended => m.state.reset(false),
            Kept::Window(w) if ended => *w = None,
            Kept::Window(w) => remember(w, size, &out),
            _ => {}
        }
        if let Some(d) = lent {
            give_decompress(d);
        }
        if account.is_on() {
            account.set(Held::Compression, self.holds());
        }
        // The output is the message's now, no longer the connection's.
        account.release(Held::Inflated);
        let payload = Bytes::from(out);
        if text {
            utf8.finish()?;
            Ok(Ok(Message::Text(Utf8Bytes::from_validated(payload))))
        } else {
            Ok(Ok(Message::Binary(payload)))
        }
    }
}

/// Asks `account` for `step` more bytes of output beyond `len` (by the
/// budget's growth rules, [`BudgetAccount::try_grow`]: the output's final
/// size is unknown), leaving `beside` for the frame being read.
/// `Ok(Ok(step))` is the step granted, `Ok(Err(wanted))`
/// says wait, `Err` refuses a message that alone would exceed the budget.
fn grow(
    account: &mut BudgetAccount,
    len: usize,
    step: usize,
    beside: usize,
) -> Result<Result<usize, usize>, Error> {
    // Growing may move the output: the old buffer lives on while it is
    // copied.
    let growth = Growth {
        old: len,
        len,
        step,
        min_step: MIN_BUDGET_STEP,
        beside,
    };
    match account.try_grow(Held::Inflated, growth) {
        Ok(granted) => Ok(Ok(granted)),
        Err(Grant::Wait { wanted }) => Ok(Err(wanted)),
        Err(Grant::Never { charge, limit }) => Err(Error::OverBudget {
            size: charge as u64,
            budget: limit,
        }),
        // (Never the answer of a refusal.)
        Err(Grant::Granted) => Ok(Ok(step)),
    }
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
