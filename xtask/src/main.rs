//! Checks of the repository that the compiler cannot make, run by CI:
//!
//! - **No circles between files.** No two files of a crate depend on each
//!   other, directly or through others (strongly connected components of
//!   the file-level import graph; see `graph.rs` for how it is built).
//!   Crate boundaries (`wavesock-proto` below `wavesock`) are the
//!   compiler's; inside a crate, this.
//! - **No circles between modules.** Files can be free of circles while
//!   the modules they make up are not: `decoder.rs` used `deflate/codec.rs`
//!   and `deflate/mod.rs` used `decoder.rs`, no file circle, yet neither
//!   module could be understood without the other. So, for every module
//!   with child modules (the crate root, every directory module): child A
//!   depends on child B if a file of A's subtree has an edge of the file
//!   graph into a file of B's subtree, and a strongly connected component
//!   of more than one child is a finding, with one example edge per step.
//!   - A file belongs to the module whose `mod x;` loads it; an inline
//!     `mod x { .. }` is part of the file it is written in. A module's own
//!     file (`mod.rs`, `lib.rs`, `x.rs` beside `x/`) is no child's: children
//!     using the items of their parent, and the parent using theirs, is what
//!     a parent is for, and a circle through that file is a circle of files,
//!     which the first check finds.
//!   - Re-exports are followed as the file graph follows them (a path
//!     through `mod.rs`'s `pub use` is an edge to the file that defines the
//!     item). A `pub use` that its file does not use itself, which is no
//!     edge of the file graph, is one here: it makes another module's item
//!     part of this one's face. A parent's facade still ties none of its
//!     children together (its file is no child's), and a module
//!     re-exporting its own children or its parent's items makes no edge
//!     between siblings.
//!   - Edges only test code makes count for neither check: test code is a
//!     leaf nothing depends on, so it closes no circle.
//!   - A module circle is not reported again when a circle of files runs
//!     between exactly the same children: that finding names the knot.
//!   - [`KNOWN`] lists the module circles allowed for now, each exactly.
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

/// A circle of modules that a crate has now and CI lets pass until it is
/// cut: its members, exactly, so that a new circle, or a module joining or
/// leaving this one, is still a finding.
#[derive(Debug)]
pub struct Known {
    /// The crate's directory, relative to the repository (`.`, `proto`).
    pub dir: &'static str,
    /// The module whose children circle: `crate`, `crate::hub`.
    pub parent: &'static str,
    /// Those children, by name.
    pub members: &'static [&'static str],
}

/// The module circles known today, each to be cut and its entry removed
/// (the check fails on an entry it does not find, so the list only
/// shrinks). Empty: when this check came, neither crate had one once
/// `wavesock-proto`'s deflate stopped naming its decoder and encoder. An
/// entry reads `Known { dir: ".", parent: "crate", members: &["hub",
/// "topics"] }`, with a comment saying why it must stay for now.
pub const KNOWN: &[Known] = &[];

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
            "check" => {
                let here = root.canonicalize().ok();
                let known: Vec<&Known> = KNOWN
                    .iter()
                    .filter(|k| repo.join(k.dir).canonicalize().ok() == here)
                    .collect();
                findings.extend(check(&krate, &root, &known));
            }
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
/// `known`: the module circles allowed for now in this crate (see [`KNOWN`]).
pub fn check(krate: &Crate, root: &Path, known: &[&Known]) -> Vec<String> {
    let edges = krate.edges();
    // Test code is a node of its own (as if in a file beside its module's),
    // and nothing depends on it: its edges close no circle.
    let live: BTreeMap<_, _> = edges
        .iter()
        .filter(|(_, e)| !e.test_only)
        .map(|(k, e)| (*k, e.clone()))
        .collect();
    let mut out = Vec::new();
    let file_circles = circles(krate.files.len(), &live);
    for comp in &file_circles {
        let mut msg = format!("circle of {} files:", comp.len());
        for &a in comp {
            for &b in comp {
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
    // Between modules a re-export is a dependency like any use: the item is
    // part of the face of the module that re-exports it.
    let mut faces = live.clone();
    for (k, e) in krate.reexport_edges() {
        if !e.test_only {
            faces.entry(k).or_insert(e);
        }
    }
    out.extend(module_circles(krate, root, &faces, &file_circles, known));
    out.extend(handshake_layer(krate, root));
    out.extend(plain_config(krate, root, &edges));
    out
}

/// One edge between two children of a module: the first file edge that
/// makes it (from, to, line).
type Step = (usize, usize, usize);

/// The circles among the child modules of each module (see the top of this
/// file for the rule), less those in `known`, and the entries of `known`
/// that match no circle. `edges`: between files, outside test code,
/// re-exports included.
fn module_circles(
    krate: &Crate,
    root: &Path,
    edges: &BTreeMap<(usize, usize), Edge>,
    file_circles: &[Vec<usize>],
    known: &[&Known],
) -> Vec<String> {
    let ancestry: Vec<Vec<usize>> = krate
        .files
        .iter()
        .map(|f| krate.ancestry(f.module))
        .collect();
    // An edge between files a and b is an edge between two children of
    // one module only: the deepest module both are under (above it, both
    // are in one child; below it, one of them is outside). If a or b is
    // that module's own file, it is no child's, and the edge none.
    let mut levels: BTreeMap<usize, BTreeMap<(usize, usize), Step>> = BTreeMap::new();
    for (&(a, b), e) in edges {
        let (ca, cb) = (&ancestry[a], &ancestry[b]);
        let common = ca.iter().zip(cb).take_while(|(x, y)| x == y).count();
        if common < ca.len() && common < cb.len() {
            levels
                .entry(ca[common - 1])
                .or_default()
                .entry((ca[common], cb[common]))
                .or_insert((a, b, e.line));
        }
    }
    // The child of `parent` that file `f` is under, if any.
    let child_of = |parent: usize, f: usize| {
        let chain = &ancestry[f];
        let at = chain.iter().position(|&m| m == parent)?;
        chain.get(at + 1).copied()
    };
    let mut used = vec![false; known.len()];
    let mut out = Vec::new();
    for (parent, steps) in &levels {
        let nodes: Vec<usize> = steps
            .keys()
            .flat_map(|&(a, b)| [a, b])
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let index = |m: usize| nodes.binary_search(&m).unwrap();
        let graph: BTreeMap<(usize, usize), Edge> = steps
            .iter()
            .map(|(&(a, b), &(_, _, line))| {
                let edge = Edge {
                    line,
                    test_only: false,
                };
                ((index(a), index(b)), edge)
            })
            .collect();
        for comp in circles(nodes.len(), &graph) {
            let members: BTreeSet<usize> = comp.iter().map(|&i| nodes[i]).collect();
            // A circle of files between exactly these children is already
            // a finding, which names the same knot file by file.
            let said = file_circles.iter().any(|fc| {
                fc.iter()
                    .filter_map(|&f| child_of(*parent, f))
                    .collect::<BTreeSet<_>>()
                    == members
            });
            if said {
                continue;
            }
            let path = krate.module_path(*parent);
            let names: BTreeSet<&str> = members
                .iter()
                .map(|&m| krate.modules[m].name.as_str())
                .collect();
            if let Some(k) = known.iter().position(|k| {
                k.parent == path && k.members.iter().copied().collect::<BTreeSet<_>>() == names
            }) {
                used[k] = true;
                continue;
            }
            let mut msg = format!(
                "circle of {} modules in `{path}`: {}",
                members.len(),
                names.iter().copied().collect::<Vec<_>>().join(", ")
            );
            for &a in &members {
                for &b in &members {
                    if let Some(&(fa, fb, line)) = steps.get(&(a, b)) {
                        msg.push_str(&format!(
                            "\n  {} -> {}: {}:{line} -> {}",
                            krate.module_path(a),
                            krate.module_path(b),
                            krate.name(fa, root),
                            krate.name(fb, root)
                        ));
                    }
                }
            }
            out.push(msg);
        }
    }
    for (k, _) in known.iter().zip(&used).filter(|(_, u)| !**u) {
        out.push(format!(
            "known circle of modules in `{}` ({}) is not there as listed: it is cut, or grew, or shrank; update KNOWN in xtask/src/main.rs",
            k.parent,
            k.members.join(", ")
        ));
    }
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
