"""`cs-basics check-cases` on every assignment of the repository: the reference passes each case within its
tolerance, every known mistake fails a case and is named there, and (where it holds) the handout computes no
answer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

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


def shipped_in(course: Path) -> tuple[list[str], subprocess.CompletedProcess]:
    """What shipped_answers finds in the course at `course`, in a process of its own (its `tests` is not ours)."""
    script = (
        "from cs_basics.harness.config import Assignment\n"
        "from cs_basics.harness.course.casecheck import shipped_answers\n"
        "print(*shipped_answers(Assignment.find()), sep='\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=course, capture_output=True, text=True, timeout=600)
    return done.stdout.splitlines(), done


def test_a_from_scratch_mistake_in_the_handout_is_found(tmp_path):
    """The check can fail: a copy of this course with one mistake's code moved back into tests/ (in a process of
    its own: its `tests` package is the copy's)."""
    found, done = shipped_in(course_shipping_a_from_scratch_mistake(tmp_path))
    assert len(found) == 1, done.stdout + done.stderr[-2000:]
    assert found[0].startswith("softmax: the known mistake sum_over_everything (tests.mistakes.<lambda>, mistakes.py:")
    assert "ships in the handout" in found[0]


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


def softmax_by_autograd(x, dim):
    """Twice the softmax, as the gradient of logsumexp: a known mistake that needs autograd to run at all."""
    leaf = x.detach().requires_grad_()
    return 2 * torch.autograd.grad(torch.logsumexp(leaf, dim).sum(), leaf)[0]


def test_a_mistake_that_needs_autograd_is_named_and_one_that_cannot_run_is_said(this_assignment):
    """The diagnosis runs a mistake as the case runs (autograd on): one built on autograd is named; one that
    raises wherever it runs could never be named, and check-cases says why instead of staying silent."""
    from dataclasses import replace

    from cs_basics.harness.diagnosis import Mistake

    case = next(c for c in this_assignment.cases if c.id == "softmax-last_dim")
    needs_autograd = Mistake("doubled", "twice the softmax", {"run_softmax": softmax_by_autograd})
    broken = Mistake("broken", "never runs", {"run_softmax": lambda x, dim: x.no_such_method(dim)})
    course = Assignment(this_assignment.root, this_assignment.table)
    object.__setattr__(course, "cases", [replace(case, mistakes=(needs_autograd, broken))])
    report = check_cases(course)
    assert report.named.get("softmax: doubled") == ["softmax-last_dim"], report.text()
    assert report.problems == [
        "the known mistake softmax: broken cannot run where a failure's diagnosis runs it, so it is never named: "
        "on case softmax-last_dim it raised AttributeError: 'Tensor' object has no attribute 'no_such_method'"
    ]


THICK = """
from cs_basics.nn import functional


def run_softmax(x, dim):
    y = functional.softmax(x, dim)
    return y


def run_scaled_dot_product_attention(Q, K, V, mask=None):
    return functional.scaled_dot_product_attention(Q, K, V, mask)
"""


def test_check_cases_applies_the_one_line_check_to_the_courses_own_adapters(this_assignment, tmp_path):
    """As the grader does (its adapters are the course's): a course whose adapter pytest would refuse hears it here."""
    import importlib.util

    (tmp_path / "thick_adapters.py").write_text(THICK)
    spec = importlib.util.spec_from_file_location("thick_adapters", tmp_path / "thick_adapters.py")
    thick = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(thick)
    case = next(c for c in this_assignment.cases if c.id == "softmax-last_dim")

    class Course(Assignment):
        def adapters(self):
            return thick

    course = Course(this_assignment.root, this_assignment.table)
    object.__setattr__(course, "cases", [replace_mistakes(case)])
    problems = check_cases(course).problems
    assert len(problems) == 1 and problems[0].startswith(
        "the course's own thick_adapters.py: run_softmax holds more than the one line that calls your function"
    ), problems


def replace_mistakes(case):
    from dataclasses import replace

    return replace(case, mistakes=())


SHIPPED = """
import torch
from cs_basics.harness import InPlace, Mistake, Optimizer, Problem, Tolerance, randn

EXACT = Tolerance(0, 0)
clip_norm = torch.nn.utils.clip_grad_norm_

CLIP = Problem(
    "clip",
    points=1,
    calls={"run_clip(parameters, max_norm)": torch.nn.utils.clip_grad_norm_},
    kind=InPlace(),
    tolerances=EXACT,
    forbidden=["torch.nn.utils.clip_grad_norm_"],
    mistakes=(
        Mistake("each_alone", "one", {"run_clip": lambda ps, m: [torch.nn.utils.clip_grad_norm_([p], m) for p in ps]}),
        Mistake("aliased", "one norm", {"run_clip": lambda ps, m: [clip_norm([p], m / 2) for p in ps]}),
    ),
)
ADAMW = Problem(
    "adamw",
    points=1,
    calls={"get_adamw_cls()": lambda: torch.optim.AdamW},
    kind=Optimizer(steps=1),
    tolerances=EXACT,
    forbidden=["torch.optim.AdamW", "torch.optim.Adam"],
    mistakes=(Mistake("adam", "decoupled decay", {"get_adamw_cls": lambda: torch.optim.Adam}),),
)
DOUBLE = Problem("double", points=1, calls={"run_double(x)": lambda x: x * 2}, tolerances=EXACT)
TWICE = Problem("twice", points=1, calls={"run_twice(x)": lambda x: x * 2}, tolerances=EXACT)


def params(seed):
    return {"param0": randn(seed, 3), "param0.grad": randn(seed + 1, 3), "param0.grad/step1": randn(seed + 2, 3)}


CASES = [
    CLIP.case("test_clip", "a", 0, params, max_norm=0.1),
    ADAMW.case("test_adamw", "a", 0, lambda seed: {"param0": randn(seed, 3), "param0.grad/step1": randn(seed, 3)}),
    DOUBLE.case("test_double", "a", 0, lambda seed: {"x": randn(seed, 3)}),
    TWICE.case("test_twice", "a", 0, lambda seed: {"x": randn(seed, 3)}),
]
"""


def test_the_shipped_answer_check_lets_forbidden_calls_stay_and_reports_every_answer(tmp_path):
    """One question of each oracle and mistake in the handout: would the rule refuse it from a student? A library
    oracle the problem forbids (clip_grad_norm_ as given), a lambda that calls or returns one (torch.optim.Adam),
    even through an alias, may stay; two identical from-scratch oracles of two problems are two answers, each said."""
    course = tmp_path / "course"
    (course / "tests").mkdir(parents=True)
    (course / "tests" / "__init__.py").write_text("")
    (course / "tests" / "cases.py").write_text(SHIPPED)
    (course / "pyproject.toml").write_text('[tool.cs-basics]\ncases = "tests.cases"\n')
    found, done = shipped_in(course)
    assert [line.partition(" (")[0] for line in found] == ["double: the reference", "twice: the reference"], (
        done.stdout + done.stderr[-3000:]
    )
    assert all("cases.py:" in line and "a student could copy it" in line for line in found), found
