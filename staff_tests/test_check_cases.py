"""`cs-basics check-cases` on every assignment of the repository: the reference passes each case within its
tolerance, every known mistake fails a case and is named there, and (where it holds) the handout computes no
answer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cs_basics.harness.config import Assignment
from cs_basics.harness.course.casecheck import check_cases, shipped_answers

from .submissions import course_shipping_a_from_scratch_mistake

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def this_assignment() -> Assignment:
    return Assignment.find(ROOT)


def test_every_mistake_of_this_assignment_fails_a_case_and_is_named_there(this_assignment):
    report = check_cases(this_assignment, until_named=True)
    assert not report.problems, report.text()
    assert set(report.shares) == {case.id for case in this_assignment.cases}
    worst = max(share for shares in report.shares.values() for share in shares.values())
    assert 0 < worst < 1, f"the reference's worst error is {worst:.2g} of its tolerance"


def test_a_mistake_no_case_shows_is_reported(this_assignment):
    """The check can fail: a mistake whose numbers are the right ones fails no case."""
    from dataclasses import replace

    from cs_basics.harness.diagnosis import Mistake

    case = next(c for c in this_assignment.cases if c.id == "softmax-last_dim")
    harmless = Mistake("harmless", "nothing to fix", {"run_softmax": lambda x, dim: x.exp() / x.exp().sum(dim, True)})
    course = Assignment(this_assignment.root, this_assignment.table)
    object.__setattr__(course, "cases", [replace(case, mistakes=(harmless,))])
    assert course.problems  # the tables still hold
    problems = check_cases(course, until_named=True).problems
    assert problems == ["the known mistake softmax: harmless fails no case: add a case that shows it"]


@pytest.fixture(scope="module")
def shipped(this_assignment) -> list[str]:
    return shipped_answers(this_assignment)


def test_this_assignments_handout_computes_no_answer(shipped):
    """Its from-scratch mistakes (the stability family, the epsilon, a sum over everything) are the staff's,
    hidden/answers.py; its oracles are calls of torch's own, which run a forbidden operator."""
    assert shipped == []


def test_a_from_scratch_mistake_in_the_handout_is_found(tmp_path):
    """The check can fail: a copy of this course with one mistake's code moved back into tests/ (in a process of
    its own: its `tests` package is the copy's)."""
    copy = course_shipping_a_from_scratch_mistake(tmp_path)
    script = (
        "from cs_basics.harness.config import Assignment\n"
        "from cs_basics.harness.course.casecheck import shipped_answers\n"
        "print(*shipped_answers(Assignment.find()), sep='\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=copy, capture_output=True, text=True, timeout=600)
    found = done.stdout.splitlines()
    assert len(found) == 1, done.stdout + done.stderr[-2000:]
    assert found[0].startswith("softmax: the known mistake sum_over_everything (tests.mistakes.<lambda>) ships in the")


EXAMPLES = sorted(p.parent.name for p in (ROOT / "examples").glob("*/pyproject.toml"))


@pytest.mark.parametrize("example", EXAMPLES)
def test_check_cases_passes_for_every_example(example):
    """Each example assignment, in a process of its own (its `tests` package is not this repository's)."""
    folder = ROOT / "examples" / example
    checked = subprocess.run(
        [sys.executable, "-m", "cs_basics.cli", "check-cases"], cwd=folder, capture_output=True, text=True, timeout=240
    )
    assert checked.returncode == 0, checked.stdout[-4000:] + checked.stderr[-2000:]
    assert "every mistake fails a case and is named" in checked.stdout
    assert "the handout ships no answer" in checked.stdout
