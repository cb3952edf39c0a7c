"""A next assignment as its students and its platforms have it, for the worked examples' tests: its handout beside
the student's copy of this course (its own handout, completed), installed by `uv run --locked` from the handout's
own uv.lock, with no staff clone anywhere; and the environment of its PrairieLearn grading image."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

from cs_basics.harness.course.handout import code_lines, cut

ROOT = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "*.pyc")
HARNESS_FROM = "import cs_basics.harness; print(cs_basics.harness.__file__)"


def uv(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    """`uv run --locked ...` in `cwd`: the machine's Python (never a downloaded one), the folder's own venv."""
    uv_bin = shutil.which("uv")
    assert uv_bin, "uv is not on PATH (the README's one prerequisite)"
    drop = ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "CS_BASICS_DEVICE", "PYTEST_ADDOPTS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env |= {"UV_PYTHON_DOWNLOADS": "never", "UV_PYTHON": sys._base_executable}
    return subprocess.run(
        [uv_bin, "run", "--locked", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def outcomes(stdout: str) -> dict[tuple[str, str], str]:
    """(test, param) -> PASSED/FAILED/... from `pytest -v` lines `tests/x.py::test[param] PASSED`."""
    found = re.findall(r"::(\w+)\[([^\]]+)\] (PASSED|FAILED|ERROR|SKIPPED)", stdout)
    return {(test, param): outcome for test, param, outcome in found}


@contextlib.contextmanager
def students_folder() -> Iterator[Path]:
    """A student's folder, away from the staff's clone: this course's handout in `cs_basics/` (where the examples'
    handouts say the previous assignment goes), completed with the reference attention."""
    away = Path(tempfile.mkdtemp(prefix="cs-basics-student-"))
    try:
        previous = away / "cs_basics"
        cut = subprocess.run(
            [sys.executable, "-m", "cs_basics.cli", "handout", str(previous), "--no-check"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert cut.returncode == 0, cut.stdout + cut.stderr
        shutil.copy(ROOT / "cs_basics" / "nn" / "functional.py", previous / "cs_basics" / "nn" / "functional.py")
        yield away
    finally:
        shutil.rmtree(away, ignore_errors=True)


def naming_the_staffs_folders(handout: Path, *staff: Path) -> list[str]:
    """The handout's text files that name a staff folder, or the staff's `../..` to this course."""
    named = [str(folder) for folder in (ROOT, *staff)] + ["../.."]
    return [
        str(p.relative_to(handout))
        for p in sorted(handout.rglob("*"))
        if p.is_file() and p.suffix != ".safetensors" and ".venv" not in p.relative_to(handout).parts
        if any(name in p.read_text(errors="replace") for name in named)
    ]


def beside_the_previous_assignment(handout: Path) -> None:
    """The handout depends on the previous assignment where a student keeps it, `../cs_basics`, in its
    pyproject.toml and its uv.lock, and its README says so."""
    pyproject = tomllib.loads((handout / "pyproject.toml").read_text())
    assert pyproject["tool"]["uv"]["sources"]["cs-basics"] == {"path": "../cs_basics", "editable": True}
    assert 'source = { editable = "../cs_basics" }' in (handout / "uv.lock").read_text()
    assert "../cs_basics" in (handout / "README.md").read_text()


def staff_only_lines(course: Path, hidden: str = "hidden") -> set[str]:
    """The code lines of the course's hidden folder and of its `# BEGIN SOLUTION` regions that none of its other
    files holds (`import torch` or `return loss` may well be in the handout)."""
    staff, public = set(), set()
    for path in sorted(course.rglob("*.py")):
        rel = path.relative_to(course)
        if ".venv" in rel.parts:
            continue
        text = path.read_text()
        kept, removed = cut(text, str(rel))
        (staff if rel.parts[0] == hidden else public).update(code_lines(kept))
        staff.update(code_lines("".join(removed)))
    return staff - public


def stubs_fail(handout: Path, previous: Path) -> dict[tuple[str, str], str]:
    """`uv run --locked pytest` in the handout (its first run installs it): every graded test fails on the stubs
    with NotImplementedError, the fixture check passes, and the harness is the one in the student's `previous`."""
    run = uv("pytest", "-v", "-p", "no:cacheprovider", "-p", "no:randomly", cwd=handout)
    assert run.returncode == 1, run.stdout[-4000:] + run.stderr[-2000:]
    got = outcomes(run.stdout)
    assert got and set(got.values()) == {"FAILED"}, got
    assert run.stdout.count("NotImplementedError") >= len(got), run.stdout[-4000:]
    assert "test_fixtures_match_the_cases PASSED" in run.stdout, run.stdout[-4000:]
    where = uv("python", "-c", HARNESS_FROM, cwd=handout)
    assert Path(where.stdout.strip()).is_relative_to(previous), where.stdout + where.stderr
    return got


def solution_passes(handout: Path, solution: Path, files: list[Path]) -> dict[tuple[str, str], str]:
    """The handout's pytest with the staff's `files` (relative paths in `solution`) written in: every test passes.
    The stubs are put back after."""
    stubs = {rel: (handout / rel).read_bytes() for rel in files}
    try:
        for rel in files:
            shutil.copy(solution / rel, handout / rel)
        run = uv("pytest", "-v", "-p", "no:cacheprovider", "-p", "no:randomly", cwd=handout)
    finally:
        for rel, data in stubs.items():
            (handout / rel).write_bytes(data)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    got = outcomes(run.stdout)
    assert got and set(got.values()) == {"PASSED"}, got
    return got


def prairielearn_image_python(built: Path, into: Path) -> Path:
    """The Python of the grading image `cs-basics autograder --platform prairielearn` wrote the Dockerfile of (at
    `built`), made as that Dockerfile makes it, without an engine: its COPY lines' files from the build context
    alone into an empty folder, its ENV, its `uv sync` run there. The machine's Python stands for Debian's and uv's
    cache is linked, not copied; `--compile-bytecode` is left out (it only writes .pyc files, a minute of torch's
    on two cores); `apt-get` (bubblewrap) and the image's own uv are the platform lab's to build."""
    dockerfile = (built / "Dockerfile").read_text().replace("\\\n", " ")
    workdir, env, syncs = into / "workdir", {}, []
    workdir.mkdir(parents=True)
    for line in dockerfile.splitlines():
        instruction, _, argument = line.partition(" ")
        if instruction == "ENV":
            env |= dict(pair.split("=", 1) for pair in argument.split())
        elif instruction == "COPY":
            *sources, destination = argument.split()
            assert destination == "./", line  # into WORKDIR
            for source in sources:
                shutil.copy(built / source, workdir / source)  # the build context holds it, or this raises
        elif instruction == "RUN":
            syncs += [command.strip() for command in argument.split("&&") if command.strip().startswith("uv sync")]
    assert len(syncs) == 1, syncs
    env |= {"UV_PROJECT_ENVIRONMENT": str(into / "venv"), "UV_LINK_MODE": "hardlink", "UV_PYTHON": sys._base_executable}
    assert env.get("UV_PYTHON_DOWNLOADS") == "never", env
    command = [word for word in shlex.split(syncs[0]) if word != "--compile-bytecode"]
    drop = ("VIRTUAL_ENV", "UV_PROJECT", "CS_BASICS")
    base = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    done = subprocess.run(command, cwd=workdir, env=base | env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return into / "venv" / "bin" / "python"
