"""scripts/suite_summary.py, the suite's guard against regrowth: the closing lines of scripts/test.sh count both
phases as one, name the longest groups, and say when the run went over its budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "suite_summary.py"


def _report(path: Path, cases: list[tuple[str, float, str]]) -> Path:
    """A JUnit report as pytest writes it: (name, seconds, outcome) per test case."""
    body = "".join(f'<testcase classname="tests.test_x" name="{name}" time="{t}">'
                   + ("<failure message='no'/>" if outcome == "failed" else "<skipped/>" if outcome == "skipped"
                      else "") + "</testcase>" for name, t, outcome in cases)
    failures = sum(1 for *_, o in cases if o == "failed")
    skipped = sum(1 for *_, o in cases if o == "skipped")
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest" errors="0" failures="{failures}" '
                    f'skipped="{skipped}" tests="{len(cases)}">{body}</testsuite></testsuites>')
    return path


def _summary(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_both_phases_close_in_one_line_and_the_longest_groups_are_named(tmp_path):
    parallel = _report(tmp_path / "parallel.xml", [
        ("test_a@clusters", 300, "passed"), ("test_b@clusters", 180, "passed"),
        ("test_c@tests/test_v.py on 4.0", 120, "failed"), ("test_d", 600, "passed")])
    alone = _report(tmp_path / "alone.xml", [("test_soak", 330, "passed"), ("test_e", 1, "skipped")])
    lines = _summary("--setup-s", "50", "--total-s", str(30 * 60), str(parallel), str(alone))
    assert lines == ["longest groups: clusters 8.0 min; tests/test_v.py on 4.0 2.0 min",
                     "suite time: 30.0 min in all, 50 s of it setup",
                     "suite: 4 passed, 1 failed, 1 skipped"]


def test_a_run_over_its_budget_says_so_and_a_phase_that_wrote_no_report_counts_nothing(tmp_path):
    parallel = _report(tmp_path / "parallel.xml", [("test_a", 1, "passed")])
    lines = _summary("--setup-s", "50", "--total-s", str(36 * 60), str(parallel), str(tmp_path / "missing.xml"))
    assert lines == ["suite time: 36.0 min in all, 50 s of it setup: OVER the 35-minute budget, see docs/testing.md",
                     "suite: 1 passed, 0 failed"]
