//! zlib's state and the compression buffer, lent per thread: a
//! connection holds a compressor or decompressor only while a message is
//! under way (the `Shared` policy), not between messages.

use std::cell::RefCell;

use flate2::{Compress, Compression, Decompress};

/// How many compressors, and how many decompressors, a thread's pool keeps
/// while none is lent; more given back are freed.
pub(super) const POOL_KEEP: usize = 2;

/// A compression output buffer larger than this is freed after use, so
/// that one large message does not pin memory in a thread's pool.
const SCRATCH_KEEP: usize = 64 << 10;

/// zlib state lent for one message at a time, a pool per thread. A message
/// is compressed in one call, so a thread lends at most one compressor at
/// once; a decompressor is lent from a message's first frame to its last,
/// which may span reads, so slow messages can borrow more than the pool
/// keeps (each counted in its connection's memory budget).
#[derive(Default)]
pub(super) struct Pool {
    /// With the window bits and level each was made for.
    pub(super) compressors: Vec<(u8, u32, Compress)>,
    pub(super) decompressors: Vec<Decompress>,
    /// The output buffer of the compression under way.
    scratch: Vec<u8>,
}

thread_local! {
    pub(super) static POOL: RefCell<Pool> = RefCell::new(Pool::default());
}

/// A compressor with an empty window (a thread that is exiting, whose pool
/// is gone, gets a new one).
pub(super) fn lend_compress(bits: u8, level: u32) -> Compress {
    let found = POOL
        .try_with(|p| {
            let mut p = p.borrow_mut();
            let i = p
                .compressors
                .iter()
                .position(|(b, l, _)| (*b, *l) == (bits, level))?;
            Some(p.compressors.swap_remove(i).2)
        })
        .ok()
        .flatten();
    match found {
        Some(mut c) => {
            c.reset();
            c
        }
        None => Compress::new_with_window_bits(Compression::new(level), false, bits),
    }
}

pub(super) fn give_compress(bits: u8, level: u32, c: Compress) {
    let _ = POOL.try_with(|p| {
        let mut p = p.borrow_mut();
        p.compressors.push((bits, level, c));
        if p.compressors.len() > POOL_KEEP {
            p.compressors.remove(0);
        }
    });
}

/// A decompressor with the largest window, which reads any peer's stream.
pub(super) fn lend_decompress() -> Decompress {
    match POOL.try_with(|p| p.borrow_mut().decompressors.pop()) {
        Ok(Some(mut d)) => {
            d.reset(false);
            d
        }
        _ => Decompress::new_with_window_bits(false, 15),
    }
}

pub(super) fn give_decompress(d: Decompress) {
    let _ = POOL.try_with(|p| {
        let mut p = p.borrow_mut();
        if p.decompressors.len() < POOL_KEEP {
            p.decompressors.push(d);
        }
    });
}

pub(super) fn lend_scratch() -> Vec<u8> {
    let mut v = POOL
        .try_with(|p| std::mem::take(&mut p.borrow_mut().scratch))
        .unwrap_or_default();
    v.clear();
    v
}

pub(super) fn give_scratch(v: Vec<u8>) {
    if v.capacity() <= SCRATCH_KEEP {
        let _ = POOL.try_with(|p| p.borrow_mut().scratch = v);
    }
}
