"""`cs-basics new NAME`: a next assignment's skeleton that passes its own tests, and fails them when its student
function is wrong (the known mistake named)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cs_basics.harness.course.new import HARNESS_ROOT, NewError, create


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CS_BASICS_DEVICE", "PYTEST_ADDOPTS", "VIRTUAL_ENV")}
    return subprocess.run([*args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def skeleton(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("courses") / "next-assignment"
    create(out)
    return out


def test_the_skeleton_passes_its_own_tests_and_checks_its_cases(skeleton):
    pyproject = (skeleton / "pyproject.toml").read_text()
    assert f'cs-basics = {{ path = "{HARNESS_ROOT}", editable = true }}' in pyproject
    assert (skeleton / "next_assignment" / "functions.py").is_file()
    assert (skeleton / "fixtures" / "MANIFEST.json").is_file() and (skeleton / "hidden" / "fixtures").is_dir()
    tested = run(sys.executable, "-m", "pytest", "-v", "-p", "no:randomly", cwd=skeleton)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-2000:]
    assert tested.stdout.count("PASSED") == 5 and "test_hidden_relu[hidden_grad] PASSED" in tested.stdout
    checked = run(sys.executable, "-m", "cs_basics.cli", "check-cases", cwd=skeleton)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_wrong_function_in_the_skeleton_fails_and_is_named(skeleton, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(skeleton, copy)
    functions = copy / "next_assignment" / "functions.py"
    functions.write_text(functions.read_text().replace("return x.clamp(min=0)", "return x.abs()"))
    tested = run(sys.executable, "-m", "pytest", "-p", "no:randomly", "-m", "points", cwd=copy)
    assert tested.returncode == 1 and "4 failed" in tested.stdout, tested.stdout[-3000:]
    assert "(known mistake: absolute_value)" in tested.stdout


def test_new_refuses_a_folder_that_exists_or_a_name_that_is_no_package(tmp_path):
    with pytest.raises(NewError, match="already exists"):
        create(tmp_path)
    with pytest.raises(NewError, match="package name"):
        create(tmp_path / "tests")


@pytest.mark.slow
def test_the_skeleton_passes_under_uv_in_a_fresh_folder(tmp_path):
    """As a new staff member runs it: `cs-basics new`, then `uv run pytest` (its own environment, cs-basics by path)."""
    uv_bin = shutil.which("uv")
    assert uv_bin, "uv is not on PATH"
    made = run(sys.executable, "-m", "cs_basics.cli", "new", "fresh", cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    env_python = {"UV_PYTHON_DOWNLOADS": "never", "UV_PYTHON": sys._base_executable}
    os.environ.update(env_python)  # read by run(); monkeypatching os.environ for one call is all it needs
    try:
        tested = run(uv_bin, "run", "pytest", "-q", cwd=tmp_path / "fresh")
    finally:
        for name in env_python:
            os.environ.pop(name, None)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert "5 passed" in tested.stdout
