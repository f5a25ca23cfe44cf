#!/usr/bin/env python3
"""Checks that the hub binary's checks can fail: applies each mutation of
tests/hub/mutations/list.txt, one at a time, to a scratch worktree of
HEAD, builds the `hub` test binary and runs the model harness
(`model::`, HARNESS_SECS, stopped at its first failing script) and the
suites the mutation names, and prints a table: the mutation, whether it
was caught, by which test, after how many seconds of the run. Exits 1 if
one survived (or the unmutated code failed).

    python3 scripts/mutants.py                  every mutation, 45 s each
    python3 scripts/mutants.py --secs 60 owed-pongs-no-cap budget-limit-slack
    python3 scripts/mutants.py --list           names and descriptions
    python3 scripts/mutants.py --no-baseline owed-pongs-no-cap --tests model::ping_flood
                                                one test against one mutation

Run by hand, not by CI: a build of the binary per mutation. HEAD is what
is mutated: commit first. The builds go to MUTANTS_TARGET_DIR if set, else
target/mutants, never to the checkout's target directory; the scratch
worktree is removed at the end, and the checkout is never touched.
"""

import argparse
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIST = os.path.join(ROOT, "tests", "hub", "mutations", "list.txt")


def parse(path):
    """The mutations of `path`, in order: dicts of name, what, file, also,
    old, new."""
    out = []
    cur = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            where = f"{path}:{n}"
            if line.startswith("== "):
                name, _, what = line[3:].partition(": ")
                cur = {"name": name.strip(), "what": what.strip(), "file": None,
                       "also": [], "old": [], "new": [], "at": where}
                out.append(cur)
            elif cur is None or not line.strip() or line.startswith("#"):
                if cur is not None and (cur["old"] or cur["new"]) and not line.strip():
                    cur = None
                continue
            elif line.startswith("file: "):
                cur["file"] = line[6:].strip()
            elif line.startswith("also: "):
                cur["also"] = line[6:].split()
            elif line[:1] in "-+" and line[1:2] in ("", " "):
                cur["old" if line[0] == "-" else "new"].append(line[2:])
            else:
                sys.exit(f"{where}: not understood: {line!r}")
    for m in out:
        if not m["file"] or not m["old"]:
            sys.exit(f"{m['at']}: {m['name']} needs a file and text to replace")
    names = [m["name"] for m in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        sys.exit(f"{path}: names used twice: {sorted(dup)}")
    return out


def run(cmd, cwd, **kw):
    return subprocess.run(cmd, cwd=cwd, check=True, **kw)


def apply(tree, m):
    """Applies `m` in `tree`; an error if its text is not there exactly
    once (a mutation that no longer applies must not pass for caught)."""
    path = os.path.join(tree, m["file"])
    with open(path, encoding="utf-8") as f:
        text = f.read()
    old = "\n".join(m["old"]) + "\n"
    new = "\n".join(m["new"]) + "\n" if m["new"] else ""
    count = text.count(old)
    if count != 1:
        raise ValueError(f"{m['name']}: its text occurs {count} times in {m['file']}")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new))


def reset(tree):
    # Back to HEAD, and nothing the last run left (proptest's kept seeds).
    run(["git", "checkout", "-q", "--", "."], tree)
    run(["git", "clean", "-q", "-fd"], tree)


def build(tree, env):
    """Builds the hub binary in `tree`: its path, or None with the
    compiler's output printed."""
    p = subprocess.run(
        ["cargo", "test", "--test", "hub", "--no-run", "--message-format=json"],
        cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    exe = None
    for line in p.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") \
                and msg["target"]["name"] == "hub":
            exe = msg["executable"]
        if msg.get("reason") == "compiler-message" and msg["message"]["level"] == "error":
            print(msg["message"].get("rendered", ""), file=sys.stderr)
    if p.returncode != 0 or exe is None:
        print(p.stderr[-4000:], file=sys.stderr)
        return None
    # A copy of its own: another build into the same target directory
    # (the checkout's, under the same name) must not swap it meanwhile.
    own = os.path.join(os.path.dirname(tree), "hub-under-test")
    shutil.copy2(exe, own)
    return own


FAILED = re.compile(r"^test (\S+) \.\.\. FAILED")
SCRIPT_FAILED = "model: a script failed"


def test(exe, tree, suites, secs, env, log):
    """Runs the binary's `suites`: (the first failing test or None, seconds
    until then or until the end)."""
    env = dict(env, HARNESS_SECS=str(secs), HARNESS_QUICK="1")
    start = time.monotonic()
    # Each suite's own bound, past the harness's time: a hang is a finding
    # of the suite's, which the runner's limit would name.
    limit = secs + 120
    p = subprocess.Popen([exe, *suites], cwd=tree, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    sel.register(p.stderr, selectors.EVENT_READ)
    caught = None
    buffers = {p.stdout: b"", p.stderr: b""}
    open_streams = 2
    while open_streams and caught is None:
        left = limit - (time.monotonic() - start)
        if left <= 0:
            caught = f"(no end within {limit} s)"
            break
        for key, _ in sel.select(timeout=min(left, 1.0)):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                open_streams -= 1
                continue
            log.write(chunk)
            buffers[key.fileobj] += chunk
            *lines, buffers[key.fileobj] = buffers[key.fileobj].split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace")
                m = FAILED.match(line)
                if m:
                    caught = m.group(1)
                elif line.startswith(SCRIPT_FAILED):
                    caught = "model::generated_scripts_follow_the_model_on_every_engine"
                if caught:
                    break
            if caught:
                break
    seconds = time.monotonic() - start
    # A moment more of output, for the log to say why.
    tail = time.monotonic() + 2
    while open_streams and time.monotonic() < tail:
        for key, _ in sel.select(timeout=0.2):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                open_streams -= 1
            log.write(chunk)
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    rc = p.wait()
    if caught is None and rc != 0:
        caught = f"(exit {rc}: see the log)"
    return caught, seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="mutations to run (default: all)")
    ap.add_argument("--secs", type=int, default=45, help="HARNESS_SECS (default 45, as CI)")
    ap.add_argument("--list", action="store_true", help="list the mutations and stop")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the run of the unmutated code")
    ap.add_argument("--tests", nargs="+", metavar="FILTER", default=["model::"],
                    help="the test filters run for every mutation (default: model::), "
                    "beside each mutation's own `also`")
    args = ap.parse_args()
    mutations = parse(LIST)
    if args.list:
        for m in mutations:
            print(f"{m['name']}: {m['what']} ({m['file']})")
        return 0
    if args.names:
        unknown = set(args.names) - {m["name"] for m in mutations}
        if unknown:
            sys.exit(f"unknown mutations: {sorted(unknown)}")
        mutations = [m for m in mutations if m["name"] in args.names]

    env = dict(os.environ)
    # A target directory of its own, whatever CARGO_TARGET_DIR says: Cargo
    # keeps a workspace member's sources relative to its root, so a
    # mutant built into the checkout's directory would pass there for
    # fresh (the checkout's files being older) and be run as the
    # checkout's own code.
    env["CARGO_TARGET_DIR"] = os.environ.get(
        "MUTANTS_TARGET_DIR", os.path.join(ROOT, "target", "mutants"))
    env.setdefault("CARGO_INCREMENTAL", "0")
    env.setdefault("CARGO_PROFILE_DEV_DEBUG", "0")
    scratch = tempfile.mkdtemp(prefix="wavesock-mutants-")
    tree = os.path.join(scratch, "tree")
    log_path = os.path.join(scratch, "runs.log")
    run(["git", "worktree", "add", "-q", "--detach", tree, "HEAD"], ROOT)
    rows = []
    failed = False
    try:
        with open(log_path, "wb") as log:
            # Every mutation must apply before any time is spent.
            for m in mutations:
                apply(tree, m)
                reset(tree)
            if not args.no_baseline:
                suites = sorted({*args.tests, *(s for m in mutations for s in m["also"])})
                exe = build(tree, env)
                if exe is None:
                    sys.exit("the unmutated code does not build")
                print(f"baseline: {' '.join(suites)}", flush=True)
                caught, secs = test(exe, tree, suites, args.secs, env, log)
                if caught:
                    print(f"the unmutated code fails: {caught} ({log_path})")
                    return 1
                print(f"baseline passes ({secs:.0f} s)", flush=True)
            for m in mutations:
                reset(tree)
                apply(tree, m)
                log.write(f"\n===== {m['name']}\n".encode())
                exe = build(tree, env)
                if exe is None:
                    rows.append((m["name"], "no", "(does not build)", 0.0))
                    failed = True
                else:
                    suites = [*args.tests, *m["also"]]
                    caught, secs = test(exe, tree, suites, args.secs, env, log)
                    rows.append((m["name"], "yes" if caught else "no", caught or "-", secs))
                    failed |= caught is None
                r = rows[-1]
                print(f"{r[0]}: caught {r[1]}, {r[2]}, {r[3]:.0f} s", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=ROOT)
        print(f"log of the runs: {log_path}")
    print()
    print("| mutation | caught | by | seconds |")
    print("| --- | --- | --- | ---: |")
    for name, caught, by, secs in rows:
        print(f"| {name} | {caught} | {by} | {secs:.0f} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
