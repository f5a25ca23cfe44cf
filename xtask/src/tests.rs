//! The checks on small fake crates written to a temporary directory, and
//! on the fixture crates under `xtask/fixtures/`.

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// A crate made of `files` (path under the crate dir, text).
fn fake(files: &[(&str, &str)]) -> (Crate, PathBuf) {
    static N: AtomicUsize = AtomicUsize::new(0);
    let root = std::env::temp_dir().join(format!(
        "xtask-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&root);
    for (path, text) in files {
        let p = root.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    let krate = Crate::load(&root.join("src/lib.rs")).unwrap();
    (krate, root)
}

fn findings(files: &[(&str, &str)]) -> Vec<String> {
    let (krate, root) = fake(files);
    let out = check(&krate, &root, &[]);
    let _ = fs::remove_dir_all(&root);
    out
}

#[test]
fn two_files_that_use_each_other_are_a_circle_with_their_lines() {
    let out = findings(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "use crate::b::B;\npub struct A;\n"),
        (
            "src/b.rs",
            "pub struct B;\n\nfn f() { let _ = crate::a::A; }\n",
        ),
    ]);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].contains("circle of 2 files"), "{}", out[0]);
    assert!(out[0].contains("src/a.rs:1 -> src/b.rs"), "{}", out[0]);
    assert!(out[0].contains("src/b.rs:3 -> src/a.rs"), "{}", out[0]);
}

#[test]
fn a_chain_without_a_way_back_is_no_circle() {
    let out = findings(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("src/a.rs", "use crate::b::B;\npub struct A;\n"),
        ("src/b.rs", "use crate::c::C;\npub struct B;\n"),
        ("src/c.rs", "pub struct C;\n"),
    ]);
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn a_circle_through_three_files_is_found() {
    let out = findings(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("src/a.rs", "use crate::b::B;\npub struct A;\n"),
        ("src/b.rs", "use crate::c::C;\npub struct B;\n"),
        ("src/c.rs", "pub struct C;\nfn f(_: super::a::A) {}\n"),
    ]);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].contains("circle of 3 files"));
}

#[test]
fn a_re_export_leads_to_the_file_that_defines_the_item() {
    // m/mod.rs re-exports x's X and uses y; y uses X through the
    // re-export. Followed, y depends on x, not on mod.rs: no circle.
    let files = [
        ("src/lib.rs", "mod m;\n"),
        (
            "src/m/mod.rs",
            "mod x;\nmod y;\npub use x::X;\npub use y::Y;\n",
        ),
        ("src/m/x.rs", "pub struct X;\n"),
        ("src/m/y.rs", "use super::X;\npub struct Y(X);\n"),
    ];
    assert!(findings(&files).is_empty());
    let (krate, root) = fake(&files);
    let edges: Vec<String> = krate
        .edges()
        .keys()
        .map(|&(a, b)| format!("{} -> {}", krate.name(a, &root), krate.name(b, &root)))
        .collect();
    assert!(
        edges.contains(&"src/m/y.rs -> src/m/x.rs".to_string()),
        "{edges:?}"
    );
    assert!(
        !edges.contains(&"src/m/y.rs -> src/m/mod.rs".to_string()),
        "{edges:?}"
    );
}

#[test]
fn paths_in_macro_bodies_count() {
    let out = findings(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        (
            "src/a.rs",
            "pub struct A;\nfn f() { println!(\"{:?}\", crate::b::B); }\n",
        ),
        (
            "src/b.rs",
            "pub struct B;\nfn f() { let _ = crate::a::A; }\n",
        ),
    ]);
    assert_eq!(out.len(), 1, "{out:?}");
}

#[test]
fn comments_and_strings_are_not_dependencies() {
    let out = findings(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        (
            "src/a.rs",
            "/// See [`crate::b::B`].\npub struct A;\nconst S: &str = \"crate::b::B\";\n// crate::b::B\n",
        ),
        (
            "src/b.rs",
            "pub struct B;\nfn f() { let _ = crate::a::A; }\n",
        ),
    ]);
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn both_cfg_alternatives_of_a_module_are_reached() {
    let files = [
        (
            "src/lib.rs",
            "#[cfg(feature = \"x\")]\nmod c;\n#[cfg(not(feature = \"x\"))]\n#[path = \"stub.rs\"]\nmod c;\nmod a;\n",
        ),
        ("src/c.rs", "pub struct C;\n"),
        (
            "src/stub.rs",
            "pub struct C;\nfn f() { let _ = crate::a::A; }\n",
        ),
        (
            "src/a.rs",
            "pub struct A;\nfn f() { let _ = crate::c::C; }\n",
        ),
    ];
    let out = findings(&files);
    assert_eq!(out.len(), 1, "the stub and a.rs: {out:?}");
    assert!(out[0].contains("src/stub.rs"));
}

#[test]
fn a_path_attribute_in_a_plain_file_is_relative_to_its_directory() {
    let (krate, root) = fake(&[
        ("src/lib.rs", "mod conn;\n"),
        (
            "src/conn.rs",
            "#[cfg(test)]\n#[path = \"conn_tests.rs\"]\nmod tests;\n",
        ),
        ("src/conn_tests.rs", "use super::*;\n"),
    ]);
    let names: Vec<String> = (0..krate.files.len())
        .map(|f| krate.name(f, &root))
        .collect();
    assert!(
        names.contains(&"src/conn_tests.rs".to_string()),
        "{names:?}"
    );
}

#[test]
fn the_handshake_reaches_only_itself_and_the_core() {
    let ok = [
        (
            "src/lib.rs",
            "pub use wavesock_proto as proto;\npub mod handshake;\nmod error;\n",
        ),
        (
            "src/handshake/mod.rs",
            "mod server;\nuse crate::proto::Role;\nuse self::server::S;\n",
        ),
        ("src/handshake/server.rs", "pub struct S;\nuse std::io;\n"),
        ("src/error.rs", "pub struct E;\n"),
    ];
    assert!(findings(&ok).is_empty(), "{:?}", findings(&ok));

    let mut up = ok;
    up[2] = (
        "src/handshake/server.rs",
        "pub struct S;\nfn f(_: crate::error::E) {}\n",
    );
    let out = findings(&up);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(
        out[0].starts_with("src/handshake/server.rs:2:"),
        "{}",
        out[0]
    );

    let mut tokio = ok;
    tokio[2] = (
        "src/handshake/server.rs",
        "pub struct S;\n#[cfg(test)]\nmod tests {\n    use tokio::io::AsyncRead;\n}\n",
    );
    let out = findings(&tokio);
    assert_eq!(out.len(), 1, "tests count too: {out:?}");
    assert!(out[0].contains("tokio::io::AsyncRead"), "{}", out[0]);
}

#[test]
fn configuration_reaches_no_file_that_uses_tokio_outside_tests() {
    let files = |b: &'static str| {
        [
            ("src/lib.rs", "mod config;\nmod b;\nmod c;\n"),
            ("src/config.rs", "use crate::b::B;\npub struct Config(B);\n"),
            ("src/b.rs", b),
            ("src/c.rs", "pub struct C;\nuse tokio::net::TcpStream;\n"),
        ]
    };
    let out = findings(&files("pub struct B;\nuse futures_util::Stream;\n"));
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].starts_with("src/b.rs:2:"), "{}", out[0]);
    // c.rs uses Tokio too but is not reached; tests may use it.
    let out = findings(&files(
        "pub struct B;\n#[cfg(test)]\nmod tests {\n    use tokio::net::TcpStream;\n}\n",
    ));
    assert!(out.is_empty(), "{out:?}");
    let out = findings(&files("pub struct B;\nfn f(_: crate::c::C) {}\n"));
    assert_eq!(out.len(), 1, "reached through b: {out:?}");
    assert!(out[0].starts_with("src/c.rs:2:"), "{}", out[0]);
}

#[test]
fn a_glob_import_resolves_names_through_it() {
    let (krate, root) = fake(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "pub struct A;\n"),
        (
            "src/b.rs",
            "use crate::a::*;\nfn f() { let _ = self::A; }\n",
        ),
    ]);
    let b = (0..krate.files.len())
        .find(|&f| krate.name(f, &root) == "src/b.rs")
        .unwrap();
    let a = (0..krate.files.len())
        .find(|&f| krate.name(f, &root) == "src/a.rs")
        .unwrap();
    let r = krate.files[b]
        .refs
        .iter()
        .find(|r| r.segs == ["self", "A"])
        .unwrap();
    assert_eq!(
        krate.resolve(r.module, &r.segs),
        Some(Target::Files(BTreeSet::from([a])))
    );
}

#[test]
fn a_module_whose_tests_use_a_child_that_uses_it_is_no_circle() {
    let out = findings(&[
        ("src/lib.rs", "mod m;\n"),
        (
            "src/m/mod.rs",
            "mod x;\npub struct M;\n#[cfg(test)]\nmod tests {\n    use super::x::X;\n}\n",
        ),
        ("src/m/x.rs", "pub struct X(super::M);\n"),
    ]);
    assert!(out.is_empty(), "{out:?}");
    // The same use outside the tests is one.
    let out = findings(&[
        ("src/lib.rs", "mod m;\n"),
        ("src/m/mod.rs", "mod x;\npub struct M;\nfn f(_: x::X) {}\n"),
        ("src/m/x.rs", "pub struct X(super::M);\n"),
    ]);
    assert_eq!(out.len(), 1, "{out:?}");
}

#[test]
fn a_re_export_is_an_edge_only_when_the_file_uses_the_name() {
    let files = |extra: &'static str| {
        [
            ("src/lib.rs", "mod m;\n"),
            ("src/m/mod.rs", extra),
            ("src/m/y.rs", "pub struct Y;\nfn f(_: super::M) {}\n"),
        ]
    };
    assert!(findings(&files("mod y;\npub struct M;\npub use y::Y;\n")).is_empty());
    let out = findings(&files(
        "mod y;\npub struct M;\npub use y::Y;\nfn g() -> Y { Y }\n",
    ));
    assert_eq!(out.len(), 1, "{out:?}");
}

#[test]
fn files_reached_through_a_test_module_are_test_code() {
    let out = findings(&[
        ("src/lib.rs", "mod conn;\n"),
        (
            "src/conn.rs",
            "pub struct C;\n#[cfg(test)]\n#[path = \"conn_tests.rs\"]\nmod tests;\nfn f(_: tests::T) {}\n",
        ),
        ("src/conn_tests.rs", "pub struct T;\nfn g(_: super::C) {}\n"),
    ]);
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn cfg_predicates_that_need_test_are_test_code() {
    let out = findings(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "pub struct A;\nfn f(_: crate::b::B) {}\n"),
        (
            "src/b.rs",
            "pub struct B;\n#[cfg(all(test, feature = \"x\"))]\nfn g(_: crate::a::A) {}\n#[test]\nfn h() { let _ = crate::a::A; }\n",
        ),
    ]);
    assert!(out.is_empty(), "{out:?}");
    let out = findings(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "pub struct A;\nfn f(_: crate::b::B) {}\n"),
        (
            "src/b.rs",
            "pub struct B;\n#[cfg(not(test))]\nfn g(_: crate::a::A) {}\n",
        ),
    ]);
    assert_eq!(out.len(), 1, "not(test) is ordinary code: {out:?}");
}

/// The findings in the fixture crate `xtask/fixtures/<name>/`, with the
/// module circles `known` allowed.
fn fixture(name: &str, known: &[&Known]) -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name);
    let krate = Crate::load(&root.join("src/lib.rs")).unwrap();
    check(&krate, &root, known)
}

#[test]
fn modules_in_a_circle_without_a_circle_of_files_are_found() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/module_circle");
    let krate = Crate::load(&root.join("src/lib.rs")).unwrap();
    // The file graph has no circle: only the module-level check sees one.
    assert!(circles(krate.files.len(), &krate.edges()).is_empty());
    let out = fixture("module_circle", &[]);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(
        out[0].starts_with("circle of 2 modules in `crate`: decoder, deflate"),
        "{}",
        out[0]
    );
    assert!(
        out[0]
            .contains("crate::decoder -> crate::deflate: src/decoder.rs:3 -> src/deflate/codec.rs"),
        "{}",
        out[0]
    );
    assert!(
        out[0].contains("crate::deflate -> crate::decoder: src/deflate/mod.rs:8 -> src/decoder.rs"),
        "{}",
        out[0]
    );
}

#[test]
fn modules_cut_apart_by_a_trait_are_no_circle() {
    let out = fixture("module_layers", &[]);
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn a_circle_of_modules_is_found_below_the_crate_root_too() {
    let out = findings(&[
        ("src/lib.rs", "mod m;\n"),
        ("src/m/mod.rs", "mod a;\nmod b;\n"),
        ("src/m/a/mod.rs", "mod x;\nmod y;\n"),
        ("src/m/a/x.rs", "pub struct X(crate::m::b::B);\n"),
        ("src/m/a/y.rs", "pub struct Y;\n"),
        ("src/m/b.rs", "pub struct B;\nfn f(_: super::a::y::Y) {}\n"),
    ]);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(
        out[0].starts_with("circle of 2 modules in `crate::m`: a, b"),
        "{}",
        out[0]
    );
    assert!(
        out[0].contains("crate::m::b -> crate::m::a: src/m/b.rs:2 -> src/m/a/y.rs"),
        "{}",
        out[0]
    );
}

#[test]
fn a_circle_of_modules_that_only_tests_close_is_none() {
    let files = |tail: &'static str| {
        [
            ("src/lib.rs", "mod a;\nmod b;\n"),
            ("src/a/mod.rs", "mod x;\nmod y;\n"),
            ("src/a/x.rs", "pub struct X(crate::b::B);\n"),
            ("src/a/y.rs", "pub struct Y;\n"),
            ("src/b.rs", tail),
        ]
    };
    let out = findings(&files(
        "pub struct B;\n#[cfg(test)]\nmod tests {\n    use crate::a::y::Y;\n}\n",
    ));
    assert!(out.is_empty(), "{out:?}");
    let out = findings(&files("pub struct B;\nuse crate::a::y::Y;\n"));
    assert_eq!(out.len(), 1, "outside the tests: {out:?}");
}

#[test]
fn children_meeting_only_in_their_parents_file_are_no_circle() {
    // a/x.rs uses the parent's M, the parent's file uses b, b uses a/y.rs:
    // no file circle, and among the children only b -> a.
    let out = findings(&[
        ("src/lib.rs", "mod m;\n"),
        (
            "src/m/mod.rs",
            "mod a;\nmod b;\npub struct M;\nfn f(_: b::B) {}\n",
        ),
        ("src/m/a/mod.rs", "mod x;\nmod y;\n"),
        ("src/m/a/x.rs", "pub struct X(crate::m::M);\n"),
        ("src/m/a/y.rs", "pub struct Y;\n"),
        ("src/m/b.rs", "pub struct B;\nfn f(_: super::a::y::Y) {}\n"),
    ]);
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn a_circle_of_files_between_two_modules_is_reported_once() {
    let out = findings(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a/mod.rs", "mod x;\n"),
        ("src/a/x.rs", "pub struct X(crate::b::B);\n"),
        ("src/b.rs", "pub struct B;\nfn f(_: crate::a::x::X) {}\n"),
    ]);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].starts_with("circle of 2 files"), "{}", out[0]);
}

#[test]
fn a_known_circle_of_modules_passes_only_as_listed() {
    let known = |members: &'static [&'static str]| Known {
        dir: "xtask/fixtures/module_circle",
        parent: "crate",
        members,
    };
    let listed = known(&["deflate", "decoder"]);
    assert!(fixture("module_circle", &[&listed]).is_empty());
    // Listed with a module it does not have: the circle found is a new one,
    // and the entry matches nothing.
    let wider = known(&["decoder", "deflate", "encoder"]);
    let out = fixture("module_circle", &[&wider]);
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(out[0].starts_with("circle of 2 modules"), "{}", out[0]);
    assert!(
        out[1].starts_with(
            "known circle of modules in `crate` (decoder, deflate, encoder) is not there"
        ),
        "{}",
        out[1]
    );
    // Cut: the entry must go.
    let out = fixture("module_layers", &[&listed]);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].starts_with("known circle"), "{}", out[0]);
}

#[test]
fn a_re_export_ties_modules_that_no_file_edge_does() {
    // a.rs re-exports b's B without using it: no file edge a -> b, so no
    // circle of files, but B is part of a's face, and b uses a.
    let files = |a: &'static str| {
        [
            ("src/lib.rs", "mod a;\nmod b;\npub use a::A;\n"),
            ("src/a.rs", a),
            ("src/b.rs", "pub struct B;\nfn f(_: crate::a::A) {}\n"),
        ]
    };
    let out = findings(&files("pub use crate::b::B;\npub struct A;\n"));
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(
        out[0].contains("crate::a -> crate::b: src/a.rs:1 -> src/b.rs"),
        "{}",
        out[0]
    );
    // A re-export of its own child ties no siblings.
    let own = findings(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a/mod.rs", "mod x;\npub use x::X;\n"),
        ("src/a/x.rs", "pub struct X;\n"),
        ("src/b.rs", "pub struct B;\nfn f(_: crate::a::X) {}\n"),
    ]);
    assert!(own.is_empty(), "{own:?}");
    // Nor does one under test.
    let out = findings(&files(
        "#[cfg(test)]\npub use crate::b::B;\npub struct A;\n",
    ));
    assert!(out.is_empty(), "{out:?}");
}
