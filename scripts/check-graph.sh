#!/usr/bin/env bash
# Checks the crate's file-level import graph (sibling of check-layers.sh):
#
#   1. no circles: no two files of src/ depend on each other, directly or
#      through other files (strongly connected components of size > 1);
#   2. src/config.rs (plain data, the user's settings) reaches no file whose
#      non-test code uses tokio, tokio_util, futures or futures_util.
#
# Usage: scripts/check-graph.sh             check src/, exit 1 on a finding
#        scripts/check-graph.sh --all-lines  list every line of an edge, not
#                                            just its first `use`
#        scripts/check-graph.sh --edges      list every edge with its lines
#        scripts/check-graph.sh --dot        print the graph for Graphviz
#                                            (dot -Tsvg); red: in a circle,
#                                            dashed: only test code
#        scripts/check-graph.sh --self-test  check the checker on a fake
#                                            crate in a temp dir
#        scripts/check-graph.sh --root DIR   check the crate in DIR/src (DIR
#                                            relative to the repository)
#
# A circle is printed as one shortest cycle through its component's first
# file, `file:line` of each edge's first `use` (else first path) after it,
# then the component's other files and edges, so all of it can be cut.
# How the graph is built:
# - Nodes are the .rs files of the module tree: lib.rs, then every `mod x;`
#   (`x.rs` or `x/mod.rs` beside a mod.rs/lib.rs; `foo/x.rs` for a `foo.rs`;
#   `#[path = "..."]` honoured, a #[path] file owns its directory like a
#   mod.rs). Two cfg alternatives of one module (`mod codec;` and
#   `#[path = "stub.rs"] mod codec;`) are both nodes; a path into that
#   module resolves into both. A `mod x;` declaration is not an edge.
# - An edge A -> B is a path in A (a `use`, groups expanded, or a path
#   written inline in code, macros and tests included) that resolves into
#   B. Comments, doc comments with their intra-doc links, and string and
#   char literals are blanked first (scripts/rust_source.py, shared with
#   check-layers.sh).
#   A bare name (`Foo`, `foo!`) is no edge of its own, its `use` is; but
#   see re-exports and macros below.
# - Resolution follows Rust's: `crate::`, `self::`, `super::`, and a
#   relative first segment naming something in the current module's scope
#   (child module, item, `use` binding, glob import); otherwise the path is
#   another crate's. Each segment is looked up in the module reached so far:
#   a child module goes one level down; a name bound by a `use` there (pub
#   or private: a child sees its parent's private imports) is followed to
#   where it comes from, any number of hops, groups, renames and globs
#   included; an item defined there (struct, enum, fn, trait, type, const,
#   static, macro_rules, ...) stops there; the rest of a path after an item
#   (`Enum::Variant`, `Type::new`) is ignored. A name that cannot be found
#   in a module maps to that module's file (the deepest module file along
#   the path). A `use` of another crate's item stops at the file that has
#   that `use` (`crate::Bytes` is lib.rs). `#[macro_export]` macros live at
#   the crate root; a bare `m!` of a crate macro that is in textual scope
#   (defined in an ancestor file, or #[macro_use]) is an edge to its file.
# - A re-export (`pub use`, `pub(crate) use`, ...) is, like `mod x;`, part of
#   the module's facade: not an edge by itself, only when the file also uses
#   the name (a capitalised name anywhere in its code; a lower-case one
#   called, `name(`/`name!`/`name::`). Users of the name are sent on to the
#   file that defines it, so a mod.rs re-exporting its children does not
#   close false circles with them.
# - Test code is its own node for circles: code under `#[cfg(test)]` (or a
#   cfg that needs `test`) and `#[test]` functions inside a normal file form
#   the node `file (cfg(test))`, as if the tests sat in their own file like
#   proto/conn_tests.rs. So a mod.rs whose tests use a child that uses the
#   mod.rs is no circle. Self-loops are ignored.
# - Rule 2: a Tokio-using file has a path starting with one of those crates
#   (`use tokio::..`, `tokio::spawn(..)`, `#[tokio::main]`, `::futures::..`,
#   `extern crate`) in its non-test code. The rule sees neither test code
#   nor test-only files (reached through a `#[cfg(test)] mod`). It names
#   the first Tokio-using files config.rs reaches (the search does not go
#   on past one), each with its chain and the line that uses the crate.
# Known limits: macro bodies resolve where the macro is defined; names bound
# by a `use` inside a function body only serve paths of that file; `type`
# aliases and traits are items like any other (no type inference).
#
# One file, like check-layers.sh: bash only starts the embedded Python 3
# program, so CI needs nothing but python3 and the script is one file to
# read and review. (Python tracebacks count lines from the `<<'PY'` line.)
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import bisect
import os
import re
import shutil
import signal
import sys
import tempfile
from collections import defaultdict, deque

ASYNC_CRATES = {"tokio", "tokio_util", "futures", "futures_util"}
CONFIG_FILE = "src/config.rs"


# ---------------------------------------------------------------- lexing

sys.path.insert(0, os.path.join(os.getcwd(), "scripts"))
from rust_source import blank_literals_and_comments  # noqa: E402


TOKEN = re.compile(
    r"(?P<ws>\s+)|(?P<id>r#[A-Za-z_]\w*|\$crate|[A-Za-z_]\w*)|(?P<num>\d\w*)"
    r"|(?P<cc>::)|(?P<p>.)", re.S)
ITEM_KEYWORDS = {"struct", "enum", "union", "trait", "type", "fn", "const",
                 "static", "mod"}
KEYWORDS = {"as", "async", "await", "break", "const", "continue", "crate",
            "dyn", "else", "enum", "extern", "false", "fn", "for", "if",
            "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
            "ref", "return", "self", "Self", "static", "struct", "super",
            "trait", "true", "type", "unsafe", "use", "where", "while"}


class Tok:
    __slots__ = ("kind", "text", "pos")

    def __init__(self, kind, text, pos):
        self.kind, self.text, self.pos = kind, text, pos

    def is_id(self):
        return self.kind == "id"


def tokenize(code):
    toks = []
    for m in TOKEN.finditer(code):
        kind = m.lastgroup
        if kind == "ws":
            continue
        text = m.group(0)
        if kind == "id" and text.startswith("r#"):
            text = text[2:]
        toks.append(Tok(kind, text, m.start()))
    toks.append(Tok("eof", "", len(code)))
    return toks


# ------------------------------------------------------------ one file

def cfg_needs_test(pred):
    """Whether a cfg predicate (text inside `cfg(...)`) holds only in
    test builds."""
    toks = re.findall(r"[A-Za-z_]\w*|[(),=]", pred)
    pos = 0

    def parse():
        nonlocal pos
        if pos >= len(toks):
            return False
        name = toks[pos]
        pos += 1
        if pos < len(toks) and toks[pos] == "(":
            pos += 1
            args = []
            while pos < len(toks) and toks[pos] != ")":
                args.append(parse())
                if pos < len(toks) and toks[pos] == ",":
                    pos += 1
            pos += 1
            if name == "all":
                return any(args)
            if name == "any":
                return bool(args) and all(args)
            return False  # not(...) and the unknown
        if pos < len(toks) and toks[pos] == "=":
            pos += 1  # key = "value" (the value is blanked): no token
            return False
        return name == "test"

    return parse()


class File:
    def __init__(self, root, rel, modpath, test_only, owns_dir):
        self.rel = rel
        self.modpath = modpath
        self.test_only = test_only
        self.owns_dir = owns_dir  # lib.rs, mod.rs, #[path] files
        self.children = []        # (rel, modpath, test_only, owns_dir)
        self.use_mask = set()     # tokens inside `use` declarations
        self.orig = open(os.path.join(root, rel), encoding="utf-8").read()
        self.code = blank_literals_and_comments(self.orig)
        self.lines = self.orig.split("\n")
        self.nl = [m.start() for m in re.finditer("\n", self.code)]
        self.toks = toks = tokenize(self.code)
        # Braces: the matching close of each open, and each token's
        # innermost enclosing open brace (-1: file level).
        self.close = {}
        self.enclosing = [-1] * len(toks)
        stack = []
        for k, t in enumerate(toks):
            self.enclosing[k] = stack[-1] if stack else -1
            if t.text == "{" and t.kind == "p":
                stack.append(k)
            elif t.text == "}" and t.kind == "p" and stack:
                self.close[stack.pop()] = k
                self.enclosing[k] = stack[-1] if stack else -1
        # Inline `mod name {` blocks.
        self.mod_block = {}
        for k in self.close:
            if (k >= 2 and toks[k - 2].text == "mod" and toks[k - 2].is_id()
                    and toks[k - 1].is_id()):
                self.mod_block[k] = toks[k - 1].text
        self._chain = {}
        # Attributes: token index of `#` -> (end token `]`, inner?, text).
        self.attrs = {}
        self.attr_by_end = {}
        for k, t in enumerate(toks):
            if t.text != "#" or t.kind != "p":
                continue
            j = k + 1
            inner = toks[j].text == "!"
            if inner:
                j += 1
            if toks[j].text != "[":
                continue
            depth = 0
            while toks[j].kind != "eof":
                if toks[j].text == "[":
                    depth += 1
                elif toks[j].text == "]":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            code_text = self.code[t.pos:toks[j].pos + 1]
            orig_text = self.orig[t.pos:toks[j].pos + 1]
            self.attrs[k] = (j, inner, code_text, orig_text)
            self.attr_by_end[j] = k
        # Test-only code: items under a cfg that needs `test`, #[test] fns.
        self.test_ranges = []
        for k, (end, inner, code_text, _) in self.attrs.items():
            if not attr_is_test(code_text):
                continue
            if inner:
                if self.enclosing[k] == -1:
                    self.test_only = True
                else:
                    op = self.enclosing[k]
                    self.test_ranges.append((op, self.close.get(op, len(toks))))
                continue
            s = end + 1
            while s in self.attrs:
                s = self.attrs[s][0] + 1
            self.test_ranges.append((s, self.item_end(s)))

    def item_end(self, s):
        """Token index where the item (or statement, field) starting at
        token s ends."""
        toks, depth, j = self.toks, 0, s
        while toks[j].kind != "eof":
            x = toks[j].text if toks[j].kind == "p" else None
            if x in ("(", "["):
                depth += 1
            elif x in (")", "]"):
                if depth == 0:
                    return j - 1
                depth -= 1
            elif x == "{":
                if depth == 0:
                    return self.close.get(j, len(toks) - 1)
                depth += 1
            elif x == "}":
                if depth == 0:
                    return j - 1
                depth -= 1
            elif x in (";", ",") and depth == 0:
                return j
            j += 1
        return j

    def line(self, k):
        return bisect.bisect_right(self.nl, self.toks[k].pos) + 1

    def text_of_line(self, line):
        return self.lines[line - 1].strip()

    def in_test(self, k):
        return self.test_only or any(a <= k <= b for a, b in self.test_ranges)

    def unit(self, k):
        return (self.rel, self.in_test(k))

    def chain(self, k):
        """Inline module names around token k, outermost first, and whether
        k is at module level (not inside a function, impl, ... body)."""
        op = self.enclosing[k]
        if op in self._chain:
            return self._chain[op]
        names, level, o = [], True, op
        while o != -1:
            if o in self.mod_block:
                names.append(self.mod_block[o])
            elif o == op:
                level = False
            o = self.enclosing[o]
        res = (self.modpath + tuple(reversed(names)), level)
        self._chain[op] = res
        return res

    def attrs_before(self, k):
        """The outer attributes of the item whose keyword is token k
        (a visibility in between is skipped)."""
        toks, j = self.toks, k - 1
        if j >= 0 and toks[j].text == ")":
            d, i = 0, j
            while i >= 0:
                if toks[i].text == ")":
                    d += 1
                elif toks[i].text == "(":
                    d -= 1
                    if d == 0:
                        break
                i -= 1
            if i > 0 and toks[i - 1].text == "pub":
                j = i - 2
        elif j >= 0 and toks[j].text == "pub":
            j -= 1
        while j >= 0 and toks[j].text in ("unsafe", "extern"):
            j -= 1
        out = []
        while j in self.attr_by_end:
            a = self.attr_by_end[j]
            out.append(self.attrs[a])
            j = a - 1
        return out

    def visibility_before(self, k):
        toks = self.toks
        if k >= 1 and toks[k - 1].text == "pub":
            return True
        if k >= 1 and toks[k - 1].text == ")":
            return pub_parens_end_at(toks, k - 1)
        return False


def pub_parens_end_at(toks, j):
    """Whether the `)` at token j closes a `pub(...)`."""
    i, d = j, 0
    while i >= 0:
        if toks[i].text == ")":
            d += 1
        elif toks[i].text == "(":
            d -= 1
            if d == 0:
                break
        i -= 1
    return i > 0 and toks[i - 1].text == "pub"


def attr_is_test(code_text):
    body = re.sub(r"^#\s*!?\s*\[\s*|\s*\]$", "", code_text)
    m = re.match(r"cfg\s*\((.*)\)$", body, re.S)
    if m:
        return cfg_needs_test(m.group(1))
    return re.fullmatch(r"(?:\w+\s*::\s*)*test", body) is not None


# ------------------------------------------------------- the whole crate

class Scope:
    """One module's names as one file (or inline block) declares them."""

    def __init__(self, modpath, file, unit):
        self.modpath, self.file, self.unit = modpath, file, unit
        self.children = set()
        self.defined = defaultdict(set)   # name -> units
        self.bindings = defaultdict(list)  # name -> [Use]
        self.local = defaultdict(list)     # `use` in fn bodies: same file only
        self.globs = []                    # [Use]


class Use:
    __slots__ = ("file", "k", "base", "segs", "alias", "glob", "pub",
                 "level", "line", "unit")

    def __init__(self, **kw):
        for key, v in kw.items():
            setattr(self, key, v)

    def name(self):
        if self.glob:
            return None
        if self.alias:
            return None if self.alias == "_" else self.alias
        last = self.segs[-1]
        return None if last in ("crate", "super", "self", "::") else last


def parse_use_tree(toks, i, prefix):
    """Leaves (segments, alias, glob, token of the leaf) of the use tree at
    token i, and the index after it."""
    leaves, segs = [], list(prefix)
    if toks[i].text == "::":
        if not segs:
            segs.append("::")
        i += 1
    while toks[i].kind != "eof" and toks[i].text != ";":
        t = toks[i]
        if t.text == "{":
            i += 1
            while toks[i].kind != "eof" and toks[i].text not in ("}", ";"):
                sub, i = parse_use_tree(toks, i, segs)
                leaves += sub
                if toks[i].text == ",":
                    i += 1
                elif toks[i].text not in ("}", ";"):
                    i += 1  # something unexpected: skip it
            if toks[i].text == "}":
                i += 1
            return leaves, i
        if t.text == "*":
            leaves.append((segs, None, True, i))
            return leaves, i + 1
        if t.is_id():
            if t.text == "self" and segs and segs[-1] != "::":
                pass  # `a::{self}` is `a`
            else:
                segs = segs + [t.text]
            last, i = i, i + 1
            if toks[i].text == "::":
                i += 1
                continue
            alias = None
            if toks[i].text == "as" and toks[i + 1].is_id():
                alias, i = toks[i + 1].text, i + 2
            leaves.append((segs, alias, False, last))
            return leaves, i
        return leaves, i
    return leaves, i


class Crate:
    def __init__(self, root):
        self.root = root
        self.files = {}                  # rel -> File
        self.scopes = defaultdict(list)  # modpath -> [Scope]
        self.notes = []
        self.uses, self.paths, self.macro_calls, self.mentions = [], [], [], []
        self.macro_defs = []             # (name, rel, modpath, unit, macro_use)
        self.macro_use_mods = set()      # modpaths declared #[macro_use]
        lib = "src/lib.rs"
        if not os.path.exists(os.path.join(root, lib)):
            raise SystemExit(f"check-graph: no {lib} under {root}")
        self.load(lib, (), False, True)
        on_disk = set()
        for d, _dirs, fs in os.walk(os.path.join(root, "src")):
            for f in fs:
                if f.endswith(".rs"):
                    on_disk.add(os.path.relpath(os.path.join(d, f), root))
        for rel in sorted(on_disk - set(self.files)):
            self.notes.append(f"note: {rel} is in no `mod` of the tree; left out")
        self.memo, self.busy, self.cuts = {}, set(), 0

    # -- loading

    def load(self, rel, modpath, test_only, owns_dir):
        if rel in self.files:
            return
        f = self.files[rel] = File(self.root, rel, modpath, test_only, owns_dir)
        toks = f.toks
        root_scope = Scope(modpath, rel, (rel, f.test_only))
        self.scopes[modpath].append(root_scope)
        scope_of = {}  # modpath -> this file's scope

        def scope(mp):
            return scope_of[mp]

        scope_of[modpath] = root_scope
        for op, name in sorted(f.mod_block.items()):
            mp, _level = f.chain(op)
            sc = Scope(mp + (name,), rel, f.unit(op))
            self.scopes[sc.modpath].append(sc)
            scope_of[sc.modpath] = sc
            if mp in scope_of:
                scope_of[mp].children.add(name)
        use_mask = set()
        for k, t in enumerate(toks):
            if not t.is_id():
                continue
            nxt = toks[k + 1]
            mp, level = f.chain(k)
            if mp not in scope_of:
                continue  # a module inside a fn body: let it be
            sc = scope(mp)
            if t.text == "mod" and nxt.is_id() and toks[k + 2].text == ";":
                self.declare_child(f, k, mp, nxt.text, sc)
            elif t.text == "macro_rules" and nxt.text == "!" and toks[k + 2].is_id():
                name = toks[k + 2].text
                attrs = [a[2] for a in f.attrs_before(k)]
                exported = any(re.search(r"\bmacro_export\b", a) for a in attrs)
                if level:
                    sc.defined[name].add(f.unit(k))
                if exported:
                    self.macro_defs.append((name, rel, (), f.unit(k), True))
                else:
                    self.macro_defs.append((name, rel, mp, f.unit(k), False))
            elif (t.text in ITEM_KEYWORDS and level and nxt.is_id()
                  and (toks[k - 1].text != "::")):
                name = nxt.text
                if t.text == "static" and name == "mut":
                    name = toks[k + 2].text
                if name in KEYWORDS and name != "Self" or name == "_":
                    continue
                if t.text == "union" and toks[k + 2].text not in ("{", "<"):
                    continue
                sc.defined[name].add(f.unit(k))
            elif t.text == "use" and self.use_starts(toks, k):
                pub = f.visibility_before(k)
                leaves, end = parse_use_tree(toks, k + 1, [])
                use_mask.update(range(k, end + 1))
                for segs, alias, glob, lk in leaves:
                    if not segs or segs == ["::"]:
                        continue
                    u = Use(file=rel, k=lk, base=mp, segs=segs, alias=alias,
                            glob=glob, pub=pub, level=level, line=f.line(lk),
                            unit=f.unit(lk))
                    self.uses.append(u)
                    if glob:
                        if level:  # a glob in a fn body serves no lookup
                            sc.globs.append(u)
                    elif u.name():
                        (sc.bindings if level else sc.local)[u.name()].append(u)
            elif t.text == "extern" and nxt.text == "crate" and toks[k + 2].text in ASYNC_CRATES:
                self.mentions.append((rel, k, f.line(k), toks[k + 2].text))
        f.use_mask = use_mask
        # Paths written in code, and bare macro calls.
        for k, t in enumerate(toks):
            if k in use_mask or not t.is_id():
                continue
            prev = toks[k - 1] if k else None
            segs = [t.text]
            if prev is not None and prev.kind == "p" and prev.text in (".", "$", "'"):
                continue  # a field, method, macro variable or lifetime
            if prev is not None and prev.kind == "cc":
                before = toks[k - 2] if k >= 2 else None
                if before is not None and (
                        (before.is_id() and before.text not in KEYWORDS)
                        or before.text in ("crate", "self", "super", "Self")
                        or before.text in (">", ")")):
                    continue  # inside a longer path, or `<T>::x`
                segs = ["::", t.text]  # a global path
            j = k + 1
            while toks[j].kind == "cc" and toks[j + 1].is_id():
                segs.append(toks[j + 1].text)
                j += 2
            mp, _level = f.chain(k)
            if toks[j].kind == "cc" or len(segs) > 1:
                if segs[0] in ("Self",) or mp not in scope_of:
                    continue
                self.paths.append((rel, k, mp, segs))
            elif toks[j].text == "!" and len(segs) == 1 and t.text != "macro_rules":
                self.macro_calls.append((rel, k, mp, t.text))
        # Child files.
        for child in f.children:
            self.load(*child)

    @staticmethod
    def use_starts(toks, k):
        if k == 0:
            return True
        prev = toks[k - 1].text
        if prev in (";", "{", "}", "]", "pub"):
            return True
        if prev == ")":
            return pub_parens_end_at(toks, k - 1)
        return False

    def declare_child(self, f, k, mp, name, sc):
        attrs = f.attrs_before(k)
        test = f.in_test(k) or any(attr_is_test(a[2]) for a in attrs if not a[1])
        path_attr = None
        for a in attrs:
            m = re.match(r'#\s*\[\s*path\s*=\s*"([^"]*)"\s*\]$', a[3], re.S)
            if m:
                path_attr = m.group(1)
            if re.search(r"\bmacro_use\b", a[2]):
                self.macro_use_mods.add(mp + (name,))
        here = os.path.dirname(f.rel)
        inline = list(mp[len(f.modpath):])
        base = here if f.owns_dir else os.path.join(here, os.path.basename(f.rel)[:-3])
        if path_attr is not None:
            d = os.path.join(base, *inline) if inline else here
            cand = [os.path.normpath(os.path.join(d, path_attr))]
            owns = True
        else:
            d = os.path.join(base, *inline)
            cand = [os.path.join(d, name + ".rs"), os.path.join(d, name, "mod.rs")]
            owns = False
        sc.children.add(name)
        for c in cand:
            if os.path.exists(os.path.join(self.root, c)):
                f.children.append((c, mp + (name,), test, owns or c.endswith("mod.rs")))
                return
        self.notes.append(f"note: {f.rel}:{f.line(k)}: no file for `mod {name};`")

    # -- resolving

    def shadowed(self, mp, name):
        """Whether a module or item of the crate takes the name `name` in
        module mp (so `name::x` is not the crate `name`)."""
        return any(name in sc.children or name in sc.defined
                   for sc in self.scopes.get(mp, []))

    def scopes_for(self, mp, file):
        """The scopes of module mp; only those of `file` if it is one of
        them (two cfg alternatives of a module never meet)."""
        all_ = self.scopes.get(mp, [])
        own = [sc for sc in all_ if sc.file == file]
        return (own, file) if own else (all_, None)

    def module_units(self, mp, file=None):
        return {("unit", sc.unit) for sc in self.scopes_for(mp, file)[0]}

    def lookup(self, mp, name, file=None):
        scopes, file = self.scopes_for(mp, file)
        key = (mp, name, file)
        if key in self.memo:
            return self.memo[key]
        if key in self.busy:
            self.cuts += 1  # a cycle of imports (globs): cut it here
            return set()
        self.busy.add(key)
        cuts = self.cuts
        res = set()
        for sc in scopes:
            if name in sc.children:
                res.add(("mod", mp + (name,)))
            res |= {("unit", u) for u in sc.defined.get(name, ())}
            for b in sc.bindings.get(name, ()):
                res |= self.follow(b)
        if not res:
            for sc in scopes:
                for g in sc.globs:
                    for t in self.resolve(g.base, g.segs, g.file, False):
                        if t[0] == "mod" and t[1] != mp:
                            res |= self.lookup(t[1], name, g.file)
        self.busy.discard(key)
        if self.cuts == cuts:  # what a cut cycle gave may be partial
            self.memo[key] = res
        return res

    def follow(self, b, locals_=False):
        """What a `use` leaf names; another crate's item stops at the file
        that imports it."""
        out = set()
        for t in self.resolve(b.base, b.segs, b.file, locals_):
            out.add(("unit", b.unit) if t[0] == "ext" else t)
        return out

    def lookup_first(self, mp, name, file, locals_=True):
        if locals_:
            for sc in self.scopes_for(mp, file)[0]:
                if sc.file == file and name in sc.local:
                    res = set()
                    for b in sc.local[name]:
                        res |= self.follow(b, True)
                    if res:
                        return res
        return self.lookup(mp, name, file)

    def resolve(self, base, segs, file, locals_=True):
        """Targets of a path written in `file`: {("unit", unit)},
        {("mod", modpath)} or {("ext", crate)}."""
        if segs[0] == "::":
            return {("ext", segs[1] if len(segs) > 1 else "")}
        i, cur, relative = 0, base, False
        if segs[0] in ("crate", "$crate"):
            cur, i = (), 1
        elif segs[0] == "self":
            i = 1
        elif segs[0] == "super":
            while i < len(segs) and segs[i] == "super":
                if not cur:
                    return set()
                cur, i = cur[:-1], i + 1
        else:
            relative = True
        targets = {("mod", cur)}
        for n, seg in enumerate(segs[i:]):
            new = set()
            for t in targets:
                if t[0] != "mod":
                    new.add(t)
                    continue
                first = n == 0 and relative
                if first:
                    r = self.lookup_first(t[1], seg, file, locals_)
                else:
                    r = self.lookup(t[1], seg, file)
                if r:
                    new |= r
                elif first:
                    new.add(("ext", seg))
                else:
                    new |= self.module_units(t[1], file)
            targets = new
        return targets

    # -- the graph

    def build(self):
        edges = defaultdict(list)  # (src unit, dst unit) -> [(line, kind)]

        def add(src, dst, line, kind):
            if src[0] != dst[0]:
                edges[(src, dst)].append((line, kind))

        pub_uses = defaultdict(list)  # file -> [Use]
        for u in self.uses:
            if u.segs[0] in ASYNC_CRATES or (u.segs[0] == "::" and len(u.segs) > 1
                                             and u.segs[1] in ASYNC_CRATES):
                crate = u.segs[1] if u.segs[0] == "::" else u.segs[0]
                if u.segs[0] == "::" or not self.shadowed(u.base, crate):
                    self.mentions.append((u.file, u.k, u.line, crate))
            if u.pub and u.level:
                pub_uses[u.file].append(u)
                continue
            if u.glob:
                for t in self.resolve(u.base, u.segs, u.file):
                    if t[0] == "mod":
                        for x in self.module_units(t[1], u.file):
                            add(u.unit, x[1], u.line, "use")
                    elif t[0] == "unit":
                        add(u.unit, t[1], u.line, "use")
                continue
            for t in self.follow(u, not u.level):
                if t[0] == "unit":
                    add(u.unit, t[1], u.line, "use")
        for rel, k, mp, segs in self.paths:
            f = self.files[rel]
            crate = segs[1] if segs[0] == "::" and len(segs) > 1 else segs[0]
            if crate in ASYNC_CRATES and (segs[0] == "::" or not self.shadowed(mp, crate)):
                self.mentions.append((rel, k, f.line(k), crate))
            for t in self.resolve(mp, segs, rel):
                if t[0] == "unit":
                    add(f.unit(k), t[1], f.line(k), "path")
        # Re-exports: an edge only where the file itself uses the name.
        for rel, us in pub_uses.items():
            f = self.files[rel]
            want = {}
            for u in us:
                if u.name():
                    want.setdefault(u.name(), []).append(u)
            if not want:
                continue
            for k, t in enumerate(f.toks):
                if k in f.use_mask or not t.is_id() or t.text not in want:
                    continue
                prev = f.toks[k - 1].text if k else ""
                if prev in (".", "::", "$"):
                    continue
                if t.text[0].islower() and f.toks[k + 1].text not in ("(", "!", "::"):
                    continue
                for u in want[t.text]:
                    for x in self.follow(u):
                        if x[0] == "unit":
                            add(f.unit(k), x[1], u.line, "use")
        # Bare calls of crate macros in textual scope (or #[macro_export]).
        for rel, k, mp, name in self.macro_calls:
            f = self.files[rel]
            if self.lookup_first(mp, name, rel):
                continue  # defined here or imported: the `use` is the edge
            for mname, drel, dmp, dunit, exported in self.macro_defs:
                if mname != name or drel == rel:
                    continue
                if exported or mp[:len(dmp)] == dmp or any(
                        mp[:len(m) - 1] == m[:-1] and dmp[:len(m)] == m
                        for m in self.macro_use_mods):
                    add(f.unit(k), dunit, f.line(k), "macro")
        self.edges = edges
        return edges


# ------------------------------------------------------------ the verdict

def label(unit, files):
    rel, test = unit
    return f"{rel} (cfg(test))" if test and not files[rel].test_only else rel


def sccs(nodes, succ):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ[w]))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def shortest_path(succ, start, goals, allowed=None):
    prev, q = {start: None}, deque([start])
    while q:
        v = q.popleft()
        for w in sorted(succ[v]):
            if allowed is not None and w not in allowed:
                continue
            if w in goals:
                path = [w, v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path))
            if w not in prev:
                prev[w] = v
                q.append(w)
    return None


class Verdict:
    pass


def analyze(root):
    crate = Crate(root)
    edges = crate.build()
    files = crate.files
    succ = defaultdict(set)
    nodes = set()
    for rel, f in files.items():
        nodes.add((rel, f.test_only))
    for (a, b) in edges:
        succ[a].add(b)
        nodes.update((a, b))
    v = Verdict()
    v.crate, v.files, v.edges, v.succ = crate, files, edges, succ
    v.file_edges = {}
    for (a, b), occ in edges.items():
        key = (a[0], b[0])
        v.file_edges.setdefault(key, []).extend(occ)
    v.circles = []
    for comp in sccs(nodes, succ):
        if len(comp) < 2:
            continue
        start = comp[0]
        cyc = shortest_path(succ, start, {start}, set(comp))
        v.circles.append((comp, cyc))
    # Rule 2: what config.rs reaches in non-test code.
    v.tokio = []
    v.tokio_files = {}
    for rel, k, line, crate_name in sorted(crate.mentions, key=lambda m: (m[0], m[2])):
        f = files[rel]
        if f.in_test(k):
            continue
        v.tokio_files.setdefault((rel, False), (line, crate_name))
    start = (CONFIG_FILE, False)
    v.config_present = CONFIG_FILE in files and not files[CONFIG_FILE].test_only
    if v.config_present:
        if start in v.tokio_files:
            v.tokio.append([start])
        else:
            seen, q = {start: None}, deque([start])
            while q:
                x = q.popleft()
                for y in sorted(succ[x]):
                    if y[1] or y in seen:
                        continue
                    seen[y] = x
                    if y in v.tokio_files:
                        path = [y]
                        while seen[path[-1]] is not None:
                            path.append(seen[path[-1]])
                        v.tokio.append(list(reversed(path)))
                    else:
                        q.append(y)
    return v


def where(v, a, b, all_lines):
    """`file:line: text` of the edge a -> b: its first `use` line (else its
    first line), or all of its lines."""
    occ = v.edges[(a, b)]
    lines = sorted({o[0] for o in occ})
    uses = sorted({o[0] for o in occ if o[1] == "use"})
    shown = lines if all_lines else [uses[0] if uses else lines[0]]
    out = [f"{a[0]}:{line}: {v.files[a[0]].text_of_line(line)}" for line in shown]
    if len(lines) > len(shown):
        out[-1] += f"   (+{len(lines) - len(shown)} more line(s))"
    return out


def list_edges(v, out):
    for (a, b) in sorted(v.edges):
        print(f"{label(a, v.files)} -> {label(b, v.files)}", file=out)
        for w in where(v, a, b, True):
            print(f"    {w}", file=out)


def report(v, out, all_lines=False):
    files = v.files
    for note in v.crate.notes:
        print(note, file=sys.stderr)
    for n, (comp, cyc) in enumerate(v.circles, 1):
        print(f"circle {n} ({len(comp)} files):", file=out)
        print("  " + " -> ".join(label(u, files) for u in cyc), file=out)
        on_cycle = set(zip(cyc, cyc[1:]))
        for a, b in zip(cyc, cyc[1:]):
            for w in where(v, a, b, all_lines):
                print(f"    {w}", file=out)
        others = sorted((a, b) for (a, b) in v.edges
                        if a in comp and b in comp and (a, b) not in on_cycle)
        rest = [u for u in comp if u not in cyc]
        if rest:
            print("  the circle's component also holds: "
                  + ", ".join(label(u, files) for u in rest), file=out)
        if others:
            print("  other edges inside the component:", file=out)
            for a, b in others:
                print(f"    {label(a, files)} -> {label(b, files)}", file=out)
                for w in where(v, a, b, all_lines):
                    print(f"      {w}", file=out)
    for chain in v.tokio:
        last = chain[-1]
        line, crate_name = v.tokio_files[last]
        print(f"{CONFIG_FILE} reaches Tokio-using code:", file=out)
        print("  " + " -> ".join(u[0] for u in chain), file=out)
        for a, b in zip(chain, chain[1:]):
            for w in where(v, a, b, all_lines):
                print(f"    {w}", file=out)
        print(f"    {last[0]}:{line}: {files[last[0]].text_of_line(line)}"
              f"   (uses {crate_name})", file=out)
    n_files, n_edges = len(files), len(v.file_edges)
    if not v.config_present:
        print(f"note: no {CONFIG_FILE}: its rule is not checked", file=sys.stderr)
    if v.circles or v.tokio:
        parts = []
        if v.circles:
            parts.append(f"{len(v.circles)} circle(s)")
        if v.tokio:
            parts.append(f"{CONFIG_FILE} reaches {len(v.tokio)} Tokio-using file(s)")
        print(f"check-graph: {n_files} files, {n_edges} edges, " + ", ".join(parts), file=out)
        return 1
    print(f"check-graph: {n_files} files, {n_edges} edges, no circles", file=out)
    return 0


def dot(v, out):
    in_circle = set()
    for comp, _cyc in v.circles:
        for (a, b) in v.edges:
            if a in comp and b in comp:
                in_circle.add((a[0], b[0]))
    print("digraph wavesock {", file=out)
    print('  rankdir=LR; node [shape=box, fontname="monospace", fontsize=10];', file=out)
    by_dir = defaultdict(list)
    for rel in sorted(v.files):
        by_dir[os.path.dirname(rel)].append(rel)
    for n, (d, rels) in enumerate(sorted(by_dir.items())):
        print(f'  subgraph "cluster_{n}" {{ label="{d}/"; color=gray;', file=out)
        for rel in rels:
            style = ", style=dashed" if v.files[rel].test_only else ""
            print(f'    "{rel}" [label="{os.path.relpath(rel, "src")}"{style}];', file=out)
        print("  }", file=out)
    for (a, b), _occ in sorted(v.file_edges.items()):
        attrs = []
        only_test = all(src[1] for (src, dst) in v.edges if src[0] == a and dst[0] == b)
        if only_test:
            attrs.append("style=dashed")
        if (a, b) in in_circle:
            attrs.append("color=red, penwidth=2")
        extra = f" [{', '.join(attrs)}]" if attrs else ""
        print(f'  "{a}" -> "{b}"{extra};', file=out)
    print("}", file=out)


# ------------------------------------------------------------ self-test

FAKE = {
    "src/lib.rs": """
//! A fake crate. `crate::b::B` in a doc comment is no edge: [`b::B`].
pub mod a;
pub mod b;
pub mod config;
mod opts;
mod rt;
mod s;
mod g;
pub mod r;
mod t;
#[macro_use]
mod trace;
mod lex;
mod lex2;
mod alt;
mod alt_user;
pub use r::Two;
pub use bytes::Bytes;
""",
    # A circle through `use crate::...`.
    "src/a.rs": "use crate::b::B;\npub struct A(B);\n",
    "src/b.rs": "pub struct B;\nimpl B { pub fn a(&self) -> Option<crate::a::A> { None } }\n",
    # A circle through `super::`, one side a path inline in code.
    "src/s/mod.rs": "mod x;\nmod y;\n#[cfg(not(test))]\nfn f() -> x::X { todo!() }\n",
    "src/s/x.rs": "use super::y::Y;\npub struct X(Y);\n",
    "src/s/y.rs": "pub struct Y;\npub fn f() { let _ = super::x::X(Y); }\n",
    # A circle through a nested group.
    "src/g/mod.rs": "mod p;\nmod q;\n",
    "src/g/p.rs": "use crate::{g::{q::{Q, helper as h}}, Bytes};\npub struct P;\n",
    "src/g/q.rs": "pub struct Q;\npub fn helper() {}\nfn f(_: super::p::P) {}\n",
    # Re-exports through mod.rs: no false circle. one uses `super::Two`
    # (two.rs's, re-exported), mod.rs uses `One`; three uses `Shared`,
    # defined in mod.rs.
    "src/r/mod.rs": """
mod one;
mod two;
mod three;
pub use one::One;
pub use self::two::Two;
pub(crate) use crate::r::two::Deep as Renamed;
pub struct Shared;
pub fn make() -> One { One }
""",
    "src/r/one.rs": "use super::Two;\nuse crate::Two as AlsoTwo;\npub struct One;\npub fn f(_: Two, _: AlsoTwo) {}\nfn g() -> super::Renamed { todo!() }\n",
    "src/r/two.rs": """
/// Not [`super::make`]; the string "crate::r::one::One" is no edge either.
pub struct Two;
pub struct Deep;
const Q: char = '"'; const S: &str = "see crate::a::A";
const BS: &[u8] = b"crate::a::A";
const E: char = '\\'';
const QS: [char; 2] = ['\\'','"'];
fn after(_: crate::b::B) {}
fn s() -> &'static str { r#"a" crate::a::A "b"# }
""",
    "src/r/three.rs": "pub struct Three(super::Shared);\n",
    # A mod.rs whose tests use a child that uses the mod.rs: no circle. The
    # child's tests live in a #[path] file that uses `super::`: no circle.
    "src/t/mod.rs": """
mod leaf;
pub struct Base;
#[cfg(test)]
mod tests {
    use super::leaf::Leaf;
    #[test]
    fn t() { let _ = Leaf; super::leaf::test_helper(); }
}
#[cfg(all(feature = "x", any(test, test)))]
fn helper() -> leaf::Leaf { leaf::Leaf(Base) }
""",
    "src/t/leaf.rs": """
use super::Base;
pub struct Leaf(Base);
#[cfg(test)]
pub(crate) fn test_helper() {}
#[cfg(test)]
#[path = "leaf_tests.rs"]
mod tests;
""",
    "src/t/leaf_tests.rs": "use super::*;\nuse crate::rt::Handle;\nuse tokio::runtime::Runtime;\n",
    # Rule 2: config -> opts -> rt (tokio); config's tests may use tokio.
    "src/config.rs": """
use crate::opts::Opts;
pub struct Config(Opts);
#[cfg(test)]
mod tests {
    use tokio::net::TcpStream;
    use crate::rt::Handle;
}
""",
    "src/opts.rs": """
pub struct Opts { futures: usize }
// tokio::spawn in a comment, "futures::join" in a string, a field and a
// method: no Tokio.
pub fn h(o: &Opts) -> crate::rt::Handle { o.tokio::<u8>(o.futures); crate::rt::Handle }
""",
    # Two cfg alternatives of one module: both are nodes, a path into the
    # module reaches both, and neither reaches the other.
    "src/alt/mod.rs": """
#[cfg(feature = "x")]
mod imp;
#[cfg(not(feature = "x"))]
#[path = "imp_stub.rs"]
mod imp;
pub use imp::{Thing, make_thing};
// Neither a local nor a field of the re-exported names uses them.
fn g(x: S) -> usize { let make_thing = 1; make_thing + x.Thing }
""",
    "src/alt/imp.rs": "pub struct Thing;\npub fn make_thing() { let _ = self::Thing; }\n",
    "src/alt/imp_stub.rs": "pub struct Thing;\npub fn make_thing() -> Thing { Thing }\n",
    "src/alt_user.rs": "use crate::alt::Thing;\nfn f(_: Thing) {}\n",
    "src/rt.rs": "use std::io;\npub struct Handle;\npub async fn f() { tokio::task::yield_now().await }\n",
    # Macros: a #[macro_use] module's macro called bare, and one by path.
    "src/trace.rs": "macro_rules! ev { () => {} }\npub(crate) use ev;\n",
    "src/lex.rs": "fn f() { crate::trace::ev!(); write!(); }\n",
    "src/lex2.rs": "fn f() { ev!(); crate::b::made_by_a_macro(); }\nfn g() { use crate::a; a::A; }\n",
}

CLEAN = {
    "src/b.rs": "pub struct B;\n",
    "src/s/y.rs": "pub struct Y;\n",
    "src/g/q.rs": "pub struct Q;\npub fn helper() {}\n",
    "src/opts.rs": "pub struct Opts;\n",
}


def self_test():
    tmp = tempfile.mkdtemp(prefix="check-graph-")
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    try:
        for rel, text in FAKE.items():
            p = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as fh:
                fh.write(text.lstrip("\n"))
        v = analyze(tmp)
        fe = set(v.file_edges)
        circles = sorted(sorted({u[0] for u in comp}) for comp, _ in v.circles)
        want = [["src/a.rs", "src/b.rs"], ["src/g/p.rs", "src/g/q.rs"],
                ["src/s/x.rs", "src/s/y.rs"]]
        check(circles == want, f"circles {circles}, want {want}")
        for e in [("src/a.rs", "src/b.rs"), ("src/b.rs", "src/a.rs"),
                  ("src/s/y.rs", "src/s/x.rs"), ("src/g/p.rs", "src/g/q.rs"),
                  ("src/g/p.rs", "src/lib.rs"),          # crate::Bytes
                  ("src/r/one.rs", "src/r/two.rs"),       # through mod.rs
                  ("src/r/mod.rs", "src/r/one.rs"),       # uses One
                  ("src/r/three.rs", "src/r/mod.rs"),     # Shared
                  ("src/t/mod.rs", "src/t/leaf.rs"),      # its tests
                  ("src/t/leaf.rs", "src/t/mod.rs"),
                  ("src/t/leaf_tests.rs", "src/t/leaf.rs"),
                  ("src/config.rs", "src/opts.rs"), ("src/opts.rs", "src/rt.rs"),
                  ("src/r/two.rs", "src/b.rs"),           # after the literals
                  ("src/lex.rs", "src/trace.rs"),         # by path
                  ("src/lex2.rs", "src/trace.rs"),        # #[macro_use]
                  ("src/lex2.rs", "src/b.rs"),            # unknown name
                  ("src/lex2.rs", "src/a.rs"),            # `use` in a fn
                  ("src/alt_user.rs", "src/alt/imp.rs"),
                  ("src/alt_user.rs", "src/alt/imp_stub.rs")]:
            check(e in fe, f"missing edge {e[0]} -> {e[1]}")
        for e in [("src/r/one.rs", "src/r/mod.rs"),       # re-exports followed
                  ("src/r/mod.rs", "src/r/two.rs"),       # pub use alone
                  ("src/lib.rs", "src/r/two.rs"),
                  ("src/r/two.rs", "src/r/one.rs"),       # doc, strings
                  ("src/lib.rs", "src/b.rs"),
                  ("src/g/mod.rs", "src/g/p.rs"),         # `mod p;`
                  ("src/alt/imp.rs", "src/alt/imp_stub.rs"),
                  ("src/alt_user.rs", "src/alt/mod.rs"),
                  ("src/alt/mod.rs", "src/alt/imp.rs"),   # re-export alone
                  ("src/r/two.rs", "src/a.rs")]:          # strings
            check(e not in fe, f"false edge {e[0]} -> {e[1]}")
        check(all(a != b for a, b in fe), "a self-loop is an edge")
        check(v.edges.get((("src/t/mod.rs", True), ("src/t/leaf.rs", True))),
              "a #[cfg(test)] fn is not test code")
        check(v.edges.get((("src/s/mod.rs", False), ("src/s/x.rs", False))),
              "cfg(not(test)) taken for test code")
        check(v.edges.get((("src/t/mod.rs", True), ("src/t/leaf.rs", False))),
              "t/mod.rs's tests -> leaf.rs is not a test edge")
        chains = [[u[0] for u in c] for c in v.tokio]
        check(chains == [["src/config.rs", "src/opts.rs", "src/rt.rs"]],
              f"config chains {chains}")
        out = Capture()
        check(report(v, out) == 1, "dirty crate passes")
        check("src/s/x.rs -> src/s/y.rs -> src/s/x.rs" in out.text,
              "circle not printed as a chain:\n" + out.text)
        check("src/s/x.rs:1: use super::y::Y;" in out.text,
              "edge line not printed:\n" + out.text)
        for rel, text in CLEAN.items():
            with open(os.path.join(tmp, rel), "w", encoding="utf-8") as fh:
                fh.write(text)
        v = analyze(tmp)
        out = Capture()
        code = report(v, out)
        check(code == 0 and "no circles" in out.text,
              "clean crate fails:\n" + out.text)
        check(dot_ok(v), "--dot output looks wrong")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print(f"self-test: {f}", file=sys.stderr)
    if failures:
        print(f"check-graph --self-test: {len(failures)} failure(s)", file=sys.stderr)
        return 1
    print("check-graph --self-test: ok")
    return 0


class Capture:
    def __init__(self):
        self.text = ""

    def write(self, s):
        self.text += s


def dot_ok(v):
    out = Capture()
    dot(v, out)
    return out.text.startswith("digraph") and '"src/config.rs" -> "src/opts.rs"' in out.text


def main(argv):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` is fine
    root, mode, all_lines = ".", "check", False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--dot":
            mode = "dot"
        elif a == "--self-test":
            mode = "self-test"
        elif a == "--edges":
            mode = "edges"
        elif a == "--all-lines":
            all_lines = True
        elif a == "--root" and i + 1 < len(argv):
            root, i = argv[i + 1], i + 1
        else:
            print("usage: scripts/check-graph.sh [--dot | --edges | --self-test]"
                  " [--all-lines] [--root DIR]",
                  file=sys.stderr)
            return 2
        i += 1
    if mode == "self-test":
        return self_test()
    v = analyze(root)
    if mode == "dot":
        dot(v, sys.stdout)
        return 0
    if mode == "edges":
        list_edges(v, sys.stdout)
        return 0
    return report(v, sys.stdout, all_lines)


sys.exit(main(sys.argv[1:]))
PY
