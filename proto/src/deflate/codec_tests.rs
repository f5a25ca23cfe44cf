use super::*;
use crate::deflate::pool::{POOL, POOL_KEEP};

fn deflate(d: &mut Deflater, payload: &[u8]) -> Vec<u8> {
    d.compress(payload, <[u8]>::to_vec).unwrap().unwrap()
}

#[test]
fn zlib_state_is_made_by_the_first_message_each_way() {
    let mut d = Deflater::new(6, 15, false, 0);
    let mut i = Inflater::new(15, false, 1 << 20);
    assert!(
        matches!(d.kept, Kept::Own(Own::Unmade(_))) && matches!(i.kept, Kept::Own(Own::Unmade(_))),
        "none at first"
    );
    // Sharing a frame compressed elsewhere makes no state either.
    d.sent_elsewhere(b"elsewhere");
    assert!(matches!(d.kept, Kept::Own(Own::Unmade(_))) && !d.stale);
    let wire = deflate(&mut d, b"hello hello hello");
    assert!(matches!(d.kept, Kept::Own(Own::Made(_))));
    assert!(
        matches!(i.kept, Kept::Own(Own::Unmade(_))),
        "the other direction still has none"
    );
    assert_eq!(
        inflate(&mut i, &wire, true).unwrap(),
        Message::text("hello hello hello")
    );
    assert!(matches!(i.kept, Kept::Own(Own::Made(_))));
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
    i.feed(wire, &mut utf8, &mut acct, 0)?;
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
            let msg = format!("{{\"seq\": {n}, \"kind\": \"update\", \"payload\": \"abcdefgh\"}}");
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
        .feed(&wire[..1024], &mut utf8, &mut BudgetAccount::new(None), 0)
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
    let r = i.feed(&wire, &mut utf8, &mut BudgetAccount::new(None), 0);
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
            i.feed(chunk, &mut utf8, &mut acct, 0).unwrap();
        }
        let msg = i.finish(&mut utf8, &mut acct).unwrap().unwrap();
        assert_eq!(msg, Message::text(text.clone()));
    }
}

fn chat(n: usize) -> String {
    format!(
        "{{\"seq\":{n},\"user\":\"user{}\",\"kind\":\"chat\",\"text\":\"hello there, how is it going today?\"}}",
        n % 7
    )
}

fn pooled() -> (usize, usize) {
    POOL.with(|p| {
        let p = p.borrow();
        (p.compressors.len(), p.decompressors.len())
    })
}

#[test]
fn an_idle_connections_compression_is_a_few_words() {
    // What a shared-policy connection holds between messages, each way.
    assert!(std::mem::size_of::<Deflater>() <= 24);
    assert!(std::mem::size_of::<Inflater>() <= 40);
    let d = Deflater::under(DeflatePolicy::Shared, 3, 15, true, usize::MAX);
    assert!(!d.wants(u32::MAX as usize - 1) && d.wants(usize::MAX));
}

#[test]
fn shared_policy_keeps_nothing_between_messages() {
    let mut d = Deflater::under(DeflatePolicy::Shared, 3, 15, true, 0);
    let mut i = Inflater::under(DeflatePolicy::Shared, 15, true, 1 << 20);
    for n in 0..50 {
        let msg = chat(n);
        let wire = deflate(&mut d, msg.as_bytes());
        assert_eq!(inflate(&mut i, &wire, true).unwrap(), Message::text(msg));
        assert!(matches!(d.kept, Kept::Nothing) && matches!(i.kept, Kept::Nothing));
        assert_eq!(i.holds(), 0);
    }
    // One of each went back to this thread's pool, and is lent again.
    assert_eq!(pooled(), (1, 1));
    let wire = deflate(&mut d, chat(1).as_bytes());
    assert_eq!(pooled(), (1, 1));
    let mut utf8 = Utf8Validator::new();
    i.begin(true);
    i.feed(&wire, &mut utf8, &mut BudgetAccount::new(None), 0)
        .unwrap();
    assert_eq!(pooled(), (1, 0), "lent for the message in progress");
    assert_eq!(i.holds(), INFLATE_STATE);
    i.abort();
    assert_eq!(pooled(), (1, 1), "given back when it is dropped");
}

#[test]
fn the_pool_keeps_at_most_two_of_each() {
    let states: Vec<_> = (0..5).map(|_| lend_decompress()).collect();
    for d in states {
        give_decompress(d);
    }
    for bits in 9..=15 {
        give_compress(bits, 3, lend_compress(bits, 3));
    }
    assert_eq!(pooled(), (POOL_KEEP, POOL_KEEP));
    // The newest compressors are kept.
    let kept: Vec<u8> = POOL.with(|p| p.borrow().compressors.iter().map(|c| c.0).collect());
    assert_eq!(kept, [14, 15]);
}

#[test]
fn a_kept_window_reads_like_zlibs_own_state() {
    // Every pairing of the two ways to keep a context reads the other,
    // at every window size, across messages larger than the window.
    let data: Vec<u8> = (0..3000).flat_map(|n| chat(n).into_bytes()).collect();
    for bits in 8..=15 {
        for (ours, theirs) in [
            (DeflatePolicy::Dedicated(4096), DeflatePolicy::Takeover),
            (DeflatePolicy::Takeover, DeflatePolicy::Dedicated(4096)),
            (
                DeflatePolicy::Dedicated(4096),
                DeflatePolicy::Dedicated(4096),
            ),
        ] {
            let mut d = Deflater::under(ours, 6, bits, false, 0);
            let mut i = Inflater::under(theirs, bits, false, 1 << 20);
            let mut at = 0;
            for size in [10, 300, 1, 5000, 40_000, 77, 0, 2000] {
                let msg = &data[at..at + size];
                at += size;
                let wire = deflate(&mut d, msg);
                assert_eq!(
                    inflate(&mut i, &wire, false).unwrap(),
                    Message::binary(msg.to_vec()),
                    "{bits} bits, {ours:?} to {theirs:?}, {size} bytes"
                );
            }
        }
    }
}

#[test]
fn a_kept_window_compresses_as_well_as_zlibs_state_within_it() {
    let (mut own, mut window) = (
        Deflater::under(DeflatePolicy::Takeover, 6, 11, false, 0),
        Deflater::under(DeflatePolicy::Dedicated(4096), 6, 11, false, 0),
    );
    let mut fresh = Deflater::under(DeflatePolicy::Shared, 6, 11, true, 0);
    let (mut a, mut b, mut c) = (0, 0, 0);
    for n in 0..200 {
        let msg = chat(n);
        a += deflate(&mut own, msg.as_bytes()).len();
        b += deflate(&mut window, msg.as_bytes()).len();
        c += deflate(&mut fresh, msg.as_bytes()).len();
    }
    assert!(b * 10 <= a * 11, "window {b} vs own {a}");
    assert!(b * 2 < c, "window {b} vs none {c}");
    // What it keeps is the window's bytes, never more.
    let Kept::Window(Some(w)) = &window.kept else {
        panic!("no window kept")
    };
    assert_eq!((w.len(), w.capacity()), (2048, 2048));
}

#[test]
fn remember_keeps_the_last_bytes_and_grows_to_the_window() {
    let mut w = None;
    remember(&mut w, 8, b"");
    assert!(w.is_none());
    remember(&mut w, 8, b"abc");
    assert_eq!(w.as_deref().map(|v| &v[..]), Some(&b"abc"[..]));
    assert_eq!(w.as_ref().unwrap().capacity(), 3);
    remember(&mut w, 8, b"de");
    assert_eq!(w.as_ref().unwrap().capacity(), 6, "doubled");
    remember(&mut w, 8, b"fghij");
    assert_eq!(&w.as_ref().unwrap()[..], b"cdefghij");
    assert_eq!(w.as_ref().unwrap().capacity(), 8);
    remember(&mut w, 8, b"0123456789");
    assert_eq!(&w.as_ref().unwrap()[..], b"23456789");
    assert_eq!(w.as_ref().unwrap().capacity(), 8);
}

#[test]
fn a_shared_frame_joins_a_kept_window_and_restarts_zlibs_state() {
    for policy in [DeflatePolicy::Takeover, DeflatePolicy::Dedicated(64 << 10)] {
        let mut d = Deflater::under(policy, 6, 15, false, 0);
        let mut i = Inflater::under(DeflatePolicy::Takeover, 15, false, 1 << 20);
        for n in 0..20 {
            let msg = chat(n);
            if n % 3 == 1 {
                let wire = d.compress_alone(msg.as_bytes()).unwrap();
                d.sent_elsewhere(msg.as_bytes());
                assert_eq!(inflate(&mut i, &wire, true).unwrap(), Message::text(msg));
            } else {
                let wire = deflate(&mut d, msg.as_bytes());
                assert_eq!(inflate(&mut i, &wire, true).unwrap(), Message::text(msg));
            }
        }
    }
}

#[test]
fn a_final_block_empties_a_kept_window() {
    // "Hello" in a final block, then "Hello" referring back to it,
    // which an inflater that started over must refuse.
    let last = [0xf3, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00, 0x00];
    let again = [0xf2, 0x00, 0x11, 0x00, 0x00];
    let mut i = Inflater::under(DeflatePolicy::Dedicated(4096), 15, false, 1 << 20);
    inflate(&mut i, &[0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00], true).unwrap();
    assert!(matches!(&i.kept, Kept::Window(Some(w)) if w[..] == *b"Hello"));
    assert_eq!(
        inflate(&mut i, &again, true).unwrap(),
        Message::text("Hello")
    );
    inflate(&mut i, &last, true).unwrap();
    assert!(matches!(i.kept, Kept::Window(None)));
    assert!(inflate(&mut i, &again, true).is_err());
}

#[test]
fn decompression_state_is_asked_of_the_budget() {
    use crate::budget::MemoryBudget;
    let mut d = Deflater::under(DeflatePolicy::Shared, 6, 15, true, 0);
    let wire = deflate(&mut d, chat(0).as_bytes());
    for policy in [DeflatePolicy::Shared, DeflatePolicy::Takeover] {
        let budget = MemoryBudget::new(INFLATE_STATE + (16 << 10)).allowance(0);
        let mut other = BudgetAccount::new(Some(budget.clone()));
        assert_eq!(other.try_set(Held::Fragments, 20 << 10), Grant::Granted);
        let mut acct = BudgetAccount::new(Some(budget.clone()));
        let mut i = Inflater::under(policy, 15, policy == DeflatePolicy::Shared, 1 << 20);
        let mut utf8 = Utf8Validator::new();
        i.begin(true);
        let fed = i.feed(&wire, &mut utf8, &mut acct, 0).unwrap();
        assert_eq!(fed.consumed, 0, "{policy:?}");
        assert!(fed.wait.is_some(), "{policy:?}");
        assert!(i.msg.as_ref().unwrap().lent.is_none() && i.holds() == 0);
        other.release_all();
        let fed = i.feed(&wire, &mut utf8, &mut acct, 0).unwrap();
        assert_eq!((fed.consumed, fed.wait), (wire.len(), None));
        assert_eq!(acct.held(Held::Compression), INFLATE_STATE);
        i.finish(&mut utf8, &mut acct).unwrap().unwrap();
        // A lent state goes back; an own one stays, and stays counted.
        let kept = if policy == DeflatePolicy::Shared {
            0
        } else {
            INFLATE_STATE
        };
        assert_eq!(acct.held(Held::Compression), kept, "{policy:?}");
    }
}

#[test]
fn zlibs_own_compressor_is_asked_of_the_budget_or_the_message_goes_plain() {
    use crate::budget::MemoryBudget;
    let budget = MemoryBudget::new(deflate_state(15) + (8 << 10)).allowance(0);
    let mut hog = BudgetAccount::new(Some(budget.clone()));
    assert_eq!(hog.try_set(Held::Fragments, 16 << 10), Grant::Granted);
    let mut d = Deflater::new(6, 15, false, 0);
    d.count_in(&budget);
    let msg = chat(1);
    let refused = d.compress(msg.as_bytes(), <[u8]>::to_vec).unwrap();
    assert_eq!(refused, None, "no room: not compressed");
    assert!(matches!(d.kept, Kept::Own(Own::Unmade(_))));
    assert_eq!(budget.in_use(), 16 << 10);
    hog.release_all();
    // Room again: the next message makes the state, charged while it lives.
    let wire = deflate(&mut d, msg.as_bytes());
    assert_eq!(budget.in_use(), deflate_state(15));
    let mut i = Inflater::new(15, false, 1 << 20);
    assert_eq!(inflate(&mut i, &wire, true).unwrap(), Message::text(msg));
    drop(d);
    assert_eq!(budget.in_use(), 0, "given back with the compressor");
    // The other policies borrow their state: nothing to charge.
    for policy in [DeflatePolicy::Shared, DeflatePolicy::Dedicated(4096)] {
        let mut d = Deflater::under(policy, 6, 11, policy == DeflatePolicy::Shared, 0);
        d.count_in(&budget);
        deflate(&mut d, chat(2).as_bytes());
        assert_eq!(budget.in_use(), 0, "{policy:?}");
    }
}

#[test]
fn a_dedicated_side_compresses_within_its_own_window_whatever_is_allowed() {
    let params = DeflateParams::default();
    for (role, bits) in [(Role::Client, 10), (Role::Server, 11)] {
        let config = DeflateConfig::default().policy(DeflatePolicy::Dedicated(3072));
        let (i, d) = pair(role, &params, &config, 1 << 20).unwrap();
        assert_eq!(d.zlib_bits, bits, "{role:?}");
        // The peer's window is what it negotiated.
        assert_eq!(i.zlib_bits, 15, "{role:?}");
    }
    let (_, d) = pair(Role::Client, &params, &DeflateConfig::default(), 1 << 20).unwrap();
    assert_eq!(d.zlib_bits, 15);
}
