//! Checks of the repository that the compiler cannot make, run by CI:
//!
//! - **No circles between files.** No two files of a crate depend on each
//!   other, directly or through others (strongly connected components of
//!   the file-level import graph; see `graph.rs` for how it is built).
//!   Crate boundaries (`wavesock-proto` below `wavesock`) are the
//!   compiler's; inside a crate, this.
//! - **The handshake's layer.** `src/handshake/` is sans-IO: it reaches
//!   only itself and the protocol core (`crate::proto`, another crate), and
//!   no Tokio or futures crate, in tests too.
//! - **Plain configuration.** `src/config.rs` (the user's settings) reaches
//!   no file whose non-test code uses Tokio or futures.
//!
//! Usage: `cargo run -p xtask -- check [CRATE_DIR...]` (default: `.` and
//! `proto`); `cargo run -p xtask -- edges [CRATE_DIR]` lists every edge
//! with the line it comes from. Exits 1 on a finding.

mod graph;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use graph::{Crate, Edge, Target, circles};

const ASYNC_CRATES: &[&str] = &["tokio", "tokio_util", "futures", "futures_util"];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, dirs) = match args.split_first() {
        Some((c, rest)) => (c.as_str(), rest.to_vec()),
        None => ("check", Vec::new()),
    };
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dirs = if dirs.is_empty() {
        vec![".".to_string(), "proto".to_string()]
    } else {
        dirs
    };
    let mut findings = Vec::new();
    for dir in &dirs {
        let root = repo.join(dir);
        let krate = match Crate::load(&root.join("src/lib.rs")) {
            Ok(k) => k,
            Err(e) => {
                eprintln!("xtask: {e}");
                return ExitCode::from(2);
            }
        };
        match cmd {
            "check" => findings.extend(check(&krate, &root)),
            "edges" => {
                for ((a, b), e) in krate.edges() {
                    let test = if e.test_only { " (tests only)" } else { "" };
                    println!(
                        "{}:{} -> {}{test}",
                        krate.name(a, &root),
                        e.line,
                        krate.name(b, &root)
                    );
                }
            }
            _ => {
                eprintln!("xtask: unknown command {cmd} (check, edges)");
                return ExitCode::from(2);
            }
        }
    }
    for f in &findings {
        println!("{f}");
    }
    if findings.is_empty() {
        if cmd == "check" {
            println!("xtask check: no circles, layers hold ({})", dirs.join(", "));
        }
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Every finding in the crate at `root`, one line (or block) each.
pub fn check(krate: &Crate, root: &Path) -> Vec<String> {
    let edges = krate.edges();
    // Test code is a node of its own (as if in a file beside its module's),
    // and nothing depends on it: its edges close no circle.
    let live: BTreeMap<_, _> = edges
        .iter()
        .filter(|(_, e)| !e.test_only)
        .map(|(k, e)| (*k, e.clone()))
        .collect();
    let mut out = Vec::new();
    for comp in circles(krate.files.len(), &live) {
        let mut msg = format!("circle of {} files:", comp.len());
        for &a in &comp {
            for &b in &comp {
                if let Some(e) = live.get(&(a, b)) {
                    msg.push_str(&format!(
                        "\n  {}:{} -> {}",
                        krate.name(a, root),
                        e.line,
                        krate.name(b, root)
                    ));
                }
            }
        }
        out.push(msg);
    }
    out.extend(handshake_layer(krate, root));
    out.extend(plain_config(krate, root, &edges));
    out
}

fn under(krate: &Crate, file: usize, root: &Path, dir: &str) -> bool {
    krate.files[file].path.starts_with(root.join(dir))
}

/// `src/handshake/` reaches only itself, `crate::proto` and no async crate.
fn handshake_layer(krate: &Crate, root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (id, file) in krate.files.iter().enumerate() {
        if !under(krate, id, root, "src/handshake") {
            continue;
        }
        for r in &file.refs {
            let bad = match krate.resolve(r.module, &r.segs) {
                Some(Target::Extern(c)) => ASYNC_CRATES.contains(&c.as_str()),
                Some(Target::Files(to)) => {
                    to.iter().any(|&t| !under(krate, t, root, "src/handshake"))
                }
                None => false,
            };
            if bad {
                out.push(format!(
                    "{}:{}: the handshake reaches `{}`, outside its layer (itself and crate::proto only, no Tokio or futures)",
                    krate.name(id, root),
                    r.line,
                    r.segs.join("::")
                ));
            }
        }
    }
    out
}

/// `src/config.rs` reaches no file whose non-test code uses an async crate.
fn plain_config(krate: &Crate, root: &Path, edges: &BTreeMap<(usize, usize), Edge>) -> Vec<String> {
    let Some(config) =
        (0..krate.files.len()).find(|&f| krate.files[f].path == root.join("src/config.rs"))
    else {
        return Vec::new();
    };
    let uses_async = |f: usize| {
        krate.files[f].refs.iter().find(|r| {
            !r.test
                && matches!(krate.resolve(r.module, &r.segs),
                    Some(Target::Extern(c)) if ASYNC_CRATES.contains(&c.as_str()))
        })
    };
    let mut seen = BTreeSet::from([config]);
    let mut queue = VecDeque::from([config]);
    let mut out = Vec::new();
    while let Some(f) = queue.pop_front() {
        if let Some(r) = uses_async(f) {
            out.push(format!(
                "{}:{}: uses `{}`, and src/config.rs reaches this file: configuration must stay plain data",
                krate.name(f, root),
                r.line,
                r.segs.join("::")
            ));
        }
        for (&(a, b), e) in edges.range((f, 0)..(f + 1, 0)) {
            debug_assert_eq!(a, f);
            if !e.test_only && seen.insert(b) {
                queue.push_back(b);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
