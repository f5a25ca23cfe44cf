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
