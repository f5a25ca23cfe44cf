//! One connection's receiving side, for every engine: the decoder, the read
//! buffer and every rule about its memory (how much room to make before a
//! read, what to keep while the connection waits, the memory budget's
//! charge). An engine asks where to read ([`Inbox::plan`]), reads there,
//! says what came, and takes messages out ([`Inbox::decode`]); what the
//! core must hear of it (control frames, errors, the memory budget's
//! answers) it passes on to the [`Connection`].
//!
//! It is kept apart from the [`Driver`](crate::driver::Driver) (the core
//! and the sending side) so that a receiving task can decode while another
//! task sends: only what decoding reports needs the core.
//!
//! The rules: an idle connection holds no buffer; a read into an empty
//! buffer goes to the engine's scratch memory first (the stack, or a buffer
//! all of an engine's connections share) and only what arrived is kept, in
//! the engine's arena when small (see [`ReadMemory`]); once such reads come
//! full, input goes to a spare until the connection waits, and a read into
//! an empty spare keeps it only if it filled a quarter of it; a frame being
//! received gets room in proportion to what has arrived (never to what its
//! header announced, [`growth`]); and whenever the connection waits the
//! buffer holds at most four times its bytes ([`keeps`]). Under a memory
//! budget the buffer's capacity is recorded in the connection's account
//! after every change, and growth is asked for before anything is
//! allocated.
//!
//! [`Connection`]: crate::conn::Connection

use std::task::Waker;

use bytes::buf::Limit;
use bytes::{BufMut, BytesMut};

use crate::budget::{Grant, Growth, Held};
use crate::buffer::{READ_CHUNK, growth, keeps};
use crate::decoder::MessageDecoder;
use crate::error::Error;
use crate::message::Message;

/// Memory an engine lends its connections' receiving sides. The defaults
/// lend nothing: every buffer is a connection's own.
pub trait ReadMemory {
    /// A buffer for a burst of input: reads that fill the engine's scratch
    /// go on in one of these until the connection waits.
    fn take_spare(&mut self) -> BytesMut {
        BytesMut::with_capacity(4 * READ_CHUNK)
    }

    /// Memory no message shares, emptied: keep it for the next burst, or
    /// free it.
    fn give_spare(&mut self, buf: BytesMut) {
        drop(buf);
    }

    /// The size of a spare: a buffer up to this size is given back as one
    /// when it is outgrown, rather than reallocated away.
    fn spare_len(&self) -> usize {
        0
    }

    /// The most one read into the engine's scratch memory takes (its
    /// stack buffer, or the buffer its connections share): under a memory
    /// budget, what [`Inbox::plan`] sets aside before such a read.
    fn scratch_len(&self) -> usize {
        usize::MAX
    }

    /// `bytes` copied into memory shared with other small reads (an arena),
    /// if the engine has room for them there: a small message then costs a
    /// reference count rather than an allocation of its own.
    fn arena_copy(&mut self, bytes: &[u8]) -> Option<BytesMut> {
        let _ = bytes;
        None
    }
}

/// Memory of no engine's: every buffer is the connection's own.
#[derive(Debug, Default, Clone, Copy)]
pub struct OwnMemory;

impl ReadMemory for OwnMemory {}

/// Where the next read goes, from [`Inbox::plan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Nothing is buffered: read into the engine's scratch memory, at most
    /// `limit` bytes (`usize::MAX` without a memory budget: as much as the
    /// scratch holds), then pass what came to [`Inbox::received`], or
    /// decode it where it
    /// is with [`Inbox::decode_in`] and keep the rest with
    /// [`Inbox::keep_rest`]. Under a memory budget `limit` bytes are set
    /// aside for the read (whatever of it the connection keeps must fit):
    /// if nothing is read, [`Inbox::scratch_unused`] gives them back.
    Scratch {
        /// The most worth reading.
        limit: usize,
    },
    /// Read into [`Inbox::target`], then report with [`Inbox::read_done`].
    Own,
    /// The memory budget has no room for the next read: tell the core
    /// ([`Connection::handle_grant`](crate::conn::Connection::handle_grant))
    /// and read nothing until it is answered.
    Refused(Grant),
}

/// The receiving side of one connection.
///
/// ```
/// use wavesock_proto::bytes::BytesMut;
/// use wavesock_proto::decoder::MessageDecoder;
/// use wavesock_proto::encoder::FrameEncoder;
/// use wavesock_proto::inbox::{Inbox, OwnMemory, Plan};
/// use wavesock_proto::{Limits, Message, Role};
///
/// let mut wire = BytesMut::new();
/// FrameEncoder::new(Role::Client).encode_message(&Message::text("hi"), &mut wire)?;
///
/// let decoder = MessageDecoder::new(Role::Server, Limits::default());
/// let mut inbox = Inbox::new(decoder, BytesMut::new());
/// let mut memory = OwnMemory;
/// // Nothing buffered: the engine reads into memory of its own, and the
/// // inbox keeps what came.
/// let Plan::Scratch { limit } = inbox.plan(&mut memory) else { panic!() };
/// assert!(limit >= wire.len());
/// inbox.received(&wire, false, &mut memory);
/// assert_eq!(inbox.decode()?, Some(Message::text("hi")));
/// assert_eq!(inbox.decode()?, None);
/// assert_eq!(inbox.held_back(), None, "for want of input, not of memory");
/// // Waiting for more: an idle connection holds no buffer.
/// inbox.wait(&mut memory);
/// assert!(inbox.is_at_rest());
/// # Ok::<(), wavesock_proto::Error>(())
/// ```
#[derive(Debug)]
pub struct Inbox {
    decoder: MessageDecoder,
    buf: BytesMut,
    /// Messages handed out may share the buffer's memory, so it must not go
    /// back to the engine as a spare.
    shared: bool,
    /// The buffer is a view into the engine's arena: it must not outlive
    /// the read that made it, or a frame left unfinished would keep a whole
    /// chunk alive.
    arena: bool,
    /// The last read into an empty buffer filled the engine's scratch:
    /// input comes in bulk, so the next one goes straight to a spare.
    bulk: bool,
    /// The read being made started with an empty buffer.
    fresh: bool,
}

impl Inbox {
    /// `decoder` for this connection, and `initial`, bytes already read
    /// past the handshake.
    pub fn new(decoder: MessageDecoder, initial: BytesMut) -> Self {
        // An empty view would keep the memory it came from alive.
        let buf = if initial.capacity() == 0 {
            BytesMut::new()
        } else {
            initial
        };
        Inbox {
            decoder,
            buf,
            shared: false,
            arena: false,
            bulk: false,
            fresh: false,
        }
    }

    /// The decoder (to set an inflater once compression is negotiated, or
    /// read its account).
    #[inline]
    pub fn decoder(&self) -> &MessageDecoder {
        &self.decoder
    }

    /// The decoder, to change.
    #[inline]
    pub fn decoder_mut(&mut self) -> &mut MessageDecoder {
        &mut self.decoder
    }

    /// The bytes received and not yet decoded.
    #[inline]
    pub fn buffered(&self) -> &BytesMut {
        &self.buf
    }

    /// Runs `f` on the buffer: an engine that reads the upgrade request
    /// into it, and takes the request off its front, leaves whatever
    /// followed the request here to be decoded.
    pub fn with_buffered<T>(&mut self, f: impl FnOnce(&mut BytesMut) -> T) -> T {
        let out = f(&mut self.buf);
        if self.buf.capacity() == 0 {
            // A view left at the end of its allocation would keep all of
            // it alive (see `decode`).
            self.drop_buf();
        }
        self.sync();
        out
    }

    /// Whether nothing is held for the connection: no bytes, no memory, and
    /// the decoder between messages ([`MessageDecoder::is_at_rest`]). An
    /// engine may then lend this inbox to another connection of the same
    /// limits.
    #[inline]
    pub fn is_at_rest(&self) -> bool {
        self.buf.capacity() == 0 && self.decoder.is_at_rest()
    }

    /// Takes out the decoder's inflater when nothing else of the
    /// connection is held, so that the inbox is then
    /// [at rest](Self::is_at_rest): see
    /// [`MessageDecoder::take_idle_inflater`](crate::decoder::MessageDecoder::take_idle_inflater).
    #[inline]
    pub fn park_inflater(&mut self) -> Option<Box<crate::deflate::Inflater>> {
        if self.buf.capacity() == 0 {
            self.decoder.take_idle_inflater()
        } else {
            None
        }
    }

    /// Whether the connection reads under a memory budget.
    #[inline]
    pub fn is_budgeted(&self) -> bool {
        self.decoder.account().is_on()
    }

    /// Whether the connection holds memory budget while it waits for input
    /// (part of a message): the core's budget wait should run
    /// ([`Connection::handle_budget_wait`](crate::conn::Connection::handle_budget_wait)),
    /// so a peer that stops halfway does not hold it for ever.
    #[inline]
    pub fn holds_budget(&self) -> bool {
        self.decoder.account().charged() > 0
    }

    /// Where the next read goes. Under a memory budget, room for it is
    /// asked for first.
    #[inline]
    pub fn plan(&mut self, mem: &mut impl ReadMemory) -> Plan {
        if self.buf.capacity() == 0 && !self.bulk {
            // No memory at all, the usual case between small messages (an
            // empty buffer of no capacity is never a view that shares
            // memory: see `decode`): nothing to drop or reclaim.
            return self.scratch(mem);
        }
        self.plan_with(mem)
    }

    /// A read into the engine's scratch memory: as much as it holds
    /// without a budget (what comes past the frame being received is
    /// decoded from the same memory). Under a budget, room for it is set
    /// aside first: the bytes a connection keeps of such a read (an
    /// unfinished frame) are already in hand when it is known how many
    /// they are, so they must fit in what was set aside, never push the
    /// budget past its limit. Less when the budget has less room; none at
    /// all, and the read waits.
    #[inline]
    fn scratch(&mut self, mem: &mut impl ReadMemory) -> Plan {
        if !self.decoder.account().is_on() {
            return Plan::Scratch { limit: usize::MAX };
        }
        self.scratch_under_budget(mem)
    }

    /// [`scratch`](Self::scratch) under a memory budget: apart, so that
    /// the echo's read without one stays inlined where it is planned.
    #[inline(never)]
    fn scratch_under_budget(&mut self, mem: &mut impl ReadMemory) -> Plan {
        // A read that ended at a frame's header: a frame larger than the
        // whole budget is refused now, as `reserve_budgeted` refuses it
        // when part of it came with the header (else, with no room left
        // beside others, it would wait for room it can never use).
        if let Some(never) = self.frame_never_fits() {
            return Plan::Refused(never);
        }
        let frame_left = self.decoder.payload_remaining(0);
        let limit = frame_left.map_or(usize::MAX, |want| want.saturating_add(READ_CHUNK));
        self.scratch_budgeted(limit.min(mem.scratch_len()))
    }

    /// The refusal for a frame that must lie whole in the buffer (not
    /// streamed, or compressed, or control) and is larger than the whole
    /// budget can ever take; `None` for any other.
    /// The message's own spare room (its buffers grow by doubling) is
    /// given back first: a frame refused for room the message holds and
    /// does not use would be refused for a message that fits.
    #[inline]
    fn frame_never_fits(&mut self) -> Option<Grant> {
        let whole = self.decoder.frame_held_whole()?;
        let never = self.decoder.account().never_fits(Held::ReadBuffer, whole);
        if never.is_some() && self.decoder.trim_spare() {
            return self.decoder.account().never_fits(Held::ReadBuffer, whole);
        }
        never
    }

    #[cold]
    fn scratch_budgeted(&mut self, limit: usize) -> Plan {
        /// A `Vec<u8>`'s smallest allocation: what a buffer that keeps the
        /// rest of a read holds at least.
        const SMALLEST_KEEP: usize = 8;
        let account = self.decoder.account_mut();
        // Within what is left of the allowance when that makes a read
        // worth making: small messages then never touch the budget's
        // shared counter (the allowance's promise); a frame larger than
        // it goes on in the connection's own buffer, budgeted.
        let free = account.allowance_left();
        let limit = if free >= limit.min(READ_CHUNK) {
            limit.min(free)
        } else {
            limit
        };
        if account.try_set(Held::ReadBuffer, limit) == Grant::Granted {
            return Plan::Scratch { limit };
        }
        // What the allowance and the budget have left, if anything: less
        // than the smallest buffer a kept read allocates counts as none
        // (keeping 5 bytes of a header takes 8, past what was set aside).
        let room = account.room().min(limit);
        if room < SMALLEST_KEEP {
            return Plan::Refused(Grant::Wait {
                wanted: limit.min(READ_CHUNK),
            });
        }
        match account.try_set(Held::ReadBuffer, room) {
            Grant::Granted => Plan::Scratch { limit: room },
            refused => Plan::Refused(refused),
        }
    }

    fn plan_with(&mut self, mem: &mut impl ReadMemory) -> Plan {
        let frame_left = self.decoder.payload_remaining(self.buf.len());
        self.fresh = self.buf.is_empty();
        if self.fresh {
            // (No memory at all, the usual case after a small message, has
            // nothing to reclaim: not worth the call.)
            if self.buf.capacity() == 0 || !self.buf.try_reclaim(READ_CHUNK) {
                if !self.bulk {
                    // Memory a handed-out message may still use: drop our
                    // share (an empty view of no capacity holds one too).
                    self.drop_buf();
                    self.sync();
                    return self.scratch(mem);
                }
                // Drops our share of the last burst; messages handed out
                // keep theirs.
                self.buf = mem.take_spare();
                self.shared = false;
                self.arena = false;
            }
            self.settle(mem);
            if self.buf.capacity() == 0 {
                // No spare, or the budget had no room for it: no memory of
                // our own to read into (a read would allocate some past
                // the budget), so the scratch memory's rules apply: room
                // set aside, or a wait.
                return self.scratch(mem);
            }
        } else if self.decoder.account().is_on() {
            if let Err(refused) = self.reserve_budgeted(frame_left, mem) {
                // Refused for good: no use reading into the room left.
                if matches!(refused, Grant::Never { .. }) || self.buf.capacity() == self.buf.len() {
                    return Plan::Refused(refused);
                }
            }
        } else {
            self.reserve(frame_left, mem);
        }
        Plan::Own
    }

    /// Where a [`Plan::Own`] read goes: the buffer, limited to what is
    /// worth reading (mid-payload, little past the frame's end: whatever
    /// follows it is moved to the front when the next frame needs room).
    #[inline]
    pub fn target(&mut self) -> Limit<&mut BytesMut> {
        let limit = self
            .decoder
            .payload_remaining(self.buf.len())
            .map_or(usize::MAX, |want| want.saturating_add(READ_CHUNK));
        (&mut self.buf).limit(limit)
    }

    /// A [`Plan::Scratch`] read brought nothing (it waits, or the
    /// transport ended or failed): gives back what was set aside for it
    /// under a budget.
    #[inline]
    pub fn scratch_unused(&mut self) {
        if self.decoder.account().is_on() {
            self.sync();
        }
    }

    /// A [`Plan::Own`] read ended: `Some(n)` bytes came (`n > 0`), or
    /// `None` (it waits, or the transport ended or failed).
    pub fn read_done(&mut self, got: Option<usize>, mem: &mut impl ReadMemory) {
        match got {
            Some(n) if n > 0 => {
                if self.fresh && n < self.buf.capacity() / 4 {
                    self.bulk = false;
                    self.fit(mem);
                }
            }
            // Waiting, at EOF or failed: keep only what is in proportion, so
            // a peer that sends a frame slowly (or never finishes one) costs
            // what it sent, not what it announced.
            _ => self.fit(mem),
        }
        self.sync();
    }

    /// A [`Plan::Scratch`] read brought `got`; `filled`: it filled the
    /// scratch memory (input comes in bulk). The bytes are kept in memory
    /// of their size (the engine's arena when small), or in a spare when
    /// they came in bulk.
    pub fn received(&mut self, got: &[u8], filled: bool, mem: &mut impl ReadMemory) {
        debug_assert!(self.buf.is_empty());
        self.bulk = filled;
        if filled {
            // More is likely waiting: it comes into a spare, which goes back
            // when the connection waits (see `wait`), so that a burst is
            // read in a few large reads rather than grown a scratch at a
            // time.
            self.buf = mem.take_spare();
            self.buf.extend_from_slice(got);
            self.settle(mem);
        } else if !got.is_empty() {
            let view = mem.arena_copy(got);
            self.arena = view.is_some();
            self.shared = self.arena;
            self.buf = view.unwrap_or_else(|| BytesMut::from(got));
        }
        self.sync();
    }

    /// Before [`received`](Self::received), for a read into the engine's
    /// memory (`got`) that is exactly one whole one-frame data message, the
    /// usual read under request and reply: that message, decoded where it
    /// lies and only its payload copied ([`ReadMemory::arena_copy`]), or
    /// the rule it breaks; the buffer is not touched. `None`: not such a
    /// read (or under a memory budget, whose charges the buffer's way
    /// keeps); nothing was done, hand it to `received`.
    #[inline]
    pub fn take_whole(
        &mut self,
        got: &mut [u8],
        mem: &mut impl ReadMemory,
    ) -> Option<Result<Message, Error>> {
        if self.buf.capacity() != 0 || self.decoder.account().is_on() {
            return None;
        }
        let found = self.decoder.borrowable(got)?;
        if found.len() != got.len() {
            return None;
        }
        self.bulk = false;
        let taken = self.decoder.take_borrowable(found, got);
        Some(taken.map(|frame| {
            frame.owned(got, |payload| {
                mem.arena_copy(payload)
                    .unwrap_or_else(|| BytesMut::from(payload))
            })
        }))
    }

    /// Decodes the next message from the buffer. A message goes to the
    /// core too when its [`State::hears_message`] says so
    /// ([`Connection::handle_message`]), an error always
    /// ([`Connection::handle_error`]). `Ok(None)`: nothing whole yet, for
    /// want of input or, when [`held_back`](Self::held_back) says so, of
    /// memory budget.
    ///
    /// [`State::hears_message`]: crate::conn::State::hears_message
    /// [`Connection::handle_message`]: crate::conn::Connection::handle_message
    /// [`Connection::handle_error`]: crate::conn::Connection::handle_error
    #[inline]
    pub fn decode(&mut self) -> Result<Option<Message>, Error> {
        let decoded = self.decoder.decode(&mut self.buf);
        if self.buf.capacity() == 0 {
            // Emptied to its allocation's last byte (the message, or a
            // header that ended the read, took it): this empty view can hold
            // nothing more, and keeping it would keep the whole allocation
            // alive (and `plan` takes an empty buffer of no capacity for no
            // memory at all).
            self.drop_buf();
        } else if let Ok(Some(_)) = decoded {
            // A message split off the buffer may share its memory.
            self.shared = true;
        }
        self.sync();
        decoded
    }

    /// [`decode`](Self::decode) from `scratch`, memory of the engine's
    /// that the message may borrow from but the connection does not keep
    /// (a read buffer all of an engine's connections share). Once done
    /// with it, [`keep_rest`](Self::keep_rest).
    #[inline]
    pub fn decode_in(&mut self, scratch: &mut BytesMut) -> Result<Option<Message>, Error> {
        self.decoder.decode(scratch)
    }

    /// [`MessageDecoder::decode_borrowed`] on `scratch`, the engine's read
    /// buffer: a whole single-frame data message decoded in place, or
    /// `Ok(None)` for [`decode_in`](Self::decode_in) to take (after the
    /// bytes used so far are advanced past).
    #[inline]
    pub fn decode_borrowed<'a>(
        &mut self,
        scratch: &'a mut [u8],
    ) -> Result<Option<crate::decoder::Borrowed<'a>>, Error> {
        self.decoder.decode_borrowed(scratch)
    }

    /// After decoding from `scratch`: what is left there (an unfinished
    /// frame) becomes the connection's own, and `scratch` is emptied for
    /// the next connection. `open`: the connection still takes input; if
    /// not, what is left is dropped.
    #[inline]
    pub fn keep_rest(&mut self, scratch: &mut BytesMut, open: bool) {
        if open && !scratch.is_empty() {
            self.keep(scratch);
        } else {
            // Gives back what `plan` set aside for the read.
            self.sync();
        }
        scratch.clear();
        self.decoder.detach();
    }

    fn keep(&mut self, rest: &[u8]) {
        self.buf.extend_from_slice(rest);
        self.sync();
    }

    /// After [`decode`](Self::decode) gave `Ok(None)`: the memory budget
    /// holds decoding back (assembling or inflating the message needs more
    /// than it has). Tell the core
    /// ([`Connection::handle_grant`](crate::conn::Connection::handle_grant))
    /// and, if it says to wait, [`wait_for_budget`](Self::wait_for_budget);
    /// read nothing meanwhile.
    #[inline]
    pub fn held_back(&self) -> Option<Grant> {
        self.decoder
            .budget_wait()
            .map(|wanted| Grant::Wait { wanted })
    }

    /// Registers `waker` to be woken once the memory budget has `wanted`
    /// bytes available (after the core said to wait for them); `true` when
    /// it has already: try again at once.
    pub fn wait_for_budget(&self, wanted: usize, waker: &Waker) -> bool {
        self.decoder
            .account()
            .budget()
            .is_some_and(|b| b.wait_for(wanted, waker))
    }

    /// The connection is about to wait (for input, or for the peer to take
    /// what it is sent): it keeps memory in proportion to the bytes it
    /// holds, none when it holds none.
    #[inline]
    pub fn wait(&mut self, mem: &mut impl ReadMemory) {
        if self.buf.capacity() == 0 {
            // Nothing held (see `decode`): the usual case.
            return;
        }
        self.fit(mem);
        self.sync();
    }

    /// Drops the bytes received and not decoded (input after the end, read
    /// only to see the transport close), keeping the memory.
    pub fn clear(&mut self) {
        self.buf.clear();
    }

    /// Drops everything: the message in progress, the bytes, the memory.
    /// For a connection that takes no more input.
    pub fn release(&mut self) {
        self.decoder.discard();
        self.drop_buf();
        self.decoder.account_mut().release(Held::ReadBuffer);
    }

    #[inline]
    fn drop_buf(&mut self) {
        self.buf = BytesMut::new();
        self.shared = false;
        self.arena = false;
    }

    /// Records the buffer's memory in the budget's account.
    #[inline]
    fn sync(&mut self) {
        let account = self.decoder.account_mut();
        if account.is_on() {
            account.set(Held::ReadBuffer, self.buf.capacity());
        }
    }

    /// Under a budget: records memory that came back without asking
    /// (reclaimed after messages sharing it were dropped, or a spare); if
    /// the budget has no room for it, keeps only a buffer the size of the
    /// bytes held.
    fn settle(&mut self, mem: &mut impl ReadMemory) {
        let cap = self.buf.capacity();
        let account = self.decoder.account_mut();
        if !account.is_on() || account.try_set(Held::ReadBuffer, cap) == Grant::Granted {
            return;
        }
        let exact = BytesMut::from(&self.buf[..]);
        let old = std::mem::replace(&mut self.buf, exact);
        if !std::mem::take(&mut self.shared) && old.capacity() <= mem.spare_len() {
            mem.give_spare(old);
        }
        self.arena = false;
        self.sync();
    }

    /// Keeps the memory in proportion to the bytes held.
    fn fit(&mut self, mem: &mut impl ReadMemory) {
        if std::mem::take(&mut self.arena) {
            // Waiting with part of a frame: keep those bytes in memory of
            // their own rather than the arena's chunk.
            self.buf = exact_copy(&self.buf);
            self.shared = false;
            return;
        }
        if keeps(self.buf.len(), self.buf.capacity()) {
            return;
        }
        let exact = exact_copy(&self.buf);
        let old = std::mem::replace(&mut self.buf, exact);
        if !std::mem::take(&mut self.shared) {
            mem.give_spare(old);
        }
    }

    /// Makes room for the next read of a frame that needs `frame_left`
    /// more bytes (`None`: its size is not known yet), by the growth rule.
    fn reserve(&mut self, frame_left: Option<usize>, mem: &mut impl ReadMemory) {
        let len = self.buf.len();
        let spare = self.buf.capacity() - len;
        let want = frame_left.unwrap_or(READ_CHUNK).max(1);
        if spare < want && self.buf.try_reclaim(want) {
            // The memory of messages already handed out and dropped holds the
            // whole frame: the few bytes buffered moved to its front.
            return;
        }
        let Some(additional) = growth(len, spare, frame_left) else {
            return;
        };
        if self.buf.capacity() <= mem.spare_len() {
            // Outgrowing a spare: move to a buffer of our own and give the
            // spare back, rather than reallocating it away, so the spares
            // stay put for the engine's life.
            self.grow_into(len + additional, mem);
        } else {
            self.buf.reserve(additional);
        }
    }

    /// [`reserve`](Self::reserve) under a memory budget: the same sizing,
    /// asked of the budget before anything is allocated, into a buffer of
    /// exactly the size granted; if the budget has less room, as much as it
    /// has by its rules (at least what the next read needs, and half what
    /// is held). `Err` when refused.
    fn reserve_budgeted(
        &mut self,
        frame_left: Option<usize>,
        mem: &mut impl ReadMemory,
    ) -> Result<(), Grant> {
        // Refused at once, whatever others hold now: growing towards it
        // chunk by chunk would wait for room beside them (a wait the
        // frame could never end), holding part of the budget meanwhile.
        if let Some(never) = self.frame_never_fits() {
            return Err(never);
        }
        let len = self.buf.len();
        let spare = self.buf.capacity() - len;
        let Some(additional) = growth(len, spare, frame_left) else {
            return Ok(());
        };
        let min_spare = frame_left.unwrap_or(READ_CHUNK).clamp(1, READ_CHUNK);
        // The old buffer lives on while its bytes are copied: asked for
        // beside the new one, by the budget's growth rules.
        let old_cap = self.buf.capacity();
        let additional = self.decoder.account_mut().try_grow(
            Held::ReadBuffer,
            Growth {
                old: old_cap,
                len,
                step: additional,
                min_step: min_spare,
                ..Growth::default()
            },
        )?;
        self.grow_into(len + additional, mem);
        self.sync();
        Ok(())
    }

    /// Moves the bytes to a new buffer of `cap`; the old one goes back as a
    /// spare unless a message may share it.
    fn grow_into(&mut self, cap: usize, mem: &mut impl ReadMemory) {
        let mut bigger = BytesMut::with_capacity(cap);
        bigger.extend_from_slice(&self.buf);
        let old = std::mem::replace(&mut self.buf, bigger);
        self.arena = false;
        if !std::mem::take(&mut self.shared) && old.capacity() <= mem.spare_len() {
            mem.give_spare(old);
        }
    }
}

/// `bytes` in memory of their own size (none when empty).
fn exact_copy(bytes: &[u8]) -> BytesMut {
    if bytes.is_empty() {
        BytesMut::new()
    } else {
        BytesMut::from(bytes)
    }
}

#[cfg(test)]
#[path = "inbox_tests.rs"]
mod tests;
