"""Unit tests of check.py over the small sample reports in samples/.

Run: python3 -m unittest discover -s tests/autobahn -v
Each sample is a report directory as kosoku writes it (index.json plus a
per-case report per case), seven cases in groups 1, 6, 7, 9, 12 and 13:
  strict/         every case OK or INFORMATIONAL
  non_strict/     6.4.3 NON-STRICT
  unimplemented/  12.1.1 and 13.1.1 UNIMPLEMENTED
  failed_close/   7.1.6 INFORMATIONAL, but its close FAILED
Variants (a disagreeing or missing case report, no index) are made from
them in a temporary directory.
"""

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check  # noqa: E402

SAMPLES = os.path.join(HERE, "samples")


def run(sample, *args):
    """Runs check.py as a program: (exit status, output)."""
    path = sample if os.path.isabs(sample) else os.path.join(SAMPLES, sample)
    p = subprocess.run(
        [sys.executable, os.path.join(HERE, "check.py"), path, *args],
        capture_output=True,
        text=True,
    )
    return p.returncode, p.stdout + p.stderr


def last_line(output):
    return output.strip().splitlines()[-1]


class Verdicts(unittest.TestCase):
    def test_strict_report_passes(self):
        code, out = run("strict")
        self.assertEqual(code, 0, out)
        self.assertEqual(last_line(out), "7 passed, 0 failed")

    def test_one_non_strict_case_fails(self):
        code, out = run("non_strict")
        self.assertEqual(code, 1, out)
        self.assertEqual(last_line(out), "6 passed, 1 failed")
        self.assertIn("FAIL 6.4.3: NON-STRICT (close OK): Actual events differ", out)

    def test_unimplemented_fails_without_leave(self):
        code, out = run("unimplemented")
        self.assertEqual(code, 1, out)
        self.assertEqual(last_line(out), "5 passed, 2 failed")
        self.assertIn("FAIL 12.1.1: UNIMPLEMENTED", out)
        self.assertIn("FAIL 13.1.1: UNIMPLEMENTED", out)

    def test_unimplemented_allowed_only_in_named_groups(self):
        code, out = run("unimplemented", "--allow-unimplemented", "12,13")
        self.assertEqual(code, 0, out)
        self.assertEqual(last_line(out), "7 passed, 0 failed")
        code, out = run("unimplemented", "--allow-unimplemented", "12")
        self.assertEqual(code, 1, out)
        self.assertEqual(last_line(out), "6 passed, 1 failed")
        self.assertIn("FAIL 13.1.1", out)

    def test_allowing_unimplemented_does_not_excuse_non_strict(self):
        code, out = run("non_strict", "--allow-unimplemented", "6")
        self.assertEqual(code, 1, out)
        self.assertIn("FAIL 6.4.3", out)

    def test_failed_close_fails_an_informational_case(self):
        code, out = run("failed_close")
        self.assertEqual(code, 1, out)
        self.assertEqual(last_line(out), "6 passed, 1 failed")
        self.assertIn(
            "FAIL 7.1.6: INFORMATIONAL (close FAILED): The connection was failed", out
        )

    def test_excluded_groups_are_not_judged_and_are_counted(self):
        code, out = run("non_strict", "--exclude", "6")
        self.assertEqual(code, 0, out)
        self.assertEqual(last_line(out), "6 passed, 0 failed, 1 excluded")
        # A subgroup by name, and a name that only shares a prefix of digits.
        code, out = run("non_strict", "--exclude", "6.4")
        self.assertEqual(last_line(out), "6 passed, 0 failed, 1 excluded")
        code, out = run("non_strict", "--exclude", "6.40")
        self.assertEqual(code, 1, out)
        code, out = run("strict", "--exclude", "1")
        self.assertEqual(last_line(out), "6 passed, 0 failed, 1 excluded")

    def test_expected_count(self):
        code, out = run("strict", "--expect", "7")
        self.assertEqual(code, 0, out)
        code, out = run("strict", "--expect", "517")
        self.assertEqual(code, 1, out)
        self.assertIn("expected 517 cases, judged 7", out)
        self.assertEqual(last_line(out), "7 passed, 1 failed")

    def test_groups_sort_numerically(self):
        _, out = run("strict")
        rows = [l.split()[0] for l in out.splitlines() if l[:5].strip().isdigit()]
        self.assertEqual(rows, ["1", "6", "7", "9", "12", "13"])

    def test_usage_errors(self):
        self.assertEqual(run("strict", "--exclude")[0], 2)
        self.assertEqual(run("strict", "--exclude", "x")[0], 2)
        self.assertEqual(run("strict", "--expect", "many")[0], 2)
        self.assertEqual(run("strict", "--frobnicate")[0], 2)
        self.assertEqual(run("strict", "strict")[0], 2)


class Reports(unittest.TestCase):
    """The per-case reports, and report directories that are not whole."""

    def copy(self, sample):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        dest = os.path.join(tmp, sample)
        shutil.copytree(os.path.join(SAMPLES, sample), dest)
        return dest

    def test_no_index_fails(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        code, out = run(tmp)
        self.assertEqual(code, 1, out)
        self.assertIn("no report at", out)
        self.assertEqual(last_line(out), "0 passed, 1 failed")

    def test_unreadable_index_fails(self):
        d = self.copy("strict")
        with open(os.path.join(d, "index.json"), "w") as f:
            f.write("{ not json")
        code, out = run(d)
        self.assertEqual(code, 1, out)
        self.assertEqual(last_line(out), "0 passed, 1 failed")

    def test_case_report_disagreeing_with_index_fails(self):
        d = self.copy("strict")
        path = os.path.join(d, "wavesock_case_9_2_1.json")
        with open(path) as f:
            report = json.load(f)
        report["behavior"] = "FAILED"
        with open(path, "w") as f:
            json.dump(report, f)
        code, out = run(d)
        self.assertEqual(code, 1, out)
        self.assertIn("FAIL 9.2.1: index says OK/OK, the case report FAILED/OK", out)

    def test_missing_case_report_is_noted_and_judged_by_index(self):
        d = self.copy("non_strict")
        os.remove(os.path.join(d, "wavesock_case_1_1_1.json"))
        os.remove(os.path.join(d, "wavesock_case_6_4_3.json"))
        code, out = run(d)
        self.assertEqual(code, 1, out)
        self.assertIn("case 1.1.1: wavesock_case_1_1_1.json is missing", out)
        # Without its report, the failing case still fails, with no detail.
        self.assertIn("FAIL 6.4.3: NON-STRICT (close OK)\n", out)
        self.assertEqual(last_line(out), "6 passed, 1 failed")

    def test_several_agents_are_all_judged(self):
        d = self.copy("strict")
        with open(os.path.join(d, "index.json")) as f:
            index = json.load(f)
        other = dict(index["wavesock"])
        other["6.4.3"] = dict(other["6.4.3"], behavior="NON-STRICT", reportfile="")
        index["other"] = other
        with open(os.path.join(d, "index.json"), "w") as f:
            json.dump(index, f)
        code, out = run(d)
        self.assertEqual(code, 1, out)
        self.assertIn("agent other: 7 cases judged", out)
        self.assertEqual(last_line(out), "13 passed, 1 failed")


class Functions(unittest.TestCase):
    def test_in_groups(self):
        groups = check.parse_groups("12,6.4")
        self.assertTrue(check.in_groups("12.1.1", groups))
        self.assertTrue(check.in_groups("6.4.3", groups))
        self.assertFalse(check.in_groups("6.2.1", groups))
        self.assertFalse(check.in_groups("1.2.1", groups))
        self.assertFalse(check.in_groups("6", groups))

    def test_check_returns_counts(self):
        buf = io.StringIO()
        self.assertEqual(check.check(os.path.join(SAMPLES, "strict"), out=buf), (7, 0, 0))
        buf = io.StringIO()
        self.assertEqual(
            check.check(
                os.path.join(SAMPLES, "unimplemented"),
                allow=check.parse_groups("12"),
                exclude=check.parse_groups("1"),
                out=buf,
            ),
            (5, 1, 1),
        )


if __name__ == "__main__":
    unittest.main()
