//! A global allocator that counts live and peak heap bytes, for the tests
//! that prove memory bounds, and [`alone`], which gives such a test a
//! process of its own. A test binary with counting tests installs the
//! allocator in its `main.rs`:
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: support::counting::Counting = support::counting::Counting;
//! ```
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Forwards to the system allocator and counts.
pub struct Counting;

/// Bytes allocated and not yet freed.
pub static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The most `LIVE` has been since it was last reset.
pub static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Allocations made (reallocations included).
pub static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(live, Ordering::SeqCst);
        ALLOCS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: same layout contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: ptr came from System.alloc with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// The variable that tells a test process it was started by [`alone`] to
/// run the named test.
const ALONE: &str = "WAVESOCK_TEST_ALONE";

/// Held while a child of [`alone`] runs.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Makes the calling test run in a process of its own, where the heap the
/// allocator counts is that test's alone, whatever else its binary runs in
/// parallel. Call it first; the test goes on only if it returns `true`:
///
/// ```ignore
/// if !counting::alone() {
///     return;
/// }
/// ```
///
/// In the test binary it runs the calling test again in a child process
/// ([`run_test`](super::child::run_test)), which fails with the child's
/// output if the test failed there, and returns `false`. In that child it
/// returns `true`.
pub fn alone() -> bool {
    // libtest names each test's thread after the test's path.
    let name = std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .expect("alone() is called on a test's own thread")
        .to_owned();
    if std::env::var_os(ALONE).is_some_and(|v| v == name.as_str()) {
        return true;
    }
    // One counting test at a time, as when each had a binary of its own:
    // they move hundreds of MiB, and two at once (with the rest of the
    // binary beside them) missed their deadlines on two loaded cores.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let text = super::child::run_test(&name, |command| {
        command.env(ALONE, &name);
    });
    // What the child printed is the test's own output.
    print!("{text}");
    false
}
