#!/usr/bin/env bash
# Checks that every doc example builds with only the three crates a new user
# has: wavesock, tokio and futures-util (issue "What a new user trips on in
# the first hour"). `cargo test --doc` cannot tell: rustdoc gives examples
# every dependency and dev-dependency of the crate (bytes, http, tokio-test,
# hyper, axum, ...), so `bytes::Bytes` in an example passes there and fails
# in a user's project, where `wavesock::Bytes` works.
#
# Usage: scripts/check-doc-deps.sh              check, exit 1 on a failure
#        scripts/check-doc-deps.sh --list       list the examples found, with
#                                               their origin and extra crates
#        scripts/check-doc-deps.sh --self-test  check the checker on a fake
#                                               set of examples
#
# 1. rustdoc lists the examples itself: `cargo rustdoc -- -Zunstable-options
#    --output-format=doctest` (unstable, hence RUSTC_BOOTSTRAP=1, as the
#    docs.rs check) gives every doctest of the crate under all its features
#    (but the `-vendored` ones) as JSON: where its fence is, its attributes,
#    and the source rustdoc compiles (crate attributes, `extern crate`, the
#    code in its `fn main` wrapper). What rustdoc does not compile
#    (`ignore`, `compile_fail`, other languages) is left out, as it does.
# 2. Each becomes target/doc-deps/<package>/examples/ex_NNN.rs, whose first
#    line names the fence it came from (`// src/stream/pieces.rs:45`).
# 3. An example whose first line is `// Needs <crate>[, <crate>...]` (then
#    anything: `// Needs tokio-test (a dev-dependency for your tests).`) may
#    use those crates too, with the version and features of wavesock's own
#    [dev-dependencies] entry, else its [dependencies] one. Examples go to
#    one package per set of extra crates, all in a workspace with a copy of
#    Cargo.lock (same versions as the crate's own builds), and
#    `cargo check --workspace --examples --keep-going` runs there with
#    CARGO_TARGET_DIR=target/doc-deps/target (its own: features differ from
#    the crate's builds). Every package depends on exactly
#        wavesock     = { path = <repo>, features = <all but "default"
#                       and the -vendored ones> }
#        tokio        = { version = "1", features = ["full"] }
#        futures-util = "0.3"
#    plus its extra crates. Files are rewritten only when they change, so a
#    second run re-checks only what changed.
# Prints each compiler error with the example's origin (`file:line` of the
# fence, and the line in it) and exits 1 if any example fails.
#
# One file: bash only starts the embedded Python 3
# program. (Python tracebacks count lines from the `<<'PY'` line.)
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib

ROOT = os.getcwd()
OUT = os.path.join("target", "doc-deps")
# DOC_DEPS_TARGET_DIR: CI points it at the crate's own target directory,
# where the dependencies are already checked with these features.
TARGET_DIR = os.environ.get("DOC_DEPS_TARGET_DIR") or os.path.join(OUT, "target")
BASE_CRATES = ("wavesock", "tokio", "futures-util")

# ------------------------------------------------------------ extraction

NEEDS = re.compile(r"^\s*//\s*Needs\s+([A-Za-z0-9_-]+(?:\s*,\s*[A-Za-z0-9_-]+)*)")


def needs_of(code):
    """Crates an example says it needs on its first line."""
    first = next((t for t in code.splitlines() if t.strip()), "")
    m = NEEDS.match(first)
    if not m:
        return ()
    return tuple(c.strip() for c in m.group(1).split(","))


class Example:
    """One doctest as rustdoc compiles it: where its fence is, the source
    rustdoc builds (crate attributes, `extern crate`, the code in its
    `fn main` wrapper), and which generated lines are the example's."""

    def __init__(self, origin, line, info, source, first_code_line):
        self.origin, self.line, self.info, self.source = origin, line, info, source
        self.needs = ()
        self.name = self.package = None
        # generated line -> line of the documented file
        self.map = {}
        self.first_code_line = first_code_line

    def where(self):
        return f"{self.origin}:{self.line}"


def rustdoc_doctests(root, features, target_dir):
    """rustdoc's own list of the crate's doctests (`--output-format=doctest`,
    unstable: RUSTC_BOOTSTRAP), as JSON."""
    env = dict(os.environ, RUSTC_BOOTSTRAP="1", CARGO_TARGET_DIR=os.path.abspath(target_dir),
               CARGO_TERM_COLOR="never")
    cmd = ["cargo", "rustdoc", "-q", "--lib", "--manifest-path", os.path.join(root, "Cargo.toml")]
    if features:
        cmd += ["--features", ",".join(features)]
    cmd += ["--", "-Zunstable-options", "--output-format=doctest"]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"check-doc-deps: rustdoc could not list the doctests of {root}")
    return json.loads(proc.stdout)["doctests"]


def extract(root, features, target_dir):
    """Every Rust example rustdoc compiles, in its order: what `ignore`,
    `compile_fail` and other languages mark is left out, as rustdoc does."""
    examples = []
    for t in rustdoc_doctests(root, features, target_dir):
        a = t["doctest_attributes"]
        code = t.get("doctest_code")
        if not a["rust"] or a["compile_fail"] or a["ignore"] != "None" or code is None:
            continue
        origin = os.path.relpath(os.path.join(root, t["file"]), root) \
            if not os.path.isabs(t["file"]) else os.path.relpath(t["file"], root)
        # rustdoc names files from the workspace root: keep them relative
        # to the crate when they are under it.
        origin = t["file"] if origin.startswith("..") else origin
        head = [f"// {origin}:{t['line']}", code["crate_level"].rstrip("\n")]
        wrapper = code.get("wrapper")
        if wrapper:
            head.append(wrapper["before"].rstrip("\n"))
        body = code["code"].split("\n")
        tail = [wrapper["after"].strip("\n")] if wrapper else []
        source_lines = "\n".join(head).split("\n")
        ex = Example(origin, t["line"], a["original"], "\n".join(source_lines + body + tail) + "\n",
                     len(source_lines) + 1)
        ex.needs = needs_of(t["original_code"])
        ex.map = {ex.first_code_line + i: t["line"] + 1 + i for i in range(len(body))}
        examples.append(ex)
    return examples


# ------------------------------------------------------------ the workspace

def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise ValueError(f"cannot write {v!r} as TOML")


class Manifest:
    def __init__(self, root):
        with open(os.path.join(root, "Cargo.toml"), "rb") as f:
            self.toml = tomllib.load(f)
        self.root = root
        # `-vendored` features change only how a C library is linked (and
        # build it from source, minutes each time): not what examples see.
        self.features = [
            f
            for f in self.toml.get("features", {})
            if f != "default" and not f.endswith("-vendored")
        ]
        self.name = self.toml["package"]["name"]

    def spec(self, crate):
        """The dependency line for `crate`, from [dev-dependencies] first,
        else [dependencies]; None if neither has it."""
        for table in ("dev-dependencies", "dependencies"):
            deps = self.toml.get(table, {})
            for name in (crate, crate.replace("_", "-"), crate.replace("-", "_")):
                if name in deps:
                    spec = deps[name]
                    if isinstance(spec, dict):
                        spec = {k: v for k, v in spec.items() if k != "optional"}
                        if "path" in spec:
                            spec["path"] = os.path.join(self.root, spec["path"])
                    return name, spec
        return None

    def base_deps(self):
        return [
            ("wavesock", {"path": self.root, "features": self.features}),
            ("tokio", {"version": "1", "features": ["full"]}),
            ("futures-util", "0.3"),
        ]


def plan(examples, manifest):
    """Gives each example its package and file name; returns
    ({package: [dependency lines]}, [errors])."""
    packages, errors = {}, []
    for i, ex in enumerate(examples, 1):
        ex.name = f"ex_{i:03}"
        extra = {}
        for crate in ex.needs:
            if crate.replace("_", "-") in BASE_CRATES:
                continue
            found = manifest.spec(crate)
            if found is None:
                errors.append(f"{ex.where()}: `// Needs {crate}`: no crate {crate} in "
                              f"[dev-dependencies] or [dependencies] of {manifest.name}'s Cargo.toml")
                continue
            extra[found[0]] = found[1]
        names = sorted(extra)
        ex.package = "needs-" + "__".join(names) if names else "doc-examples"
        if ex.package not in packages:
            packages[ex.package] = manifest.base_deps() + [(n, extra[n]) for n in names]
    return packages, errors


def write_if_changed(path, text, written):
    written.add(os.path.normpath(path))
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def generate(out, examples, packages, lockfile):
    """Writes the workspace under `out`, rewriting only changed files and
    deleting what is no longer part of it (the target dir is left alone)."""
    written = set()
    members = sorted(packages)
    write_if_changed(os.path.join(out, "Cargo.toml"),
                     "# Generated by scripts/check-doc-deps.sh.\n[workspace]\nresolver = \"3\"\n"
                     f"members = {toml_value(members)}\n", written)
    for name, deps in packages.items():
        lines = ["# Generated by scripts/check-doc-deps.sh.", "[package]",
                 f'name = "{name}"', 'version = "0.0.0"', 'edition = "2024"',
                 "publish = false", "", "[dependencies]"]
        lines += [f"{n} = {toml_value(s)}" for n, s in deps]
        write_if_changed(os.path.join(out, name, "Cargo.toml"), "\n".join(lines) + "\n", written)
        write_if_changed(os.path.join(out, name, "src", "lib.rs"),
                         "// Generated by scripts/check-doc-deps.sh: the examples are in examples/.\n",
                         written)
    for ex in examples:
        write_if_changed(os.path.join(out, ex.package, "examples", ex.name + ".rs"),
                         ex.source, written)
    if lockfile:
        with open(lockfile, encoding="utf-8") as f:
            lock = f.read()
        lock_out = os.path.join(out, "Cargo.lock")
        if not os.path.exists(lock_out):
            write_if_changed(lock_out, lock, written)
        else:
            # Keep cargo's additions (the generated packages) unless the
            # crate's lock changed since.
            stamp = os.path.join(out, "Cargo.lock.source")
            old = open(stamp, encoding="utf-8").read() if os.path.exists(stamp) else None
            if old != lock:
                with open(lock_out, "w", encoding="utf-8") as f:
                    f.write(lock)
            written.add(os.path.normpath(lock_out))
        write_if_changed(os.path.join(out, "Cargo.lock.source"), lock, written)
    for d, dirs, files in os.walk(out):
        if os.path.normpath(d) == os.path.normpath(out):
            dirs[:] = [x for x in dirs if x != "target"]
        for f in files:
            p = os.path.normpath(os.path.join(d, f))
            if p not in written:
                os.remove(p)
    for d, dirs, files in os.walk(out, topdown=False):
        if d != out and not os.listdir(d):
            os.rmdir(d)


def cargo_check(out, target_dir):
    """Runs cargo check; returns (exit code, [compiler error messages with
    the target they belong to], cargo's stderr)."""
    # RUSTC_BOOTSTRAP as for the listing: proc-macro2's and thiserror's
    # build scripts rerun when it changes, and with them every proc-macro
    # crate and what uses one (tokio, serde, ...). Built under one value,
    # the listing, the docs.rs check and this check share them; alternating
    # rebuilt them three times in CI's doc steps.
    env = dict(os.environ, RUSTC_BOOTSTRAP="1", CARGO_TARGET_DIR=os.path.abspath(target_dir),
               CARGO_TERM_COLOR="never")
    env.pop("RUSTFLAGS", None)
    proc = subprocess.run(
        ["cargo", "check", "--workspace", "--examples", "--keep-going",
         "--message-format=json"],
        cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    errors = []
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") != "compiler-message":
            continue
        m = msg["message"]
        if m["level"] not in ("error", "error: internal compiler error"):
            continue
        if not m["spans"] and re.match(r"aborting due to|could not compile", m["message"]):
            continue
        errors.append((msg.get("target", {}).get("name"), msg.get("manifest_path"), m))
    return proc.returncode, errors, proc.stderr


def report(examples, errors, out):
    """Prints the errors with the examples' origins, in source order;
    returns the failing examples' names."""
    by_name = {ex.name: ex for ex in examples}
    order = {ex.name: i for i, ex in enumerate(examples)}
    printed = []  # (sort key, text)
    for k, (target, manifest, m) in enumerate(errors):
        ex = by_name.get(target)
        head = f"error: {m['message']}"
        if m.get("code") and m["code"].get("code"):
            head = f"error[{m['code']['code']}]: {m['message']}"
        if ex is None:
            text, key = f"{manifest or out}: {head}", (-1, k)
        else:
            primary = next((s for s in m["spans"] if s.get("is_primary")), None)
            at, line = "", 0
            if primary and primary["file_name"].endswith(ex.name + ".rs"):
                line = primary["line_start"]
                if ex.map.get(line) is not None:
                    at = f" (line {ex.map[line]})"
            gen = os.path.join(out, ex.package, "examples", ex.name + ".rs")
            text, key = f"{ex.where()}: example{at}, as {gen}: {head}", (order[ex.name], line, k)
        rendered = (m.get("rendered") or "").rstrip().splitlines()
        printed.append((key, "\n".join([text] + ["    " + r for r in rendered])))
    for _, text in sorted(printed):
        print(text)
    return sorted({t for t, _, _ in errors if t in by_name}, key=order.get)


# ------------------------------------------------------------ main

def run(root, out, target_dir, lockfile, quiet=False):
    """Extracts, generates and checks; returns (status, examples, packages,
    failing names)."""
    manifest = Manifest(root)
    examples = extract(root, manifest.features, target_dir)
    packages, errors = plan(examples, manifest)
    if errors:
        for e in errors:
            print(e)
        return 1, examples, packages, []
    generate(out, examples, packages, lockfile)
    code, cerrors, stderr = cargo_check(out, target_dir)
    failing = report(examples, cerrors, out)
    if code != 0 and not cerrors:
        sys.stdout.write(stderr)
        print(f"check-doc-deps: cargo check failed in {out} (see above)")
        return 2, examples, packages, failing
    return (1 if code != 0 else 0), examples, packages, failing


def main_check():
    lock = "Cargo.lock" if os.path.exists("Cargo.lock") else None
    status, examples, packages, failing = run(ROOT, OUT, TARGET_DIR, lock)
    if status == 0:
        print(f"check-doc-deps: {len(examples)} examples ({len(packages)} packages) "
              "build with wavesock, tokio and futures-util only")
    elif failing:
        print(f"check-doc-deps: {len(failing)} of {len(examples)} examples fail to build "
              "with wavesock, tokio and futures-util only: use wavesock::Bytes and "
              "wavesock::http, or say `// Needs <crate>.` on the example's first line",
              file=sys.stderr)
    return 1 if status else 0


def main_list():
    manifest = Manifest(ROOT)
    examples = extract(ROOT, manifest.features, TARGET_DIR)
    packages, errors = plan(examples, manifest)
    for ex in examples:
        print(f"{ex.where()}\t{ex.name}\t{ex.package}\t{ex.info or '-'}")
    for e in errors:
        print(e)
    print(f"{len(examples)} examples, {len(packages)} packages", file=sys.stderr)
    return 1 if errors else 0


# ------------------------------------------------------------ self-test

FAKE_RS = '''\
//! A fake crate for check-doc-deps --self-test.
//!
//! ```
//! let b = bytes::Bytes::from_static(b"no Needs line: must fail");
//! ```
//!
//! ```no_run
//! // Needs bytes (said so: must pass).
//! let b = bytes::Bytes::from_static(b"ok");
//! ```

/// Hidden lines, `##` and `?` with rustdoc's `Ok::<..>(())`:
///
/// ```rust,no_run
/// # use std::error::Error;
/// ##[derive(Debug)]
/// struct S;
/// #
/// let req = wavesock::http::Request::builder().uri("ws://x").body(())?;
/// let n: u8 = "7".parse()?;
/// let b = wavesock::Bytes::from_static(b"x");
/// # let _ = (req, n, b, S);
/// Ok::<(), Box<dyn Error>>(())
/// ```
///
/// ```ignore
/// not Rust at all, but ignored
/// ```
///
/// ```compile_fail
/// let x: u8 = "compile_fail is skipped";
/// ```
///
/// ```text
/// text is skipped
/// ```
pub struct Fake;

#[doc = include_str!("../GUIDE.md")]
#[cfg(doctest)]
pub struct GuideDoctests;
'''

FAKE_MD = '''\
# Guide

```sh
cargo add wavesock
```

1. A list item with a bare block, indented:

   ```
   #![allow(dead_code)]
   use futures_util::StreamExt;

   #[tokio::main]
   async fn main() {
       let _ = futures_util::stream::empty::<()>().next().await;
   }
   ```

- ```toml
  tokio = "1"
  ```
'''


def self_test():
    failures = []

    def expect(what, got, want):
        if got != want:
            failures.append(f"{what}: got {got!r}, want {want!r}")

    # Needs lines.
    for first, want in [("// Needs tokio-test (a dev-dependency for your tests).", ("tokio-test",)),
                        ("// Needs axum, hyper.", ("axum", "hyper")),
                        ("// Needs hyper-util", ("hyper-util",)),
                        ("// needs nothing", ()), ("use bytes::Bytes;", ())]:
        expect(f"needs_of({first!r})", needs_of(first + "\nlet x = 1;"), want)

    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "fake")
        os.makedirs(os.path.join(root, "src"))
        with open(os.path.join(root, "src", "lib.rs"), "w") as f:
            f.write(FAKE_RS)
        with open(os.path.join(root, "GUIDE.md"), "w") as f:
            f.write(FAKE_MD)
        # The fake crate's manifest is wavesock's, so that `wavesock` in the
        # examples is the real crate with the same features (already built
        # in the shared target dir by a normal run).
        manifest = Manifest(ROOT)
        with open(os.path.join(root, "Cargo.toml"), "w") as f:
            f.write('[package]\nname = "fake"\n\n[features]\n')
            f.write("".join(f"{x} = []\n" for x in manifest.features))
            f.write('[dev-dependencies]\nbytes = "1.10"\n')
        # rustdoc lists them: what it skips (ignore, compile_fail, text,
        # sh, toml) is not there; the markdown file's block is, at the line
        # rustdoc gives it (the include's line plus its own, as `cargo test
        # --doc` names it).
        examples = extract(root, manifest.features, TARGET_DIR)
        expect("examples found",
               [ex.where() for ex in examples],
               ["src/lib.rs:3", "src/lib.rs:7", "src/lib.rs:14", "src/lib.rs:47"])
        packages, errors = plan(examples, Manifest(root))
        expect("plan errors", errors, [])
        expect("packages", sorted(packages), ["doc-examples", "needs-bytes"])
        wrapped = examples[2].source
        if "impl core::fmt::Debug" not in wrapped or "#[derive(Debug)]" not in wrapped:
            failures.append(f"`?` example not wrapped as rustdoc does:\n{wrapped}")
        if examples[3].source.count("fn main") != 1:
            failures.append(f"an example with fn main was wrapped:\n{examples[3].source}")
        # A crate in neither table fails clearly.
        bad = Example("x.rs", 1, "", "", 1)
        bad.needs = needs_of("// Needs no-such-crate.")
        _, errors = plan([bad], Manifest(root))
        expect("unknown crate", len(errors), 1)

        # Build them, against the real wavesock, in the shared target dir.
        # The fake packages' dependency lines are those the real workspace
        # would have (wavesock, tokio and futures-util), plus bytes.
        for deps in packages.values():
            deps[0] = ("wavesock", {"path": ROOT, "features": manifest.features})
        out = os.path.join(OUT + "-self-test")
        generate(out, examples, packages, "Cargo.lock")
        code, cerrors, stderr = cargo_check(out, TARGET_DIR)
        import io
        import contextlib
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            failing = report(examples, cerrors, out)
        expect("failing examples", failing, ["ex_001"])
        if "src/lib.rs:3: example (line 4)" not in buf.getvalue():
            failures.append("the error does not name the example's origin:\n" + buf.getvalue()
                            + stderr[-2000:])
        if code == 0:
            failures.append("cargo check passed with an example using bytes without `// Needs`")
        shutil.rmtree(out, ignore_errors=True)

    for f in failures:
        print(f"self-test: {f}", file=sys.stderr)
    if failures:
        print(f"check-doc-deps --self-test: {len(failures)} failure(s)", file=sys.stderr)
        return 1
    print("check-doc-deps --self-test: ok")
    return 0


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    if argv == ["--list"]:
        return main_list()
    if argv:
        print("usage: scripts/check-doc-deps.sh [--list | --self-test]", file=sys.stderr)
        return 2
    return main_check()


sys.exit(main(sys.argv[1:]))
PY
