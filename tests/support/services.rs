//! Services some tests need beyond Rust and loopback (Redis, Node): a test
//! finds its service or skips, printing one line that says what to
//! install. CI, which must run every test, sets
//! `WAVESOCK_TEST_SERVICES=require`: a missing service then fails the test
//! that needed it. No test installs anything.
#![allow(dead_code)]

use std::process::{Command, Stdio};

/// The variable that turns a skip into a failure.
pub const REQUIRE: &str = "WAVESOCK_TEST_SERVICES";

/// Whether a test that needs `service` can run: `found`. If not, it is
/// skipped with one line naming `service` and `install`, or, under
/// `WAVESOCK_TEST_SERVICES=require`, fails.
pub fn available(service: &str, found: bool, install: &str) -> bool {
    if found {
        return true;
    }
    if std::env::var(REQUIRE).is_ok_and(|v| v == "require") {
        panic!("needs {service} ({install}), and {REQUIRE}=require");
    }
    // Past the test harness's capture (which keeps what a passing test
    // prints to itself), so that a run says what it skipped.
    let line = format!("skipped: {}: needs {service} ({install})\n", test_name());
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    false
}

/// The running test's name, as the harness names its thread.
fn test_name() -> String {
    std::thread::current().name().unwrap_or("a test").to_owned()
}

/// Whether `program --version` runs.
pub fn on_path(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
