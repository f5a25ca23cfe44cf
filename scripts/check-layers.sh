#!/usr/bin/env bash
# Checks that the sans-IO handshake depends downward only (issue 13):
#
#   handshake  no tokio, tokio_util, futures or futures_util; no `crate::`
#              path except `crate::handshake` and `crate::proto`.
#
# The protocol core needs no script: it is its own crate (proto/,
# wavesock-proto) with neither Tokio, futures nor http among its
# dependencies, so the compiler refuses what this once looked for.
#
# Usage: scripts/check-layers.sh [handshake]   (default: all)
#
# Both `use` lines and paths written inline in code count, in `#[cfg(test)]`
# modules too (tests may use dev-dependencies such as proptest, never tokio).
# Comments, doc comments (`///`, `//!`, `/** */`) and their intra-doc links,
# and string literals do not: they are text for readers, not dependencies.
# `super::` paths that climb out of the layer are resolved and checked too.
# Prints `file:line: what` for every violation and exits 1 if there is any.
#
# The scanner is a small Python 3 program (a Rust lexer is clearer there
# than in sed); bash only starts it.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import os
import re
import sys

ASYNC_CRATES = ["tokio", "tokio_util", "futures", "futures_util"]

LAYERS = {
    "handshake": {
        "dir": "src/handshake",
        "forbidden_crates": ASYNC_CRATES,
        "allowed_crate_modules": {"handshake", "proto"},
    },
}

# Temporary allowances: (file, crate:: module). Each is used only while the
# file still has such a path, and is easy to delete once it is gone.
ALLOWANCES = set()


sys.path.insert(0, os.path.join(os.getcwd(), "scripts"))
from rust_source import blank_literals_and_comments  # noqa: E402


def module_depth(path, layer_dir):
    """How many modules below the crate root the file's module sits."""
    rel = os.path.relpath(path, "src")
    parts = rel[:-3].split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    return len(parts)


def group_heads(text):
    """The first path segment of each top-level item of a `{a::b, c}` group
    whose opening brace was already consumed; returns them and the length
    of text used."""
    heads, depth, item, i = [], 0, "", 0
    while i < len(text):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:
                heads.append(item)
                return heads, i + 1
            depth -= 1
        elif ch == "," and depth == 0:
            heads.append(item)
            item = ""
            i += 1
            continue
        if depth == 0:
            item += ch
        i += 1
    heads.append(item)
    return heads, i


def check_file(path, layer, errors, used_allowances):
    code = blank_literals_and_comments(open(path, encoding="utf-8").read())
    line_of = lambda pos: code.count("\n", 0, pos) + 1

    crates = "|".join(layer["forbidden_crates"])
    for m in re.finditer(
        r"(?<![\w$])(" + crates + r")\s*(::|;|\s+as\b)", code
    ):
        # `extern crate x`, `use x;`, `x::...`, `::x::...` alike.
        errors.append(f"{path}:{line_of(m.start())}: uses `{m.group(1)}`")
    for m in re.finditer(r"\bextern\s+crate\s+(" + crates + r")\b", code):
        errors.append(f"{path}:{line_of(m.start())}: uses `{m.group(1)}`")

    # Inline `mod name {` blocks deepen `super::`; track where they open.
    depth_at_file = module_depth(path, layer["dir"])
    mod_opens = [m.end() - 1 for m in re.finditer(r"\bmod\s+\w+\s*\{", code)]

    def inline_depth(pos):
        d = 0
        for start in mod_opens:
            if start >= pos:
                break
            # Find the matching close brace of this mod block.
            level, j = 0, start
            while j < len(code):
                if code[j] == "{":
                    level += 1
                elif code[j] == "}":
                    level -= 1
                    if level == 0:
                        break
                j += 1
            if j > pos:
                d += 1
        return d

    def check_heads(heads, pos, how):
        for head in heads:
            name = head.strip().split("::")[0].strip()
            name = re.sub(r"\s+as\s+\w+$", "", name)
            if not name or name in ("self",) or name in layer["allowed_crate_modules"]:
                continue
            if name == "*":
                name = "* (glob of the crate root)"
            if (path, name) in ALLOWANCES:
                used_allowances.add((path, name))
                continue
            errors.append(f"{path}:{line_of(pos)}: uses `{how}{name}`")

    path_re = r"(?<![\w$])((?:super\s*::\s*)+|crate\s*::\s*)"
    for m in re.finditer(path_re, code):
        prefix = m.group(1)
        if prefix.startswith("crate"):
            how = "crate::"
        else:
            ups = prefix.count("super")
            depth = depth_at_file + inline_depth(m.start())
            if ups < depth - 1:
                continue  # stays inside the layer's top module
            if ups > depth:
                errors.append(f"{path}:{line_of(m.start())}: `super::` climbs past the crate root")
                continue
            if ups == depth - 1:
                # At the layer's top module: `super::...::x` is inside it.
                continue
            how = "super::" * ups
        rest = code[m.end():]
        if rest.startswith("{"):
            heads, _ = group_heads(rest[1:])
        else:
            seg = re.match(r"(\w+|\*)", rest)
            heads = [seg.group(1)] if seg else []
        check_heads(heads, m.start(), how)


def main(argv):
    wanted = argv or list(LAYERS)
    for name in wanted:
        if name not in LAYERS:
            print(f"unknown layer {name!r}; known: {', '.join(LAYERS)}", file=sys.stderr)
            return 2
    errors, used = [], set()
    for name in wanted:
        layer = LAYERS[name]
        for root, _dirs, files in os.walk(layer["dir"]):
            for f in sorted(files):
                if f.endswith(".rs"):
                    check_file(os.path.join(root, f), layer, errors, used)
    for path, module in sorted(used):
        print(f"note: {path} still uses crate::{module} (temporary allowance)", file=sys.stderr)
    def where(e):
        path, line, _ = e.split(":", 2)
        return path, int(line)

    for e in sorted(errors, key=where):
        print(e)
    if errors:
        print(f"check-layers: {len(errors)} violation(s) in {', '.join(wanted)}", file=sys.stderr)
        return 1
    print(f"check-layers: {', '.join(wanted)} clean", file=sys.stderr)
    return 0


sys.exit(main(sys.argv[1:]))
PY
