"""The worked next assignment (examples/multihead_attention) run as a course would run it.

The example is copied, with this package beside it as in a fresh clone, to a temporary folder,
where `uv run` makes its own environment from its own uv.lock (one environment for the whole
module: the package is installed editable, so a broken attention swapped into the copy needs no
second one). Deselect with `-m "not slow"`.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from .downstream import (
    IGNORE,
    ROOT,
    beside_the_previous_assignment,
    naming_the_staffs_folders,
    outcomes,
    solution_passes,
    stubs_fail,
    students_folder,
    uv,
)

EXAMPLE = ROOT / "examples" / "multihead_attention"
# the example's declaration, read in its own environment (its `tests` package is not this one's)
DECLARATION = """
import json
from cs_basics.harness.config import Assignment
a = Assignment.find()
print(json.dumps({"cases": [[c.test, c.param] for c in a.cases], "points": a.points}))
"""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def example() -> Iterator[Path]:
    """A copy of the example with this package at `../..`, where its path dependency points.
    In a folder others may enter: as root the grader's child runs under a uid of its own,
    which must reach the copy's Python environment (pytest's tmp_path is private to root)."""
    top = Path(tempfile.mkdtemp(prefix="cs-basics-example-"))
    top.chmod(0o755)
    shutil.copytree(ROOT / "cs_basics", top / "cs_basics", ignore=IGNORE)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, top / name)
    copy = top / "examples" / "multihead_attention"
    shutil.copytree(EXAMPLE, copy, ignore=IGNORE)
    yield copy
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def declaration(example) -> dict:
    result = uv("python", "-c", DECLARATION, cwd=example)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}


def test_nothing_of_the_harness_is_copied_into_the_example():
    """The example enables the plugin in one line and defines none of the harness's functions or hooks."""
    assert (EXAMPLE / "tests" / "conftest.py").read_text().strip() == (
        'pytest_plugins = ["cs_basics.harness.pytest_plugin"]'
    )
    harness = set().union(*(top_level_names(p) for p in (ROOT / "cs_basics" / "harness").rglob("*.py")))
    sources = [p for p in EXAMPLE.rglob("*.py") if ".venv" not in p.relative_to(EXAMPLE).parts]
    assert len(sources) >= 5 and "graded" in harness and "FixtureStore" in harness
    for path in sources:
        copied = top_level_names(path) & harness
        assert not copied, f"{path.relative_to(ROOT)} defines the harness's {sorted(copied)}"
    pyproject = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())
    assert pyproject["tool"]["uv"]["sources"]["cs-basics"] == {"path": "../..", "editable": True}


def test_example_passes_its_graded_tests(example, declaration):
    result = uv("pytest", "-v", cwd=example)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    graded = {tuple(c) for c in declaration["cases"]}
    assert graded, "the example declares no graded case"
    got = outcomes(result.stdout)
    assert set(got) == graded and set(got.values()) == {"PASSED"}, got
    assert "test_fixtures_match_the_cases PASSED" in result.stdout
    # the points the markers carry add up to the problems declared in the example's pyproject.toml
    problems = tomllib.loads((example / "pyproject.toml").read_text())["tool"]["cs-basics"]["problems"]
    assert sum(declaration["points"].values()) == pytest.approx(sum(p["points"] for p in problems.values()))


def test_a_broken_attention_in_the_student_package_fails_the_example(example, declaration):
    """No 1/sqrt(d_k) in cs_basics' attention: every case fails except those where it cannot show."""
    functional = example.parents[1] / "cs_basics" / "nn" / "functional.py"
    source = functional.read_text()
    broken = source.replace("/ math.sqrt(d_k)", "")
    assert broken != source, "the scale to break is no longer written `/ math.sqrt(d_k)`"
    functional.write_text(broken)
    try:
        result = uv("pytest", "-v", "-m", "points", cwd=example)
    finally:
        functional.write_text(source)
    assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-2000:]
    got = outcomes(result.stdout)
    assert set(got) == {tuple(c) for c in declaration["cases"]}
    failed = {param for (_, param), outcome in got.items() if outcome == "FAILED"}
    # with one dimension per head the scale is 1, and with one token the softmax is 1 whatever the scores
    assert failed == {param for _, param in got} - {"head_dim_1", "seq_len_1"}, got
    assert "multihead_self_attention-cs336_shape: out: " in result.stdout
    assert "rerun: uv run pytest -k 'test_multihead_self_attention and cs336_shape'" in result.stdout


@pytest.mark.parametrize(
    ("old", "new", "mistake"),
    [
        ("scaled_dot_product_attention(Q, K, V, causal)", "scaled_dot_product_attention(Q, K, V)", "no_causal_mask"),
        (".tril()", ".triu()", "causal_mask_flipped"),
        ("(heads d)", "(d heads)", "heads_interleaved"),
    ],
)
def test_the_example_names_its_own_known_mistakes(example, old, new, mistake):
    """The example declares its mistakes next to its cases; a student's version of each is named."""
    attention = example / "cs_basics_mha" / "attention.py"
    source = attention.read_text()
    assert old in source, f"the example's solution no longer says {old!r}"
    attention.write_text(source.replace(old, new))
    try:
        result = uv("pytest", "-m", "points", "-k", "cs336_shape", cwd=example)
    finally:
        attention.write_text(source)
    assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-2000:]
    assert set(re.findall(r"\(known mistake: (\w+)\)", result.stdout)) == {mistake}, result.stdout[-4000:]


def test_example_grades_full_marks(example, tmp_path):
    results = tmp_path / "results.json"
    run = uv("cs-basics", "grade", "--results", str(results), cwd=example)
    assert run.returncode == 0, run.stdout + run.stderr
    declared = tomllib.loads((example / "pyproject.toml").read_text())["tool"]["cs-basics"]["problems"]
    total = sum(p["points"] for p in declared.values())
    assert json.loads(results.read_text())["score"] == pytest.approx(total)


@pytest.mark.timeout(900)  # two environments made and two pytest runs: minutes on a loaded 2-core machine
def test_the_handout_installs_and_runs_away_from_the_staffs_clone(example):
    """A student's layout with no staff clone anywhere: the previous assignment's handout, completed, in
    `cs_basics/`, and this example's handout beside it. The handout names that folder (no absolute path, nothing
    of the staff's layout); `uv run --locked pytest` installs the harness from the student's own copy and fails
    every graded test on the stubs; with the solution written in, every test passes."""
    with students_folder() as away:
        previous, handout = away / "cs_basics", away / "mha"
        built = uv("cs-basics", "handout", str(handout), "--no-check", cwd=example)
        assert built.returncode == 0, built.stdout + built.stderr
        beside_the_previous_assignment(handout)
        assert naming_the_staffs_folders(handout, example) == []
        failed = stubs_fail(handout, previous)
        assert set(solution_passes(handout, EXAMPLE, [Path("cs_basics_mha") / "attention.py"])) == set(failed)
