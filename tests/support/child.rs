//! One test of this test binary run again in a child process: for a test
//! that needs a process of its own (its own heap to count, its own
//! environment, no crypto provider installed yet).
#![allow(dead_code)]

use std::process::Command;

/// Runs the test at `path` (libtest's name for it: its module path within
/// the binary, without the crate's name) alone in a new process of this
/// binary, ignored or not, after `configure` has set the command's
/// environment. Fails with the child's output unless the child ran that
/// one test and it passed; returns what the child printed.
pub fn run_test(path: &str, configure: impl FnOnce(&mut Command)) -> String {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command
        .args([path, "--exact", "--include-ignored", "--nocapture"])
        .args(["--test-threads", "1"]);
    configure(&mut command);
    let out = command.output().expect("the test binary runs again");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{path} failed in a child process:\n{text}"
    );
    assert!(
        text.contains("1 passed"),
        "{path} did not run in a child process:\n{text}"
    );
    text
}

/// `name`'s path as libtest knows it, given the `module_path!()` of the
/// module that holds it.
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, within)) => format!("{within}::{name}"),
        None => name.to_owned(),
    }
}

/// The variable that tells a test process it was started by [`alone`] to
/// run the named test.
const ALONE: &str = "WAVESOCK_TEST_ALONE";

/// Held while a child of [`alone`] runs.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Makes the calling test run in a process of its own, where process-wide
/// state is that test's alone, whatever else its binary runs in parallel:
/// the heap the allocator counts, or `tracing`'s per-callsite interest
/// (which another thread registering a callsite while a test installs its
/// subscriber can leave at "never"). Call it first; the test goes on only if it returns `true`:
///
/// ```ignore
/// if !child::alone() {
///     return;
/// }
/// ```
///
/// In the test binary it runs the calling test again in a child process
/// ([`run_test`]), which fails with the child's
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
    // One such test at a time, as when each had a binary of its own:
    // they move hundreds of MiB, and two at once (with the rest of the
    // binary beside them) missed their deadlines on two loaded cores.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let text = run_test(&name, |command| {
        command.env(ALONE, &name);
    });
    // What the child printed is the test's own output.
    print!("{text}");
    false
}
