#!/usr/bin/env python3
"""Strict verdict on an Autobahn TestSuite report directory.

usage: check.py REPORT_DIR [--allow-unimplemented GROUPS] [--exclude GROUPS]
                           [--expect N]

Reads the runner's REPORT_DIR/index.json and, for every case it lists, the
per-case report it names (`reportfile`). A case passes when both its
`behavior` and its `behaviorClose` are OK or INFORMATIONAL. NON-STRICT,
FAILED, UNIMPLEMENTED, WRONG CODE, UNCLEAN and anything else fail: the
strict reading, since NON-STRICT marks a SHOULD of RFC 6455 not followed.

GROUPS is a comma-separated list of case groups named as the suite numbers
them: `12` is every case 12.*, `6.4` every case 6.4.*.
  --allow-unimplemented GROUPS  UNIMPLEMENTED passes in those groups (and
                                nothing else does).
  --exclude GROUPS              those groups are not judged at all; they are
                                counted apart in the summary.
  --expect N                    fail unless exactly N cases were judged
                                (a run that stopped early writes fewer).

Prints a table per agent and group, each failing case with the reason its
per-case report gives, and last the summary line
`N passed, M failed` (with `, K excluded` when groups were excluded).
Exit status: 0 when nothing failed, 1 when something did, 2 on bad usage.
"""

import json
import os
import sys
from collections import defaultdict

PASSING = ("OK", "INFORMATIONAL")


class Usage(Exception):
    """The command line could not be read."""


def parse_groups(text):
    """`12,6.4` -> [("12",), ("6", "4")]; an empty or malformed name is refused."""
    groups = []
    for name in text.split(","):
        name = name.strip()
        parts = tuple(name.split("."))
        if not name or not all(p.isdigit() for p in parts):
            raise Usage(f"not a case group: {name!r} (use numbers such as 12 or 6.4)")
        groups.append(parts)
    return groups


def in_groups(case_id, groups):
    """Whether the case `6.4.3` lies in one of the groups (`6`, `6.4`, `6.4.3`)."""
    parts = tuple(case_id.split("."))
    return any(parts[: len(g)] == g for g in groups)


def case_key(case_id):
    """Sort key putting 9.10.1 after 9.2.1; non-numeric parts sort last."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in case_id.split(".")]


def parse_args(argv):
    opts = {"dir": None, "allow": [], "exclude": [], "expect": None}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--allow-unimplemented", "--exclude", "--expect"):
            if i + 1 >= len(argv):
                raise Usage(f"{arg} needs a value")
            value = argv[i + 1]
            if arg == "--allow-unimplemented":
                opts["allow"] += parse_groups(value)
            elif arg == "--exclude":
                opts["exclude"] += parse_groups(value)
            else:
                if not value.isdigit():
                    raise Usage(f"--expect takes a number of cases, not {value!r}")
                opts["expect"] = int(value)
            i += 2
        elif arg.startswith("-"):
            raise Usage(f"unknown option {arg}")
        elif opts["dir"] is None:
            opts["dir"] = arg
            i += 1
        else:
            raise Usage(f"one report directory only, not also {arg}")
    if opts["dir"] is None:
        raise Usage("which report directory?")
    return opts


def read_case_report(outdir, entry):
    """The per-case report the index names, or (None, why not)."""
    name = entry.get("reportfile")
    if not name:
        return None, "the index names no per-case report"
    path = os.path.join(outdir, name)
    try:
        with open(path) as f:
            return json.load(f), None
    except FileNotFoundError:
        return None, f"{name} is missing"
    except (OSError, ValueError) as e:
        return None, f"{name} cannot be read: {e}"


def judge_case(case_id, entry, report, allow):
    """(passed, reason) for one case from its index entry and its report."""
    behavior = entry.get("behavior", "?")
    close = entry.get("behaviorClose", "?")
    if report is not None:
        # The index is written from the case reports: if they disagree, one
        # of them is not from this run, and neither can be trusted.
        mine = (report.get("behavior", behavior), report.get("behaviorClose", close))
        if mine != (behavior, close):
            return False, (
                f"index says {behavior}/{close}, the case report {mine[0]}/{mine[1]}"
            )
    if behavior in PASSING and close in PASSING:
        return True, None
    if behavior == "UNIMPLEMENTED" and in_groups(case_id, allow):
        return True, None
    reason = f"{behavior} (close {close})"
    if report is not None:
        detail = report.get("result") if behavior not in PASSING else report.get("resultClose")
        if detail:
            reason += f": {detail}"
    return False, reason


def check(outdir, allow=(), exclude=(), expect=None, out=sys.stdout):
    """Judges one report directory; returns (passed, failed, excluded)."""
    path = os.path.join(outdir, "index.json")
    try:
        with open(path) as f:
            index = json.load(f)
    except FileNotFoundError:
        print(f"no report at {path}: did the run reach the end?", file=out)
        print("0 passed, 1 failed", file=out)
        return 0, 1, 0
    except (OSError, ValueError) as e:
        print(f"{path} cannot be read: {e}", file=out)
        print("0 passed, 1 failed", file=out)
        return 0, 1, 0
    if not isinstance(index, dict) or not all(isinstance(c, dict) for c in index.values()):
        print(f"{path} is not an Autobahn index (agent -> case -> result)", file=out)
        print("0 passed, 1 failed", file=out)
        return 0, 1, 0

    passed = failed = excluded = 0
    missing_reports = 0
    for agent in sorted(index):
        cases = index[agent]
        table = defaultdict(lambda: defaultdict(int))
        failures = []
        for case_id in sorted(cases, key=case_key):
            entry = cases[case_id]
            if in_groups(case_id, exclude):
                excluded += 1
                continue
            report, why_not = read_case_report(outdir, entry)
            if report is None:
                missing_reports += 1
                if missing_reports <= 3:
                    print(f"  note: case {case_id}: {why_not}; judged by the index", file=out)
            table[case_id.split(".")[0]][entry.get("behavior", "?")] += 1
            ok, reason = judge_case(case_id, entry, report, allow)
            if ok:
                passed += 1
            else:
                failed += 1
                failures.append((case_id, reason))
        verdicts = sorted({v for g in table.values() for v in g})
        print(f"agent {agent}: {sum(map(lambda g: sum(g.values()), table.values()))} cases judged", file=out)
        print("group " + " ".join(f"{v:>14}" for v in verdicts), file=out)
        for g in sorted(table, key=case_key):
            print(f"{g:>5} " + " ".join(f"{table[g][v]:>14}" for v in verdicts), file=out)
        for case_id, reason in failures:
            print(f"  FAIL {case_id}: {reason}", file=out)
    if missing_reports > 3:
        print(f"  note: {missing_reports} cases had no readable per-case report", file=out)
    if expect is not None and passed + failed != expect:
        print(f"expected {expect} cases, judged {passed + failed}: the run is incomplete", file=out)
        failed += 1
    summary = f"{passed} passed, {failed} failed"
    if excluded:
        summary += f", {excluded} excluded"
    print(summary, file=out)
    return passed, failed, excluded


def main(argv):
    try:
        opts = parse_args(argv)
    except Usage as e:
        print(f"check.py: {e}\n", file=sys.stderr)
        print(__doc__, file=sys.stderr)
        return 2
    _, failed, _ = check(opts["dir"], opts["allow"], opts["exclude"], opts["expect"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
