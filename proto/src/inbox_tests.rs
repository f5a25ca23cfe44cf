use super::*;
use crate::budget::MemoryBudget;
use crate::encoder::FrameEncoder;
use crate::limits::Limits;
use crate::role::Role;

const SPARE: usize = 96 << 10;
const ARENA_MAX: usize = 2 << 10;
const ARENA_CHUNK: usize = 8 << 10;
/// The engine's scratch memory in these tests (the Stream's stack read).
const SCRATCH: usize = 4 << 10;

/// An engine's memory as the Stream's: spares and an arena.
#[derive(Default)]
struct Pool {
    spares: Vec<BytesMut>,
    taken: usize,
    given: usize,
    arena: Option<BytesMut>,
}

impl ReadMemory for Pool {
    fn take_spare(&mut self) -> BytesMut {
        self.taken += 1;
        self.spares
            .pop()
            .unwrap_or_else(|| BytesMut::with_capacity(SPARE))
    }

    fn give_spare(&mut self, mut buf: BytesMut) {
        buf.clear();
        // A view of a spare's memory is moved back to its start.
        if buf.try_reclaim(SPARE) && buf.capacity() == SPARE {
            self.given += 1;
            self.spares.push(buf);
        }
    }

    fn spare_len(&self) -> usize {
        SPARE
    }

    fn arena_copy(&mut self, bytes: &[u8]) -> Option<BytesMut> {
        if bytes.len() > ARENA_MAX {
            return None;
        }
        let chunk = match self.arena.as_mut() {
            Some(c) if c.capacity() >= bytes.len() => c,
            _ => self.arena.insert(BytesMut::with_capacity(ARENA_CHUNK)),
        };
        chunk.extend_from_slice(bytes);
        Some(chunk.split())
    }
}

fn inbox() -> Inbox {
    inbox_with(Limits::default())
}

fn inbox_with(limits: Limits) -> Inbox {
    Inbox::new(MessageDecoder::new(Role::Server, limits), BytesMut::new())
}

/// A client's frame of `len` payload bytes, as it arrives at a server.
fn frame(len: usize) -> Vec<u8> {
    let mut wire = BytesMut::new();
    FrameEncoder::new(Role::Client)
        .encode_message(&Message::binary(vec![7u8; len]), &mut wire)
        .unwrap();
    wire.to_vec()
}

/// One read, as an engine makes it: into scratch memory of `SCRATCH`
/// bytes, or into the buffer's room. Returns how many bytes it took.
fn read(inbox: &mut Inbox, mem: &mut Pool, data: &[u8]) -> usize {
    match inbox.plan(mem) {
        Plan::Scratch { limit } => {
            let n = data.len().min(limit).min(SCRATCH);
            inbox.received(&data[..n], n == SCRATCH, mem);
            n
        }
        Plan::Own => {
            let mut target = inbox.target();
            let n = data.len().min(target.chunk_mut().len());
            target.put_slice(&data[..n]);
            inbox.read_done(Some(n), mem);
            n
        }
        Plan::Refused(grant) => panic!("refused: {grant:?}"),
    }
}

fn capacity(inbox: &Inbox) -> usize {
    inbox.buffered().capacity()
}

#[test]
fn a_small_read_keeps_only_its_size_and_takes_no_spare() {
    let mut mem = Pool::default();
    let mut inbox = inbox();
    assert_eq!(read(&mut inbox, &mut mem, &[9; 22]), 22);
    assert_eq!(capacity(&inbox), 22, "a buffer of exactly what came");
    assert_eq!(mem.taken, 0);
    inbox.clear();
    inbox.wait(&mut mem);
    assert_eq!(capacity(&inbox), 0);
    assert!(inbox.is_at_rest());
}

#[test]
fn an_empty_inbox_reads_into_scratch_and_then_to_the_frame() {
    let mut mem = Pool::default();
    let mut inbox = inbox();
    assert_eq!(inbox.plan(&mut mem), Plan::Scratch { limit: usize::MAX });
    // A header announcing 100 bytes, and 10 of them.
    let wire = frame(100);
    let head = wire.len() - 100;
    inbox.received(&wire[..head + 10], false, &mut mem);
    assert_eq!(inbox.decode(), Ok(None));
    assert_eq!(inbox.plan(&mut mem), Plan::Own);
    assert_eq!(inbox.target().remaining_mut(), 90 + READ_CHUNK);
}

#[test]
fn small_reads_share_the_arena_and_larger_ones_do_not() {
    let mut mem = Pool::default();
    let (mut a, mut b, mut c) = (inbox(), inbox(), inbox());
    read(&mut a, &mut mem, &[1; 22]);
    read(&mut b, &mut mem, &[2; ARENA_MAX]);
    read(&mut c, &mut mem, &[3; ARENA_MAX + 1]);
    assert!(a.arena && b.arena && !c.arena);
    assert!(a.shared && b.shared, "never given back as a spare");
    assert_eq!(b.buffered().as_ptr(), a.buffered()[22..].as_ptr());
    assert_eq!(capacity(&c), ARENA_MAX + 1, "its own buffer");
}

#[test]
fn part_of_a_frame_waits_in_memory_of_its_own_not_the_arena() {
    let mut mem = Pool::default();
    let mut inbox = inbox();
    read(&mut inbox, &mut mem, &[6; 10]);
    let in_arena = inbox.buffered().as_ptr();
    inbox.wait(&mut mem);
    assert!(!inbox.arena && !inbox.shared);
    assert_ne!(inbox.buffered().as_ptr(), in_arena, "copied out");
    assert_eq!(&inbox.buffered()[..], &[6; 10][..]);
    assert_eq!(capacity(&inbox), 10);
    assert_eq!(mem.given, 0, "arena memory is never a spare");
}

#[test]
fn reads_that_fill_the_scratch_go_to_a_spare_until_they_come_small() {
    let mut mem = Pool::default();
    let mut inbox = inbox();
    let input = vec![4; 3 * SCRATCH];
    assert_eq!(read(&mut inbox, &mut mem, &input), SCRATCH);
    assert!(inbox.bulk);
    assert_eq!(capacity(&inbox), SPARE, "moved to a spare");
    assert_eq!(read(&mut inbox, &mut mem, &input), input.len());
    inbox.clear();
    // Waiting: the spare goes back.
    inbox.wait(&mut mem);
    assert_eq!(capacity(&inbox), 0);
    assert_eq!(mem.spares.len(), 1);
    // Empty and bulk: straight into a spare, whole, kept when well used.
    let burst = vec![5; SPARE / 2];
    assert_eq!(read(&mut inbox, &mut mem, &burst), burst.len());
    assert_eq!(capacity(&inbox), SPARE);
    assert!(inbox.bulk);
    inbox.clear();
    // A small read into a spare: back to the scratch next time.
    assert_eq!(read(&mut inbox, &mut mem, &[1; 10]), 10);
    assert!(!inbox.bulk);
    assert!(capacity(&inbox) <= 40, "{}", capacity(&inbox));
    inbox.clear();
    assert!(matches!(inbox.plan(&mut mem), Plan::Scratch { .. }));
}

#[test]
fn an_empty_buffer_waiting_drops_memory_a_message_still_uses() {
    let mut mem = Pool::default();
    let mut inbox = inbox();
    let mut wire = frame(100);
    wire.extend_from_slice(&frame(30_000)[..30_000]);
    inbox.bulk = true;
    read(&mut inbox, &mut mem, &wire);
    assert_eq!(capacity(&inbox), SPARE, "well used: the spare is kept");
    let Ok(Some(msg)) = inbox.decode() else {
        panic!()
    };
    assert!(inbox.shared);
    inbox.clear();
    inbox.wait(&mut mem);
    assert_eq!(capacity(&inbox), 0);
    assert_eq!(mem.given, 0, "memory a message shares is never a spare");
    assert_eq!(msg, Message::binary(vec![7u8; 100]));
}

#[test]
fn a_huge_announced_frame_costs_what_arrived() {
    let mut mem = Pool::default();
    let mut inbox = inbox_with(
        Limits::default()
            .max_frame_size(1 << 30)
            .max_message_size(1 << 30),
    );
    let wire = frame(1);
    // A header announcing a gigabyte: 127, then 8 bytes of length, the mask.
    let mut head = vec![0x82, 0xff];
    head.extend_from_slice(&(1u64 << 30).to_be_bytes());
    head.extend_from_slice(&wire[2..6]);
    read(&mut inbox, &mut mem, &head);
    assert_eq!(inbox.decode(), Ok(None));
    read(&mut inbox, &mut mem, &[2; 1000]);
    assert_eq!(inbox.decode(), Ok(None));
    assert!(capacity(&inbox) < 64 << 10, "{}", capacity(&inbox));
    inbox.wait(&mut mem);
    let len = inbox.buffered().len();
    assert!(capacity(&inbox) <= 4 * len, "{}", capacity(&inbox));
}

#[test]
fn a_quarter_of_the_frame_here_makes_room_for_all_of_it() {
    let mut mem = Pool::default();
    let mut inbox = inbox();
    let wire = frame(300_000);
    inbox.bulk = true;
    let mut at = read(&mut inbox, &mut mem, &wire);
    assert_eq!(inbox.decode(), Ok(None));
    assert!(at >= wire.len() / 4, "{at}");
    at += read(&mut inbox, &mut mem, &wire[at..]);
    assert_eq!(at, wire.len(), "room for the whole frame at once");
    assert!(matches!(inbox.decode(), Ok(Some(_))));
    assert_eq!(mem.given, 1, "the outgrown spare went back");
}

#[test]
fn a_read_mid_payload_stops_soon_after_the_frame() {
    let mut mem = Pool::default();
    let mut inbox = inbox();
    let wire = frame(20);
    read(&mut inbox, &mut mem, &wire[..10]);
    assert_eq!(inbox.decode(), Ok(None));
    let mut more = wire[10..].to_vec();
    more.extend_from_slice(&vec![6; 100_000]);
    assert_eq!(inbox.plan(&mut mem), Plan::Own);
    assert!(inbox.target().remaining_mut() <= 20 + READ_CHUNK);
}

#[test]
fn a_message_that_fills_its_allocation_leaves_no_share_behind() {
    let wire = frame(5000);
    let mut initial = BytesMut::with_capacity(wire.len());
    initial.extend_from_slice(&wire);
    let mut inbox = Inbox::new(
        MessageDecoder::new(Role::Server, Limits::default()),
        initial,
    );
    let Ok(Some(Message::Binary(msg))) = inbox.decode() else {
        panic!()
    };
    assert!(!inbox.shared);
    assert_eq!(capacity(&inbox), 0);
    let Ok(owned) = msg.try_into_mut() else {
        panic!("the inbox kept a share of the message's memory");
    };
    assert_eq!(owned.len(), 5000);
}

#[test]
fn decoding_from_scratch_keeps_only_the_unfinished_rest() {
    let mut inbox = inbox();
    let mut scratch = BytesMut::with_capacity(64 << 10);
    scratch.extend_from_slice(&frame(5));
    let second = frame(40);
    scratch.extend_from_slice(&second[..12]);
    let Ok(Some(msg)) = inbox.decode_in(&mut scratch) else {
        panic!()
    };
    assert_eq!(msg, Message::binary(vec![7u8; 5]));
    assert_eq!(inbox.decode_in(&mut scratch), Ok(None));
    inbox.keep_rest(&mut scratch, true);
    assert!(scratch.is_empty());
    // The header is decoded: the payload's first bytes wait.
    assert_eq!(&inbox.buffered()[..], &[7; 6][..], "unmasked already");
    assert!(capacity(&inbox) < 1024, "its own, of its size");
    // The rest comes into the connection's own buffer.
    let mut mem = OwnMemory;
    assert_eq!(inbox.plan(&mut mem), Plan::Own);
    inbox.target().put_slice(&second[12..]);
    inbox.read_done(Some(second.len() - 12), &mut mem);
    assert_eq!(inbox.decode(), Ok(Some(Message::binary(vec![7u8; 40]))));
    // A connection that takes no more input keeps nothing.
    scratch.extend_from_slice(&second[..3]);
    inbox.keep_rest(&mut scratch, false);
    assert!(inbox.buffered().is_empty());
}

#[test]
fn a_protocol_error_is_reported_for_the_core() {
    let mut inbox = inbox();
    // An unmasked frame from a client.
    let mut scratch = BytesMut::from(&[0x81, 1, b'x'][..]);
    assert!(inbox.decode_in(&mut scratch).is_err());
}

#[test]
fn under_a_budget_growth_is_asked_for_and_refused_reads_wait() {
    let budget = MemoryBudget::new(256 << 10).allowance(0);
    // Another connection holds most of it.
    let mut other = crate::budget::BudgetAccount::new(Some(budget.clone()));
    assert_eq!(other.try_set(Held::Fragments, 200 << 10), Grant::Granted);
    let mut mem = Pool::default();
    let mut inbox = inbox_with(Limits::default().budget(budget.clone()));
    let wire = frame(200_000);
    read(&mut inbox, &mut mem, &wire[..100]);
    assert_eq!(budget.in_use(), (200 << 10) + 100, "what is held, charged");
    // Growing within the budget, up to what it has.
    let mut at = 100;
    let refused = loop {
        match inbox.plan(&mut mem) {
            Plan::Own => {
                let mut target = inbox.target();
                let n = target.chunk_mut().len().min(wire.len() - at);
                target.put_slice(&wire[at..at + n]);
                inbox.read_done(Some(n), &mut mem);
                at += n;
                assert!(budget.in_use() <= budget.limit(), "{}", budget.in_use());
            }
            Plan::Refused(grant) => break grant,
            Plan::Scratch { .. } => panic!("bytes are buffered"),
        }
    };
    let Grant::Wait { wanted } = refused else {
        panic!("{refused:?}")
    };
    assert!(at < wire.len() && at > 16 << 10, "{at}");
    assert!(inbox.holds_budget());
    assert_eq!(budget.in_use(), (200 << 10) + capacity(&inbox));
    // Given back by the other: the read goes on.
    other.release_all();
    assert!(budget.available() >= wanted);
    assert_eq!(inbox.plan(&mut mem), Plan::Own);
    inbox.release();
    assert_eq!(budget.in_use(), 0, "released with the connection's input");
    assert!(!inbox.holds_budget());
}

/// Input that came in bulk sends the next read to a spare; with the
/// whole budget held by others there is no room for one, and the read
/// must wait, not be planned into a buffer of no memory (which a read
/// then grows past the budget: the `receive` fuzz target's
/// `budget_over_limit`).
#[test]
fn a_bulk_read_with_no_room_for_a_spare_waits() {
    let budget = MemoryBudget::new(16 << 10).allowance(0);
    let mut other = crate::budget::BudgetAccount::new(Some(budget.clone()));
    let mut mem = Pool::default();
    let mut inbox = inbox_with(Limits::default().budget(budget.clone()));
    inbox.bulk = true;
    assert_eq!(other.try_set(Held::Fragments, 16 << 10), Grant::Granted);
    let plan = inbox.plan(&mut mem);
    assert!(
        matches!(plan, Plan::Refused(Grant::Wait { .. })),
        "{plan:?}"
    );
    assert!(budget.in_use() <= budget.limit());
    // Room again: the read goes on.
    other.release_all();
    assert!(!matches!(inbox.plan(&mut mem), Plan::Refused(_)));
    assert!(budget.in_use() <= budget.limit());
}

#[test]
fn a_message_over_the_whole_budget_is_refused_for_good() {
    let budget = MemoryBudget::new(16 << 10).allowance(0);
    let mut mem = OwnMemory;
    let mut inbox = inbox_with(Limits::default().budget(budget));
    let wire = frame(1 << 20);
    let Plan::Scratch { .. } = inbox.plan(&mut mem) else {
        panic!()
    };
    inbox.received(&wire[..4 << 10], false, &mut mem);
    let mut refused = None;
    for _ in 0..10 {
        match inbox.plan(&mut mem) {
            Plan::Own => {
                let len = inbox.buffered().len();
                let mut target = inbox.target();
                let n = target.chunk_mut().len().min(wire.len() - len);
                target.put_slice(&wire[len..len + n]);
                inbox.read_done(Some(n), &mut mem);
            }
            Plan::Refused(grant) => {
                refused = Some(grant);
                break;
            }
            Plan::Scratch { .. } => panic!(),
        }
    }
    assert!(matches!(refused, Some(Grant::Never { .. })), "{refused:?}");
}

/// A frame larger than the whole budget is refused for good once its
/// header is known, also while other connections hold part of the budget:
/// growing towards it would wait beside them for room it can never have
/// (holding part of the budget, and the engine's reading, meanwhile). A
/// streaming decoder, which hands the frame out in pieces, reads it all.
#[test]
fn a_frame_over_the_whole_budget_is_refused_beside_others() {
    let budget = MemoryBudget::new(256 << 10).allowance(0);
    let mut other = crate::budget::BudgetAccount::new(Some(budget.clone()));
    assert_eq!(other.try_set(Held::Fragments, 200 << 10), Grant::Granted);
    let mut mem = Pool::default();
    let mut inbox = inbox_with(Limits::default().budget(budget.clone()));
    let wire = frame(300_000);
    read(&mut inbox, &mut mem, &wire[..100]);
    assert!(inbox.decode().unwrap().is_none(), "the header, read");
    let held = budget.in_use();
    let Plan::Refused(Grant::Never { charge, limit }) = inbox.plan(&mut mem) else {
        panic!("not refused for good")
    };
    assert_eq!((charge, limit), (300_000, 256 << 10));
    assert_eq!(budget.in_use(), held, "nothing more asked for");
    // The same when the read ended at the header, and the others have
    // taken all the room meanwhile: refused for good, not a wait.
    let mut inbox = inbox_with(Limits::default().budget(budget.clone()));
    read(&mut inbox, &mut mem, &wire[..14]);
    assert!(inbox.decode().unwrap().is_none(), "the header, read");
    assert!(inbox.buffered().is_empty());
    let room = budget.limit() - budget.in_use();
    assert_eq!(
        other.try_set(Held::Fragments, (200 << 10) + room),
        Grant::Granted
    );
    let Plan::Refused(Grant::Never { charge, .. }) = inbox.plan(&mut mem) else {
        panic!("not refused for good after a read of the header alone")
    };
    assert_eq!(charge, 300_000);
    assert_eq!(other.try_set(Held::Fragments, 200 << 10), Grant::Granted);
    // Streamed, the same frame goes through in pieces beside the other.
    let decoder = MessageDecoder::new(Role::Server, Limits::default().budget(budget.clone()))
        .stream_messages(true);
    let mut inbox = Inbox::new(decoder, BytesMut::new());
    let (mut at, mut got) = (0, 0);
    while got < 300_000 {
        if at < wire.len() {
            at += read(&mut inbox, &mut mem, &wire[at..]);
        }
        while let Some(piece) = inbox.decode().unwrap() {
            got += piece.len();
        }
        assert!(budget.in_use() <= budget.limit());
    }
    assert_eq!(at, wire.len());
}

/// One read of `wire` from `at` (64 KiB at most) where the inbox's plan
/// says; the plan's refusal otherwise.
fn read_next(inbox: &mut Inbox, mem: &mut Pool, wire: &[u8], at: &mut usize) -> Result<(), Grant> {
    let step = (wire.len() - *at).min(64 << 10);
    match inbox.plan(mem) {
        Plan::Scratch { limit } => {
            let n = step.min(limit).min(SCRATCH);
            inbox.received(&wire[*at..*at + n], n == SCRATCH, mem);
            *at += n;
        }
        Plan::Own => {
            let mut target = inbox.target();
            let n = step.min(target.chunk_mut().len());
            target.put_slice(&wire[*at..*at + n]);
            inbox.read_done(Some(n), mem);
            *at += n;
        }
        Plan::Refused(grant) => return Err(grant),
    }
    Ok(())
}

/// A frame that fits in the budget is never refused for good (`Never`,
/// 1009): not while its buffer grows (the old buffer and the new one
/// live together while bytes are copied), and not beside what another
/// connection holds, when it waits instead and goes on once that is given
/// back. The budget's limit is never passed.
#[test]
fn a_frame_that_fits_the_empty_budget_is_never_refused_for_good() {
    let limits = Limits::default()
        .max_message_size(8 << 20)
        .max_frame_size(8 << 20);
    for (size, held) in [
        (20 << 17, 0),
        (20 << 17, 14 << 17),
        (31 << 17, 0),
        (3 << 17, 0),
    ] {
        let budget = MemoryBudget::new(32 << 17).allowance(0);
        let mut other = crate::budget::BudgetAccount::new(Some(budget.clone()));
        assert_eq!(other.try_set(Held::Fragments, held), Grant::Granted);
        let mut inbox = inbox_with(limits.clone().budget(budget.clone()));
        let mut mem = Pool::default();
        let wire = frame(size);
        let mut at = 0;
        let mut waited = false;
        while at < wire.len() {
            match read_next(&mut inbox, &mut mem, &wire, &mut at) {
                Ok(()) => {}
                Err(Grant::Wait { .. }) if held > 0 && !waited => {
                    // The other connection gives its budget back.
                    waited = true;
                    other.release_all();
                }
                Err(grant) => {
                    panic!("{size} beside {held}, {at} read: refused {grant:?}")
                }
            }
            assert!(budget.in_use() <= budget.limit(), "{}", budget.in_use());
        }
        assert_eq!(waited, held > 0, "{size} beside {held}");
        let msg = inbox.decode().unwrap().expect("the whole message");
        assert_eq!(msg.len(), size);
        assert!(budget.peak() <= budget.limit(), "peak {}", budget.peak());
    }
}

/// A frame's read buffer beside another connection that gives its budget
/// back a little at a time grows a few times, each by at least half of
/// itself, rather than grow (and copy itself) at every 16 KiB given back.
#[test]
fn a_read_buffer_grows_by_halves_as_budget_trickles_back() {
    let limits = Limits::default()
        .max_message_size(8 << 20)
        .max_frame_size(8 << 20);
    let budget = MemoryBudget::new(8 << 20).allowance(0);
    let mut hog = crate::budget::BudgetAccount::new(Some(budget.clone()));
    let mut hogged = 6 << 20;
    assert_eq!(hog.try_set(Held::Fragments, hogged), Grant::Granted);
    let mut inbox = inbox_with(limits.budget(budget.clone()));
    let mut mem = Pool::default();
    let size = 3 << 20;
    let wire = frame(size);
    let mut at = 0;
    let mut caps = vec![];
    while at < wire.len() {
        match read_next(&mut inbox, &mut mem, &wire, &mut at) {
            Ok(()) => {}
            Err(Grant::Wait { .. }) => {
                assert!(hogged > 0, "waits with the budget to itself");
                hogged = hogged.saturating_sub(16 << 10);
                hog.set(Held::Fragments, hogged);
            }
            Err(grant) => panic!("{at} read: refused {grant:?}"),
        }
        if at < wire.len() {
            // As an engine does after each read: the header is parsed.
            assert_eq!(inbox.decode().unwrap(), None);
        }
        let cap = inbox.buf.capacity();
        if caps.last() != Some(&cap) {
            caps.push(cap);
        }
        assert!(budget.in_use() <= budget.limit(), "{}", budget.in_use());
    }
    assert_eq!(
        inbox.decode().unwrap().expect("the whole message").len(),
        size
    );
    let grown: Vec<_> = caps.iter().filter(|&&c| c > SCRATCH).collect();
    assert!(grown.len() < 16, "{caps:?}");
}

/// Under a budget, a read into scratch memory of any size sets aside no
/// more than the allowance has left while that makes a read worth making:
/// connections exchanging small messages never touch the budget's shared
/// counter. Past the allowance, it takes from the budget, and gives back
/// what it did not keep.
#[test]
fn scratch_reads_stay_within_the_allowance_when_they_can() {
    let budget = MemoryBudget::new(1 << 20).allowance(128 << 10);
    let mut inbox = inbox_with(Limits::default().budget(budget.clone()));
    let mut mem = OwnMemory;
    struct Large;
    impl ReadMemory for Large {
        fn scratch_len(&self) -> usize {
            512 << 10
        }
    }
    for _ in 0..3 {
        let Plan::Scratch { limit } = inbox.plan(&mut Large) else {
            panic!("nothing buffered")
        };
        assert_eq!(limit, 128 << 10, "the allowance's worth");
        assert_eq!(budget.in_use(), 0);
        inbox.received(&frame(10), false, &mut mem);
        assert_eq!(inbox.decode().unwrap().unwrap().len(), 10);
        inbox.wait(&mut mem);
    }
    assert_eq!(budget.peak(), 0, "the shared counter untouched");
    // No allowance: the read takes from the budget, and a read that
    // brought nothing gives it back.
    let budget = MemoryBudget::new(1 << 20).allowance(0);
    let mut inbox = inbox_with(Limits::default().budget(budget.clone()));
    let Plan::Scratch { limit } = inbox.plan(&mut Large) else {
        panic!("nothing buffered")
    };
    assert_eq!(limit, 512 << 10, "from the budget");
    assert_eq!(budget.in_use(), 512 << 10);
    inbox.scratch_unused();
    assert_eq!(budget.in_use(), 0);
}

#[test]
fn scratch_memory_without_a_bound_reads_within_the_budget() {
    // `OwnMemory` names no scratch size: the plan asks for what the
    // budget has (found by fuzzing: the account's sum overflowed).
    let budget = MemoryBudget::new(64 << 10).allowance(0);
    let mut inbox = inbox_with(Limits::default().budget(budget.clone()));
    let Plan::Scratch { limit } = inbox.plan(&mut OwnMemory) else {
        panic!()
    };
    assert!(limit <= 64 << 10, "{limit}");
    assert!(budget.in_use() <= budget.limit());
    inbox.scratch_unused();
    assert_eq!(budget.in_use(), 0);
}

/// A compressed message of two fragments, alone in the budget, read as an
/// engine reads it: the first fragment's output grows by doubling to all
/// the budget has, and gives back what it does not use when the second
/// fragment must be held whole beside it.
#[cfg(feature = "deflate")]
#[test]
fn a_fragmented_compressed_message_alone_in_the_budget_fits() {
    use crate::deflate::{DeflateConfig, DeflateParams};
    let mut failures = vec![];
    for second in [2 << 10, 6 << 10, 64 << 10, 384 << 10] {
        let first = (2 << 20) + (64 << 10);
        let budget = MemoryBudget::new(4 << 20).allowance(0);
        let mut decoder =
            MessageDecoder::new(Role::Server, Limits::default().budget(budget.clone()));
        let mut e = FrameEncoder::new(Role::Server);
        crate::deflate::enable_for_tests(
            &mut decoder,
            &mut e,
            &DeflateParams::default(),
            &DeflateConfig::default(),
        );
        let mut inbox = Inbox::new(decoder, BytesMut::new());
        let mut mem = Pool::default();
        let mut z = flate2::Compress::new(flate2::Compression::new(6), false);
        let mut one = Vec::with_capacity(64 << 10);
        z.compress_vec(&vec![1u8; first], &mut one, flate2::FlushCompress::Sync)
            .unwrap();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..second)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let mut two = Vec::with_capacity(second + (64 << 10));
        z.compress_vec(&noise, &mut two, flate2::FlushCompress::Sync)
            .unwrap();
        two.truncate(two.len() - 4);
        let mut wire = crate::test_frames::client_frame(false, true, 2, &one);
        wire.extend_from_slice(&crate::test_frames::client_frame(true, false, 0, &two));
        let mut at = 0;
        let mut rounds = 0;
        let outcome = loop {
            rounds += 1;
            if rounds > 100_000 {
                break format!("stuck at {at} of {}", wire.len());
            }
            if let Err(g) = read_next(&mut inbox, &mut mem, &wire, &mut at) {
                break format!(
                    "read refused {g:?} at {at} of {} (budget in use {} of {})",
                    wire.len(),
                    budget.in_use(),
                    budget.limit()
                );
            }
            match inbox.decode() {
                Ok(Some(m)) => {
                    assert_eq!(m.len(), first + second);
                    break "ok".to_string();
                }
                Ok(None) => {}
                Err(e) => break format!("error {e} at {at}"),
            }
        };
        if outcome != "ok" {
            failures.push(format!(
                "message {} KiB ({}% of the budget), second fragment {} KiB: {outcome}",
                (first + second) >> 10,
                (first + second) * 100 / budget.limit(),
                second >> 10
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// With fewer bytes left in the budget than the smallest buffer a kept
/// read allocates (8), the read waits: reading 5 bytes of a header and
/// keeping them would take 8, past what was set aside (found by a
/// break-it round). With 10 left, the read goes, and what it keeps stays
/// within the budget.
#[test]
fn a_read_too_small_to_keep_waits_rather_than_pass_the_budget() {
    for (held, read) in [(995, None), (990, Some(10))] {
        let budget = MemoryBudget::new(1000).allowance(0);
        let mut hog = crate::budget::BudgetAccount::new(Some(budget.clone()));
        assert_eq!(hog.try_set(Held::Fragments, held), Grant::Granted);
        let mut inbox = inbox_with(Limits::default().budget(budget.clone()));
        let mut mem = Pool::default();
        match (inbox.plan(&mut mem), read) {
            (Plan::Refused(Grant::Wait { .. }), None) => continue,
            (Plan::Scratch { limit }, Some(want)) => {
                assert_eq!(limit, want);
                let wire = frame(100);
                let mut scratch = BytesMut::from(&wire[..5]);
                assert_eq!(inbox.decode_in(&mut scratch).unwrap(), None);
                inbox.keep_rest(&mut scratch, true);
                assert!(
                    budget.in_use() <= budget.limit(),
                    "{held}: {} in use, the buffer {} of capacity",
                    budget.in_use(),
                    inbox.buffered().capacity()
                );
            }
            (plan, _) => panic!("{held} held: {plan:?}"),
        }
    }
}
