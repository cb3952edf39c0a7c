"""The second worked assignment (examples/transformer_blocks: RMSNorm, SiLU and SwiGLU, RoPE), run end to end.

It runs in this package's environment (its only dependency is cs-basics, by path), on a copy of the example in a
folder others may enter (as root the grader's child runs under a uid of its own): its graded tests pass, it
grades full marks, a thick second adapter fails in pytest and in
the grader alike, and its handout holds no answer yet names a RoPE mistake from the outputs stored beside the
expected ones. (The installed bundle in a temporary /autograder is the bundle's test.)
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

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "transformer_blocks"
IGNORE = shutil.ignore_patterns(".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "*.pyc")
GRADED = 15  # 11 public cases and 4 hidden

pytestmark = pytest.mark.xdist_group("blocks_example")  # one copy for the module, its tests one after another


def run(*args: str, cwd: Path, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CS_BASICS_DEVICE", "PYTEST_ADDOPTS")}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def example() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(prefix="cs-basics-blocks-"))
    top.chmod(0o755)
    copy = top / "transformer_blocks"
    shutil.copytree(EXAMPLE, copy, ignore=IGNORE)
    yield copy
    shutil.rmtree(top, ignore_errors=True)


def outcomes(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"::(\w+\[[^\]]+\]) (PASSED|FAILED|ERROR)", stdout))


def test_the_example_passes_its_tests(example):
    result = run("-m", "pytest", "-v", "-p", "no:randomly", "-n", "0", cwd=example)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    got = outcomes(result.stdout)
    assert len(got) == GRADED and set(got.values()) == {"PASSED"}, got
    assert "test_fixtures_match_the_cases PASSED" in result.stdout  # (check-cases: staff_tests/test_check_cases.py)


def test_the_example_grades_full_marks_with_points_declared_beside_its_problems(example, tmp_path):
    results = tmp_path / "results.json"
    graded = run("-m", "cs_basics.cli", "grade", "--results", str(results), cwd=example)
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
    assert json.loads(results.read_text())["score"] == pytest.approx(5)


def test_a_thick_second_adapter_fails_in_pytest_and_in_the_grader(example, tmp_path):
    """A student's copy with SiLU written inside run_silu (the problem's second adapter) and the student's silu
    left unwritten: its own pytest run fails the SiLU cases, and so does the grader (the course's adapters)."""
    student = tmp_path / "student"
    shutil.copytree(example, student, ignore=IGNORE)
    student.chmod(0o755)
    adapters, layers = student / "tests" / "adapters.py", student / "cs_basics_blocks" / "layers.py"
    thick = "    return layers.silu(in_features)"
    assert thick in adapters.read_text() and "return x * torch.sigmoid(x)" in layers.read_text()
    written_here = "    y = in_features * in_features.sigmoid()\n    return y"
    adapters.write_text(adapters.read_text().replace(thick, written_here))
    layers.write_text(layers.read_text().replace("return x * torch.sigmoid(x)", "raise NotImplementedError"))
    tested = run("-m", "pytest", "-v", "-p", "no:randomly", "-n", "0", "-k", "silu or swiglu", cwd=student)
    got = outcomes(tested.stdout)
    assert len(got) == 6 and set(got.values()) == {"FAILED"}, got  # SiLU's and SwiGLU's cases, hidden ones too
    assert "run_silu holds more than the one line that calls your function" in tested.stdout
    results = tmp_path / "results.json"
    graded = run("-m", "cs_basics.cli", "grade", "--submission", str(student), "--results", str(results), cwd=example)
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
    tests = {t["name"]: t for t in json.loads(results.read_text())["tests"]}
    lost = {name.removesuffix(" (hidden)") for name, t in tests.items() if t["score"] == 0}
    assert lost == set(got), tests  # the same cases, the problem's every one, and no other
    assert sum(t["score"] for t in tests.values()) == pytest.approx(3)  # RMSNorm's 1 and RoPE's 2 stand


def test_the_handout_computes_no_answer_and_still_names_a_rope_mistake(example, tmp_path):
    out = tmp_path / "handout"
    built = run("-m", "cs_basics.cli", "handout", str(out), "--no-check", cwd=example)
    assert built.returncode == 0, built.stdout + built.stderr
    assert not (out / "hidden").exists()
    shipped = "\n".join(p.read_text() for p in out.rglob("*.py"))
    assert "def rope(" in shipped and "theta ** (-frequency" not in shipped  # the student's stub, no staff oracle
    layers = out / "cs_basics_blocks" / "layers.py"
    halves = (
        "    import torch\n\n"
        "    first, second = x.chunk(2, dim=-1)\n"
        "    d_k = x.shape[-1]\n"
        "    angles = positions[..., None].float() * theta ** (-torch.arange(0, d_k, 2).float() / d_k)\n"
        "    cos, sin = angles.cos(), angles.sin()\n"
        "    return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)\n"
    )
    text = layers.read_text()
    stub = text.rindex("    raise NotImplementedError")
    layers.write_text(text[:stub] + halves + text[stub + len("    raise NotImplementedError\n") :])
    tested = run("-m", "pytest", "-p", "no:randomly", "-n", "0", "-k", "test_rope or test_fixtures", cwd=out)
    assert tested.returncode == 1, tested.stdout[-3000:] + tested.stderr[-2000:]
    assert "3 failed, 1 passed" in tested.stdout, tested.stdout[-3000:]
    assert set(re.findall(r"\(known mistake: (\w+)\)", tested.stdout)) == {"halves_rotated"}, tested.stdout[-3000:]
