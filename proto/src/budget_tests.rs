use super::*;
use std::sync::atomic::AtomicBool;
use std::task::Wake;

#[test]
fn within_the_allowance_nothing_is_taken() {
    let budget = MemoryBudget::new(1 << 20).allowance(1000);
    let mut a = BudgetAccount::new(Some(budget.clone()));
    assert_eq!(a.try_set(Held::ReadBuffer, 600), Grant::Granted);
    assert_eq!(a.try_set(Held::Fragments, 400), Grant::Granted);
    assert_eq!(budget.in_use(), 0);
    assert_eq!(a.try_set(Held::Fragments, 401), Grant::Granted);
    assert_eq!(budget.in_use(), 1);
    assert_eq!(a.charged(), 1);
}

#[test]
fn reserve_and_release_are_exact() {
    let budget = MemoryBudget::new(10_000).allowance(100);
    let mut a = BudgetAccount::new(Some(budget.clone()));
    let mut b = BudgetAccount::new(Some(budget.clone()));
    assert_eq!(a.try_set(Held::ReadBuffer, 3100), Grant::Granted);
    assert_eq!(b.try_set(Held::Inflated, 2100), Grant::Granted);
    assert_eq!(budget.in_use(), 5000);
    a.transfer(Held::ReadBuffer, Held::Fragments, 1000);
    assert_eq!(budget.in_use(), 5000);
    assert_eq!(a.held(Held::Fragments), 1000);
    assert_eq!(a.try_set(Held::ReadBuffer, 100), Grant::Granted);
    assert_eq!(budget.in_use(), 1000 + 2000);
    a.release(Held::Fragments);
    assert_eq!(budget.in_use(), 2000);
    b.set(Held::Inflated, 50);
    assert_eq!(budget.in_use(), 0);
    assert_eq!(budget.peak(), 5000);
}

#[test]
fn exhausted_says_wait_and_alone_too_big_says_never() {
    let budget = MemoryBudget::new(10_000).allowance(0);
    let mut a = BudgetAccount::new(Some(budget.clone()));
    let mut b = BudgetAccount::new(Some(budget.clone()));
    assert_eq!(a.try_set(Held::Fragments, 8000), Grant::Granted);
    assert_eq!(
        b.try_set(Held::Fragments, 3000),
        Grant::Wait { wanted: 3000 }
    );
    // Refused requests change nothing.
    assert_eq!(b.total(), 0);
    assert_eq!(budget.in_use(), 8000);
    assert_eq!(
        b.try_set(Held::Fragments, 10_001),
        Grant::Never {
            charge: 10_001,
            limit: 10_000
        }
    );
    assert_eq!(b.try_set(Held::Fragments, 2000), Grant::Granted);
    assert_eq!(budget.in_use(), 10_000);
    assert_eq!(budget.available(), 0);
    // `set` is for memory already held: it may pass the limit.
    b.set(Held::ReadBuffer, 10);
    assert_eq!(budget.in_use(), 10_010);
}

fn growth(old: usize, len: usize, step: usize) -> Growth {
    Growth {
        old,
        len,
        step,
        min_step: 16 << 10,
        beside: 0,
    }
}

/// Growth short of room waits for a step of half what is held rather than
/// crawl: every step copies the whole buffer.
#[test]
fn growth_waits_for_half_of_what_is_held_rather_than_crawl() {
    let budget = MemoryBudget::new(4 << 20).allowance(0);
    let mut hog = BudgetAccount::new(Some(budget.clone()));
    let mut a = BudgetAccount::new(Some(budget.clone()));
    let mib = 1 << 20;
    assert_eq!(a.try_set(Held::ReadBuffer, mib), Grant::Granted);
    // 1 MiB held, 1 MiB more wanted beside the 1 MiB copied from; 1 MiB
    // free: no step at all beside the copy.
    assert_eq!(hog.try_set(Held::Fragments, 2 * mib), Grant::Granted);
    let wanted = match a.try_grow(Held::ReadBuffer, growth(mib, mib, mib)) {
        Err(Grant::Wait { wanted }) => wanted,
        other => panic!("{other:?}"),
    };
    // It waits for the copy and half a MiB more, not a crawl's 16 KiB.
    assert_eq!(wanted, mib + mib / 2);
    assert_eq!(a.held(Held::ReadBuffer), mib, "refusal changes nothing");
    // 256 KiB more: still short of half.
    assert_eq!(
        hog.try_set(Held::Fragments, 2 * mib - mib / 4),
        Grant::Granted
    );
    assert!(a.try_grow(Held::ReadBuffer, growth(mib, mib, mib)).is_err());
    // 768 KiB free beside the copy: a step of 768 KiB.
    assert_eq!(hog.try_set(Held::Fragments, mib + mib / 4), Grant::Granted);
    assert_eq!(
        a.try_grow(Held::ReadBuffer, growth(mib, mib, mib)),
        Ok(3 * mib / 4)
    );
    assert_eq!(a.held(Held::ReadBuffer), 2 * mib + 3 * mib / 4);
    assert_eq!(budget.in_use(), 4 * mib);
}

/// Where the copy could never be counted, the buffer grows without it: a
/// message that fits the budget alone is not refused for the moment its
/// bytes move. A last step smaller than half the buffer (all it could
/// still take) is taken, once; then the buffer is refused for good.
#[test]
fn the_copy_goes_uncounted_only_when_it_could_never_fit() {
    let budget = MemoryBudget::new(1 << 20).allowance(0);
    let kib = 1 << 10;
    let mut a = BudgetAccount::new(Some(budget.clone()));
    assert_eq!(a.try_set(Held::Inflated, 400 * kib), Grant::Granted);
    // 400 + 400 + 400 > 1024: grows to 800 KiB, the copy uncounted.
    assert_eq!(
        a.try_grow(Held::Inflated, growth(400 * kib, 400 * kib, 400 * kib)),
        Ok(400 * kib)
    );
    assert_eq!(a.held(Held::Inflated), 800 * kib);
    // What is left, 224 KiB, at once: the last step.
    assert_eq!(
        a.try_grow(Held::Inflated, growth(800 * kib, 800 * kib, 800 * kib)),
        Ok(224 * kib)
    );
    assert_eq!(a.held(Held::Inflated), 1024 * kib);
    assert_eq!(
        a.try_grow(Held::Inflated, growth(1024 * kib, 1024 * kib, 1024 * kib)),
        Err(Grant::Never {
            charge: 2048 * kib,
            limit: 1024 * kib
        })
    );
    // Within an eighth of itself of the whole budget, uncounted: refused
    // (a copy of nearly the budget, each time others give a little back).
    a.release_all();
    assert_eq!(a.try_set(Held::Inflated, 1000 * kib), Grant::Granted);
    assert!(matches!(
        a.try_grow(Held::Inflated, growth(1000 * kib, 1000 * kib, 1000 * kib)),
        Err(Grant::Never { .. })
    ));
    // Unless that is all it asked for.
    assert_eq!(
        a.try_grow(Held::Inflated, growth(1000 * kib, 1000 * kib, 24 * kib)),
        Ok(24 * kib)
    );
    // With the copy counted where it fits.
    let mut b = BudgetAccount::new(Some(budget.clone()));
    a.release_all();
    assert_eq!(b.try_set(Held::ReadBuffer, 300 * kib), Grant::Granted);
    assert_eq!(
        b.try_grow(Held::ReadBuffer, growth(300 * kib, 300 * kib, 300 * kib)),
        Ok(300 * kib)
    );
    assert_eq!(b.held(Held::ReadBuffer), 900 * kib, "the copy counted");
    // Without a budget: the step asked for.
    let mut free = BudgetAccount::new(None);
    assert_eq!(free.try_grow(Held::Inflated, growth(5, 5, 7)), Ok(7));
}

/// Growth leaves what the connection will still need beside it (the rest
/// of a frame it must hold whole): a buffer that grew into it would make
/// that frame refused, though the message fits.
#[test]
fn growth_leaves_room_for_what_is_needed_beside_it() {
    let budget = MemoryBudget::new(1 << 20).allowance(0);
    let kib = 1 << 10;
    let mut a = BudgetAccount::new(Some(budget.clone()));
    assert_eq!(a.try_set(Held::Inflated, 600 * kib), Grant::Granted);
    let beside = Growth {
        beside: 100 * kib,
        ..growth(600 * kib, 600 * kib, 600 * kib)
    };
    assert_eq!(a.try_grow(Held::Inflated, beside), Ok(324 * kib));
    assert_eq!(a.held(Held::Inflated), 924 * kib);
    assert_eq!(a.try_set(Held::ReadBuffer, 100 * kib), Grant::Granted);
}

#[test]
fn dropping_an_account_gives_everything_back() {
    let budget = MemoryBudget::new(1 << 20).allowance(10);
    {
        let mut a = BudgetAccount::new(Some(budget.clone()));
        a.set(Held::ReadBuffer, 1000);
        assert_eq!(a.try_set(Held::Inflated, 5000), Grant::Granted);
        assert_eq!(budget.in_use(), 5990);
    }
    assert_eq!(budget.in_use(), 0);
    assert_eq!(budget.peak(), 5990);
}

#[test]
fn without_a_budget_everything_is_granted_and_nothing_counted() {
    let mut a = BudgetAccount::new(None);
    assert_eq!(a.try_set(Held::Fragments, usize::MAX), Grant::Granted);
    a.set(Held::ReadBuffer, 1 << 40);
    assert_eq!(a.total(), 0);
    assert_eq!(a.charged(), 0);
    assert_eq!(a.room(), usize::MAX);
}

struct Flag(AtomicBool);
impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn giving_back_wakes_the_waiting() {
    let budget = MemoryBudget::new(100).allowance(0);
    let mut a = BudgetAccount::new(Some(budget.clone()));
    assert_eq!(a.try_set(Held::ReadBuffer, 100), Grant::Granted);
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    budget.wake_on_release(&waker);
    budget.wake_on_release(&waker);
    assert_eq!(budget.waiting(), 1);
    a.set(Held::ReadBuffer, 50);
    assert!(flag.0.load(Ordering::SeqCst));
    assert_eq!(budget.waiting(), 0);
}

#[test]
fn waiting_looks_again_after_registering() {
    let budget = MemoryBudget::new(100).allowance(0);
    let mut a = BudgetAccount::new(Some(budget.clone()));
    assert_eq!(a.try_set(Held::ReadBuffer, 100), Grant::Granted);
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    assert!(!budget.wait_for(10, &waker), "no room: wait");
    assert_eq!(budget.waiting(), 1, "and the waker is registered");
    // Given back (the waker fires), then asked again: room now.
    a.set(Held::ReadBuffer, 80);
    assert!(budget.wait_for(10, &waker));
    assert!(!budget.wait_for(30, &waker), "not enough for 30");
}

#[test]
fn handles_compare_by_identity() {
    let a = MemoryBudget::new(10);
    assert_eq!(a, a.clone());
    assert_ne!(a, MemoryBudget::new(10));
    assert_ne!(a, a.clone().allowance(1));
}

// The decoder under a budget, without a runtime: the read buffer is a
// plain `BytesMut` recorded in the account as the I/O layer does.

use crate::Role;
use crate::decoder::MessageDecoder;
use crate::error::Error;
use crate::limits::Limits;
use crate::message::Message;
use bytes::BytesMut;

use crate::test_frames::client_frame as frame;

fn decoder(budget: &MemoryBudget) -> MessageDecoder {
    MessageDecoder::new(Role::Server, Limits::default().budget(budget.clone()))
}

/// Decodes what `wire` holds as the I/O layer would: the buffer's
/// memory recorded before and after.
fn decode(d: &mut MessageDecoder, buf: &mut BytesMut) -> Result<Option<Message>, Error> {
    d.account_mut().set(Held::ReadBuffer, buf.capacity());
    let r = d.decode(buf);
    d.account_mut().set(Held::ReadBuffer, buf.capacity());
    r
}

#[test]
fn fragments_are_counted_and_given_back_on_completion() {
    let budget = MemoryBudget::new(4 << 20).allowance(0);
    let mut d = decoder(&budget);
    let piece = vec![7u8; 300 << 10];
    let mut buf = BytesMut::from(&frame(false, false, 2, &piece)[..]);
    assert_eq!(decode(&mut d, &mut buf).unwrap(), None);
    // The first fragment holds the read buffer's memory now.
    assert_eq!(d.account().held(Held::Fragments), piece.len());
    assert_eq!(budget.in_use(), d.account().total());
    buf.extend_from_slice(&frame(false, false, 0, &piece));
    assert_eq!(decode(&mut d, &mut buf).unwrap(), None);
    assert!(d.account().held(Held::Fragments) >= 2 * piece.len());
    assert_eq!(budget.in_use(), d.account().total());
    buf.clear();
    buf.extend_from_slice(&frame(true, false, 0, &piece));
    let msg = decode(&mut d, &mut buf).unwrap().unwrap();
    assert_eq!(msg.len(), 3 * piece.len());
    assert_eq!(d.account().held(Held::Fragments), 0);
    buf = BytesMut::new();
    decode(&mut d, &mut buf).unwrap();
    assert_eq!(budget.in_use(), 0);
    assert!(budget.peak() >= 3 * piece.len(), "{}", budget.peak());
    assert!(budget.peak() <= 4 << 20);
}

#[test]
fn an_exhausted_budget_makes_the_decoder_wait_then_go_on() {
    let budget = MemoryBudget::new(1 << 20).allowance(0);
    let mut hog = BudgetAccount::new(Some(budget.clone()));
    assert_eq!(hog.try_set(Held::Fragments, 850 << 10), Grant::Granted);
    let mut d = decoder(&budget);
    let piece = vec![1u8; 64 << 10];
    let mut wire = frame(false, false, 2, &piece);
    wire.extend_from_slice(&frame(true, false, 0, &piece));
    wire.extend_from_slice(&frame(true, false, 2, b"next"));
    let mut buf = BytesMut::with_capacity(wire.len());
    buf.extend_from_slice(&wire);
    // Both fragments fit in the read buffer; a 128 KiB copy of them
    // beside it does not.
    assert_eq!(decode(&mut d, &mut buf).unwrap(), None);
    let wanted = d.budget_wait().expect("waits for budget");
    assert!(wanted > budget.available());
    assert!(budget.in_use() <= budget.limit());
    // Asked again, still waiting, and nothing lost.
    assert_eq!(decode(&mut d, &mut buf).unwrap(), None);
    assert!(d.budget_wait().is_some());
    drop(hog);
    let msg = decode(&mut d, &mut buf).unwrap().unwrap();
    assert_eq!(msg, Message::binary(vec![1u8; 128 << 10]));
    assert_eq!(
        decode(&mut d, &mut buf).unwrap(),
        Some(Message::binary("next"))
    );
    assert_eq!(d.budget_wait(), None);
    assert_eq!(budget.in_use(), d.account().charged());
}

#[test]
fn a_message_larger_than_the_budget_is_refused_with_1009() {
    let budget = MemoryBudget::new(256 << 10).allowance(0);
    let mut d = decoder(&budget);
    let piece = vec![2u8; 200 << 10];
    let mut buf = BytesMut::from(&frame(false, false, 2, &piece)[..]);
    assert_eq!(decode(&mut d, &mut buf).unwrap(), None);
    buf.extend_from_slice(&frame(true, false, 0, &piece));
    let e = decode(&mut d, &mut buf).unwrap_err();
    assert!(
        matches!(e, Error::OverBudget { budget: b, .. } if b == 256 << 10),
        "{e}"
    );
    assert_eq!(e.close_code().map(|c| c.0), Some(1009));
    // The fragments are given back with the error; only the read
    // buffer is left, which its owner drops.
    assert_eq!(d.account().held(Held::Fragments), 0);
    d.account_mut().release(Held::ReadBuffer);
    assert_eq!(budget.in_use(), 0);
}

#[test]
fn dropping_a_decoder_mid_message_gives_everything_back() {
    let budget = MemoryBudget::new(8 << 20).allowance(1024);
    let mut d = decoder(&budget);
    let mut buf = BytesMut::from(&frame(false, false, 1, &vec![b'a'; 1 << 20])[..]);
    assert_eq!(decode(&mut d, &mut buf).unwrap(), None);
    assert!(budget.in_use() > 0);
    drop(d);
    assert_eq!(budget.in_use(), 0);
}

#[test]
fn without_a_budget_the_decoder_counts_nothing() {
    let mut d = MessageDecoder::new(Role::Server, Limits::default());
    let mut buf = BytesMut::from(&frame(false, false, 2, &[1; 1000])[..]);
    buf.extend_from_slice(&frame(true, false, 0, &[1; 1000]));
    assert_eq!(decode(&mut d, &mut buf).unwrap().unwrap().len(), 2000);
    assert_eq!(d.account().total(), 0);
    assert!(!d.account().is_on());
}

#[cfg(feature = "deflate")]
mod bombs {
    use super::*;
    use crate::deflate::{DeflateConfig, DeflateParams};
    use crate::encoder::FrameEncoder;

    /// `n` zeros compressed as one permessage-deflate payload.
    pub(super) fn zeros(n: usize) -> Vec<u8> {
        use flate2::{Compress, Compression, FlushCompress};
        let mut c = Compress::new(Compression::best(), false);
        let mut out = Vec::with_capacity(n / 500 + 1024);
        c.compress_vec(&vec![0; n], &mut out, FlushCompress::Sync)
            .unwrap();
        out.truncate(out.len() - 4);
        out
    }

    pub(super) fn inflating(budget: &MemoryBudget) -> MessageDecoder {
        let mut d = decoder(budget);
        let mut e = FrameEncoder::new(Role::Server);
        crate::deflate::enable_for_tests(
            &mut d,
            &mut e,
            &DeflateParams::default(),
            &DeflateConfig::default(),
        );
        d
    }

    #[test]
    fn a_bomb_larger_than_the_budget_is_refused_within_it() {
        let budget = MemoryBudget::new(2 << 20).allowance(0);
        let mut d = inflating(&budget);
        let wire = zeros(32 << 20);
        let mut buf = BytesMut::from(&frame(false, true, 2, &wire)[..]);
        let e = decode(&mut d, &mut buf).unwrap_err();
        assert!(matches!(e, Error::OverBudget { .. }), "{e}");
        assert_eq!(e.close_code().map(|c| c.0), Some(1009));
        assert!(budget.peak() <= 2 << 20, "{}", budget.peak());
        assert_eq!(d.account().held(Held::Inflated), 0);
    }

    /// A bomb beside another connection that gives its budget back a
    /// little at a time: the output grows a few times, each by at least
    /// half of itself, and is refused once it holds the whole budget,
    /// rather than grow (and copy itself) at every 16 KiB given back.
    #[test]
    fn a_bomb_grows_by_halves_as_budget_trickles_back() {
        let budget = MemoryBudget::new(8 << 20).allowance(0);
        let mut hog = BudgetAccount::new(Some(budget.clone()));
        let mut hogged = 6 << 20;
        assert_eq!(hog.try_set(Held::Fragments, hogged), Grant::Granted);
        let mut d = inflating(&budget);
        let wire = zeros(32 << 20);
        let mut buf = BytesMut::from(&frame(true, true, 2, &wire)[..]);
        let mut sizes = vec![];
        let refused = loop {
            match decode(&mut d, &mut buf) {
                Ok(None) => {
                    assert!(d.budget_wait().is_some());
                    assert!(budget.in_use() <= budget.limit());
                    let held = d.account().held(Held::Inflated);
                    if sizes.last() != Some(&held) {
                        sizes.push(held);
                    }
                    assert!(hogged > 0, "waits with the budget to itself: {sizes:?}");
                    hogged = hogged.saturating_sub(16 << 10);
                    hog.set(Held::Fragments, hogged);
                }
                Ok(Some(_)) => panic!("a 32 MiB message within 8 MiB"),
                Err(e) => break e,
            }
        };
        assert!(matches!(refused, Error::OverBudget { .. }), "{refused}");
        for pair in sizes.windows(2) {
            assert!(pair[1] >= pair[0] + pair[0] / 2, "{sizes:?}");
        }
        assert!(sizes.len() < 12, "{sizes:?}");
    }

    #[test]
    fn a_bomb_waits_while_others_hold_the_budget() {
        // Growing output is copied: it needs up to twice its size.
        let budget = MemoryBudget::new(8 << 20).allowance(0);
        let mut hog = BudgetAccount::new(Some(budget.clone()));
        assert_eq!(hog.try_set(Held::Fragments, 7 << 20), Grant::Granted);
        let mut d = inflating(&budget);
        // 2 MiB inflated: fits the budget, not what is left of it.
        let wire = zeros(2 << 20);
        let mut buf = BytesMut::from(&frame(true, true, 2, &wire)[..]);
        assert_eq!(decode(&mut d, &mut buf).unwrap(), None);
        assert!(d.budget_wait().is_some());
        assert!(budget.in_use() <= budget.limit());
        assert!(budget.peak() <= budget.limit());
        hog.release_all();
        let msg = decode(&mut d, &mut buf).unwrap().unwrap();
        assert_eq!(msg.len(), 2 << 20);
        assert_eq!(d.account().held(Held::Inflated), 0);
        // zlib's own state stays with a context-takeover connection,
        // and stays counted.
        assert_eq!(
            d.account().held(Held::Compression),
            crate::deflate::INFLATE_STATE
        );
        d.account_mut().release(Held::ReadBuffer);
        d.account_mut().release(Held::Compression);
        assert_eq!(budget.in_use(), 0);
    }
}

/// The growth rules' cases a break-it round found: reassembly that
/// crawled, and messages that fit the budget alone refused.
mod found {
    use super::*;

    /// A fragmented message's reassembly buffer under a budget it has to
    /// itself: once doubling no longer fits, every continuation frame
    /// grows it by just that frame, copying the whole buffer each time.
    #[test]
    fn fragments_grow_by_halves_with_the_budget_to_themselves() {
        let budget = MemoryBudget::new(8 << 20).allowance(0);
        let mut d = decoder(&budget);
        let mut buf = BytesMut::from(&frame(false, false, 2, &vec![1u8; 4 << 20])[..]);
        assert_eq!(decode(&mut d, &mut buf).unwrap(), None);
        let mut sizes = vec![d.account().held(Held::Fragments)];
        let piece = vec![2u8; 64 << 10];
        let n = 48;
        let mut copied = 0usize;
        for i in 0..n {
            let mut buf = BytesMut::from(&frame(i + 1 == n, false, 0, &piece)[..]);
            let before = d.account().held(Held::Fragments);
            let r = decode(&mut d, &mut buf).unwrap();
            let after = d.account().held(Held::Fragments);
            if after != before && after != 0 {
                copied += before;
                sizes.push(after);
            }
            if i + 1 == n {
                assert_eq!(r.expect("the message").len(), (4 << 20) + n * piece.len());
            }
        }
        // The copies add up to less than twice the message.
        assert!(copied < 2 * ((4 << 20) + n * piece.len()), "{copied}");
        for pair in sizes.windows(2) {
            assert!(
                pair[1] >= pair[0] + pair[0] / 2,
                "grew from {} to {} KiB (copying {} KiB): {} growths",
                pair[0] >> 10,
                pair[1] >> 10,
                pair[0] >> 10,
                sizes.len() - 1
            );
        }
    }

    /// An uncompressed message of two fragments, 59% of a budget it has to
    /// itself: the continuation counted in the read buffer and in the
    /// fragments' copy of it, both within the budget.
    #[test]
    fn a_fragmented_message_of_59_percent_alone_fits() {
        let budget = MemoryBudget::new(1 << 20).allowance(0);
        let mut d = decoder(&budget);
        let mut buf = BytesMut::from(&frame(false, false, 2, &vec![1u8; 1 << 10])[..]);
        assert_eq!(decode(&mut d, &mut buf).unwrap(), None);
        let mut buf = BytesMut::from(&frame(true, false, 0, &vec![2u8; 600 << 10])[..]);
        match decode(&mut d, &mut buf) {
            Ok(Some(m)) => assert_eq!(m.len(), 601 << 10),
            other => panic!(
                "a {} KiB message alone in a {} KiB budget: {other:?}",
                601,
                budget.limit() >> 10
            ),
        }
    }

    #[cfg(feature = "deflate")]
    mod inflate {
        use super::super::bombs::{inflating, zeros};
        use super::*;

        /// A compressed message alone in the budget, under it: its output
        /// doubled to 1 MiB, and the last step (what is left of the
        /// budget, under half of 1 MiB) is taken.
        #[test]
        fn compressed_messages_up_to_the_budget_alone_fit() {
            let mut failures = vec![];
            for (budget, allowance, size) in [
                (3 << 19, 0, (1 << 20) + (64 << 10)),
                (3 << 19, 0, (1 << 20) + 1),
                (1400 << 10, 128 << 10, (1 << 20) + (64 << 10)),
            ] {
                let budget = MemoryBudget::new(budget).allowance(allowance);
                let mut d = inflating(&budget);
                let wire = zeros(size);
                let mut buf = BytesMut::from(&frame(true, true, 2, &wire)[..]);
                match decode(&mut d, &mut buf) {
                    Ok(Some(m)) => assert_eq!(m.len(), size),
                    other => failures.push(format!(
                        "a compressed message of {size} bytes ({}% of a {} KiB budget, \
                         allowance {} KiB), alone: {other:?}",
                        size * 100 / budget.limit(),
                        budget.limit() >> 10,
                        allowance >> 10,
                    )),
                }
            }
            assert!(failures.is_empty(), "{failures:#?}");
        }
    }
}
