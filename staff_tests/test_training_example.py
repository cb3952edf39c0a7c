"""The third worked assignment (examples/training_utilities: cross-entropy, gradient clipping, the cosine schedule,
AdamW, the batch sampler), one problem of each kind, run end to end.

It runs in this package's environment, on a copy of the example laid out as in a clone (this package's `cs_basics`
at `../..`, where the example's path dependency points, so that its PrairieLearn grader carries that copy), in a
folder others may enter (as root the grader's child runs under a uid of its own): its graded tests pass, it grades
full marks, a student's copy with one mistake in each problem is named mistake by mistake alike by pytest and by
the grader behind its PrairieLearn question, in the environment its Dockerfile makes from its build context alone
(a hidden case past its problem's own time limit said so there; no case imported torch._dynamo, which an
optimizer's first step imports: the grading server had), and its handout holds no answer, nothing hidden and no
staff path, installs with `uv run --locked` beside a student's copy of this course's handout, fails on its stubs
and passes with the solution written in (those that run uv are marked `slow`). (`check-cases` on it:
staff_tests/test_check_cases.py; its Gradescope zip installed and graded in a temporary /autograder:
staff_tests/test_handout_and_bundle.py.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .downstream import (
    IGNORE,
    ROOT,
    beside_the_previous_assignment,
    naming_the_staffs_folders,
    prairielearn_image_python,
    solution_passes,
    staff_only_lines,
    stubs_fail,
    students_folder,
)

EXAMPLE = ROOT / "examples" / "training_utilities"
WRITTEN = [Path("cs_basics_training") / name for name in ("data.py", "nn_utils.py", "optimizer.py")]  # by students
GRADED = 15  # 10 public cases and 5 hidden

pytestmark = pytest.mark.xdist_group("training_example")  # one copy for the module, its tests one after another

# one mistake a problem, as a student writes it: (file, the reference's line, the student's) -> the mistake named
MISTAKES = {
    "cross_entropy": (
        "nn_utils.py",
        "(log_normalizer - picked).mean()",
        "(log_normalizer - picked).sum()",
        "sum_not_mean",
    ),
    "gradient_clipping": ("nn_utils.py", "if norm > max_l2_norm:", "if True:", "always_scaled"),
    "lr_cosine_schedule": (
        "optimizer.py",
        "return it / warmup_iters * max_learning_rate",
        "return (it + 1) / warmup_iters * max_learning_rate",
        "warmup_from_one",
    ),
    "adamw": (
        "optimizer.py",
        "step_size = lr * math.sqrt(1 - beta2**t) / (1 - beta1**t)",
        "step_size = lr",
        "no_bias_correction",
    ),
    "get_batch": (
        "data.py",
        "len(dataset) - context_length, size=batch_size",
        "len(dataset) - context_length - 1, size=batch_size",
        "last_start_never_drawn",
    ),
}
# ...and the schedule takes 5 s at iteration 40, which only its hidden case reaches: past the 2 s its problem declares
SLOW = (
    "    if it < warmup_iters:\n",
    "    if it == 40:\n        import time\n\n        time.sleep(5)\n    if it < warmup_iters:\n",
)
# ...and AdamW raises if building it would import torch._dynamo (20 s) in the case: the grader must have imported it
NO_IMPORT_IN_THE_CASE = (
    "        super().__init__(params,",
    "        if '_dynamo' not in dir(torch):  # not yet imported (the rule holds a look at sys.modules)\n"
    "            raise RuntimeError('the case itself imports torch._dynamo')\n        super().__init__(params,",
)


def run(*args: str, cwd: Path, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("CS_BASICS_DEVICE", "PYTEST_ADDOPTS")}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=base | (env or {}), capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def example() -> Iterator[Path]:
    """The example at examples/training_utilities of a copy of this package."""
    top = Path(tempfile.mkdtemp(prefix="cs-basics-training-"))
    top.chmod(0o755)
    shutil.copytree(ROOT / "cs_basics", top / "cs_basics", ignore=IGNORE)
    for name in ("pyproject.toml", "README.md", "uv.lock", "docs/student/README.md"):  # the handout's README too
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, top / name)
    copy = top / "examples" / "training_utilities"
    shutil.copytree(EXAMPLE, copy, ignore=IGNORE)
    yield copy
    shutil.rmtree(top, ignore_errors=True)


def outcomes(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"::(\w+\[[^\]]+\]) (PASSED|FAILED|ERROR)", stdout))


def named_in_pytest(stdout: str) -> dict[str, set[str]]:
    """test[param] -> the known mistakes its failure names, from pytest's report (one section a failing test).
    The report ends at the next `=== ... ===` heading: on CI (`CI` set) pytest's short summary below it prints every
    failure's message untrimmed, which the last section would otherwise take as its own."""
    report = re.split(r"\n=+ [^\n]* =+\n", stdout.partition("= FAILURES =")[2])[0]
    sections = re.split(r"\n_{3,} (\w+\[[^\]]+\]) _{3,}\n", report)
    return {
        name: set(re.findall(r"\(known mistake: (\w+)\)", body))
        for name, body in zip(sections[1::2], sections[2::2], strict=True)
    }


def test_the_example_passes_its_tests(example):
    result = run("-m", "pytest", "-v", "-p", "no:randomly", "-n", "0", cwd=example)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    got = outcomes(result.stdout)
    assert len(got) == GRADED and set(got.values()) == {"PASSED"}, got
    assert "test_fixtures_match_the_cases PASSED" in result.stdout


def test_the_example_grades_full_marks(example, tmp_path):
    results = tmp_path / "results.json"
    graded = run("-m", "cs_basics.cli", "grade", "--results", str(results), cwd=example)
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
    data = json.loads(results.read_text())
    assert data["score"] == pytest.approx(6) and len(data["tests"]) == GRADED, data["tests"]


@pytest.fixture(scope="module")
def prairielearn(example) -> tuple[Path, Path]:
    """A course copy whose schedule declares 2 s a case, and its PrairieLearn files: (the course, the files)."""
    course = example.parent / "with_a_time_limit"
    shutil.copytree(example, course, ignore=IGNORE)
    pyproject = course / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n[tool.cs-basics.problems.lr_cosine_schedule]\ncase_seconds = 2\n")
    built = example.parent / "pl"
    made = run("-m", "cs_basics.cli", "autograder", "--platform", "prairielearn", str(built), cwd=course)
    assert made.returncode == 0, made.stdout + made.stderr
    return course, built


@pytest.fixture(scope="module")
def image_python(prairielearn) -> Path:
    """The Python of the grading image the question's Dockerfile builds, made from its build context alone."""
    return prairielearn_image_python(prairielearn[1], prairielearn[1].parent / "image")


@pytest.mark.slow  # uv makes the grading image's environment
def test_the_prairielearn_image_installs_from_its_build_context_and_holds_no_course_file(prairielearn, image_python):
    """The Dockerfile's `uv sync --frozen` succeeds on the pyproject.toml and uv.lock it copies (their path
    dependency, the harness, carried in serverFilesCourse, not installed), and the image then holds the graded
    code's libraries but none of the course's code: the grader and the student's files come from
    serverFilesCourse at grading time."""
    _, built = prairielearn
    assert "--no-install-local" in (built / "Dockerfile").read_text()
    probe = "import importlib.util as u; print([m for m in {} if u.find_spec(m)])"
    wanted = ["torch", "numpy", "jaxtyping", "safetensors", "cs_basics", "cs_basics_training", "tests"]
    found = subprocess.run(
        [str(image_python), "-I", "-c", probe.format(wanted)], cwd="/", capture_output=True, text=True, timeout=120
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == str(["torch", "numpy", "jaxtyping", "safetensors"]), found.stdout


@pytest.mark.slow  # uv makes the grading image's environment
@pytest.mark.timeout(900)  # pytest in a student's copy, then a grading behind the question
def test_each_mistake_is_named_alike_by_pytest_and_behind_the_prairielearn_question(
    prairielearn, image_python, tmp_path
):
    """A course copy whose schedule declares 2 s a case; its PrairieLearn question built; a student's copy with one
    mistake in each problem: pytest names each in every public case it fails, and so does the grader behind the
    question, in the grading image's environment, for the uploaded files; the hidden schedule case, past 2 s, says
    it ran over its time limit."""
    course, built = prairielearn
    question = next((built / "questions").iterdir())
    html = (question / "question.html").read_text()
    assert '<pl-file-upload file-names="data.py, nn_utils.py, optimizer.py">' in html, html
    info = json.loads((question / "info.json").read_text())
    assert info["gradingMethod"] == "External" and info["externalGradingOptions"]["enableNetworking"] is False

    student = tmp_path / "student"
    shutil.copytree(course, student, ignore=IGNORE)
    package = student / "cs_basics_training"
    for file, old, new, _ in MISTAKES.values():
        text = (package / file).read_text()
        assert old in text, old
        (package / file).write_text(text.replace(old, new))
    optimizer = package / "optimizer.py"
    for old, new in (SLOW, NO_IMPORT_IN_THE_CASE):
        assert old in optimizer.read_text(), old
        optimizer.write_text(optimizer.read_text().replace(old, new))
    tested = run("-m", "pytest", "-v", "-p", "no:randomly", "-n", "0", "tests", cwd=student)
    got = outcomes(tested.stdout)
    passed = {name for name, outcome in got.items() if outcome == "PASSED"}  # over the max, clipping always is right
    assert len(got) == 10 and passed == {"test_gradient_clipping[over_the_max]"}, tested.stdout[-4000:]
    in_pytest = named_in_pytest(tested.stdout)
    assert set(in_pytest) == set(got) - passed, tested.stdout[-4000:]  # a section for each failure
    expected = {problem: mistake for problem, (*_, mistake) in MISTAKES.items()}
    for name, mistakes in in_pytest.items():
        problem = next(p for p in MISTAKES if name.startswith(f"test_{p}") or (p == "adamw" and "adamw" in name))
        assert mistakes == {expected[problem]}, (name, mistakes)

    grade = tmp_path / "grade"
    shutil.copytree(built / "serverFilesCourse", grade / "serverFilesCourse")
    shutil.copytree(question / "tests", grade / "tests")
    for folder in ("student", "data", "results"):
        (grade / folder).mkdir()
    (grade / "data" / "data.json").write_text(json.dumps({"submitted_answers": {}, "gradable": True}))
    for file in ("data.py", "nn_utils.py", "optimizer.py"):
        shutil.copy(package / file, grade / "student" / file)
    tmp_path.chmod(0o755)  # as root the grader's child runs under a uid of its own, which must reach the grader
    script = grade / info["externalGradingOptions"]["entrypoint"].removeprefix("/grade/")
    script.chmod(0o755)
    env = {"CS_BASICS_GRADE_ROOT": str(grade), "CS_BASICS_PYTHON": str(image_python)}
    done = subprocess.run(
        [str(script)],
        env={k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "CS_BASICS"))} | env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((grade / "results" / "results.json").read_text())
    tests = {t["name"]: t for t in data["tests"]}
    assert data["gradable"], data
    scored = {name for name, t in tests.items() if t["points"] > 0}  # the clipping cases over the max, as in pytest
    assert scored == {*passed, "test_hidden_clipping[hidden_many]"}, data
    in_grader = {name: set(re.findall(r"\(known mistake: (\w+)\)", t["message"])) for name, t in tests.items()}
    assert {name: in_grader[name] for name in in_pytest} == in_pytest  # the same mistake, case by case
    assert "the case itself imports torch._dynamo" not in json.dumps(data)  # the server had imported it
    assert tests["test_hidden_lr_cosine_schedule[hidden_long]"]["message"] == (
        "hidden case: failed: the case ran over its time limit of 2 s"
    )
    assert tests["test_hidden_adamw[hidden_resumed]"]["message"] == "hidden case: failed"  # nothing else of it


@pytest.fixture(scope="module")
def handout(example) -> Iterator[tuple[Path, Path]]:
    """The example's handout cut into a student's folder beside their copy of the previous assignment, away from
    the staff's clone: (the previous assignment, the handout)."""
    with students_folder() as away:
        built = run("-m", "cs_basics.cli", "handout", str(away / "training"), "--no-check", cwd=example)
        assert built.returncode == 0, built.stdout + built.stderr
        yield away / "cs_basics", away / "training"


def test_the_handout_computes_no_answer_and_holds_nothing_of_the_staffs(example, handout):
    """No hidden file or line of one, no line of the solution, no staff path: the previous assignment is where the
    handout's README tells the student to put it."""
    _, out = handout
    files = [p.relative_to(out) for p in out.rglob("*") if p.is_file() and ".venv" not in p.relative_to(out).parts]
    assert not [rel for rel in files if "hidden" in rel.parts] and (out / "tests" / "cases.py").is_file()
    shipped = "\n".join(p.read_text() for p in out.rglob("*.py") if ".venv" not in p.relative_to(out).parts)
    assert "class AdamW(torch.optim.Optimizer)" in shipped and "addcdiv_" not in shipped  # the stub, no answer
    assert "def lr_cosine_schedule" not in shipped and "np.random.randint" not in shipped  # the staff's oracles
    staff = staff_only_lines(EXAMPLE)
    answers = ("def lr_cosine_schedule(it, max_learning_rate, min_learning_rate, warmup_iters, cosine_cycle_iters, *,"
               " shift=0):", "p.addcdiv_(m, v.sqrt().add_(eps), value=-step_size)")  # fmt: skip
    assert set(answers) <= staff  # the check sees a hidden oracle's line and a solution's
    assert not [line for line in map(str.strip, shipped.splitlines()) if line in staff]
    beside_the_previous_assignment(out)
    assert naming_the_staffs_folders(out, example) == []


@pytest.mark.slow
@pytest.mark.timeout(900)  # the handout's environment made from its uv.lock, then its pytest
def test_the_handout_installs_away_from_the_staffs_clone_and_fails_on_its_stubs(handout):
    previous, out = handout
    failed = stubs_fail(out, previous)
    assert len(failed) == 10, failed  # the public cases: the hidden ones stayed with the staff


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_handout_passes_with_the_solution_written_in(handout):
    """The handout has all it needs (fixtures, adapters, the harness from the student's copy) to pass."""
    _, out = handout
    assert len(solution_passes(out, EXAMPLE, WRITTEN)) == 10
