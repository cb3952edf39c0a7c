"""Round 7's battery (issue 40): what its hostile submissions do to the grader that expected.toml cannot express.

The battery itself is `staff_tests/students/r7_*` (graded and judged with the rest of the adversarial set). Two
of its attacks aim at the grader rather than at points, through the progress channel the child writes on:
- a `staff_error` the submission's process sends (a forged line, or an exception its own `cs_basics/__init__.py`
  raises while the child imports the rule through that package): the grader stopped with exit 2 and gave the
  submission's text as its own error. Graded here alone, by the command line, in each sandbox: the exit
  status is 0 or 1, never 2, and the text is never the reason grading stopped.
- a forged `done` report whose evidence count is huge (r7_hostile_forged_done's, with 10**12 for its 0): the
  grader checked "every line up to n arrived" by building the numbers 1..n. Graded in a memory cgroup of
  768 MiB (Gradescope's default), so that a grader that tries cannot take the machine's memory with it: it must
  finish (exit 0) and zero the problem. Not in the adversarial set, whose batch runs without such a cgroup.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cs_basics.harness.grading.sandbox.bubblewrap import bubblewrap_runs

from .adversarial import STOPPED, STUDENTS, load
from .submissions import ROOT, said
from .test_memory_limits import CONTAINER_MB, memory_cgroup, with_rmdir

needs_bubblewrap = pytest.mark.skipif(not bubblewrap_runs(), reason="bubblewrap does not run here: only the fallback")
SANDBOXES = [pytest.param("bubblewrap", marks=needs_bubblewrap), "fallback"]
STAFF_ERRORS = ["r7_hostile_forged_staff_error", "r7_hostile_init_raises"]


def grade_alone(submission: Path, results: Path, sandbox: str, **run: object) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "cs_basics.cli", "grade", "--project", str(ROOT), "--sandbox", sandbox]
    command += ["--submission", str(submission), "--results", str(results), "--quiet"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, **run)


def points(results: Path) -> dict[str, float]:
    found: dict[str, float] = {}
    for test in json.loads(results.read_text())["tests"]:
        found[test["tags"][0]] = found.get(test["tags"][0], 0.0) + test["score"]
    return found


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("name", STAFF_ERRORS)
def test_a_submission_never_makes_the_grader_exit_2_nor_speak_as_the_staff(
    tmp_path: Path, name: str, sandbox: str
) -> None:
    forged = load(STUDENTS / name)["channel"]["staff_error_text"]
    results = tmp_path / "results.json"
    done = grade_alone(STUDENTS / name, results, sandbox)
    assert done.returncode in (0, 1), (done.returncode, done.stderr[-2000:])
    assert forged not in done.stderr, done.stderr[-2000:]
    data = json.loads(results.read_text())
    texts = [data.get("output", ""), *(said(data, t) for t in data["tests"])]
    assert not [text for text in texts if STOPPED in text and forged in text]
    assert points(results) == {"softmax": 0.0, "scaled_dot_product_attention": 0.0}


FORGED_DONE = "r7_hostile_forged_done"  # its forged reports say the channel sent 0 lines: here 10**12
ZERO_LINES, HUGE_COUNT = '"evidence": {"t": "", "n": 0}', '"evidence": {"t": "", "n": 1000000000000}'


def test_a_forged_evidence_count_costs_the_problem_not_the_graders_memory(tmp_path: Path) -> None:
    """r7_hostile_forged_done, whose softmax sends a forged `done` for every case in inputs/, with a count of 10**12."""
    group = memory_cgroup(CONTAINER_MB)
    if group is None:
        pytest.skip("no cgroup v1 memory cgroup can be made here (needs root and /sys/fs/cgroup/memory)")
    submission = tmp_path / "huge_count"
    shutil.copytree(STUDENTS / FORGED_DONE, submission)
    functional = submission / "cs_basics" / "nn" / "functional.py"
    assert ZERO_LINES in functional.read_text()
    functional.write_text(functional.read_text().replace(ZERO_LINES, HUGE_COUNT))
    results = tmp_path / "results.json"
    try:
        enter = lambda: (group / "cgroup.procs").write_text(str(os.getpid()))  # noqa: E731
        done = grade_alone(submission, results, "fallback", preexec_fn=enter)
    finally:
        with_rmdir(group)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert points(results) == {"softmax": 0.0, "scaled_dot_product_attention": 0.0}
