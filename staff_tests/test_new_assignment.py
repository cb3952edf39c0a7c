"""`cs-basics new NAME`: a next assignment's skeleton that passes its own tests, and fails them when its student
function is wrong (the known mistake named)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cs_basics.harness.course import new
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
    pyproject = tomllib.loads((skeleton / "pyproject.toml").read_text())
    harness = os.path.relpath(HARNESS_ROOT, skeleton)  # this checkout, where the skeleton is: no absolute path
    assert pyproject["tool"]["uv"]["sources"]["cs-basics"] == {"path": harness, "editable": True}
    assert pyproject["tool"]["cs-basics"]["handout_sources"] == {
        "cs-basics": {"path": "../cs_basics", "editable": True}
    }
    assert "../cs_basics" in (skeleton / pyproject["tool"]["cs-basics"]["handout_readme"]).read_text()
    # what `cs-basics handout` (its ruff check) and a CI need, and the grades kept out of git
    assert pyproject["dependency-groups"]["dev"] == ["ruff>=0.8"] and pyproject["tool"]["ruff"]["lint"]["select"]
    assert {"results.json", "junit.xml", "/results/", ".venv/"} <= set((skeleton / ".gitignore").read_text().split())
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


@pytest.mark.parametrize(
    ("installed", "source"),
    [
        ({"url": "https://github.com/c/cs_basics", "vcs_info": {"vcs": "git", "commit_id": "abc1"}},
         '{ git = "https://github.com/c/cs_basics", rev = "abc1" }'),
        ({"url": "file:///opt/harness", "dir_info": {"editable": True}},
         '{ path = "../../opt/harness", editable = true }'),
        ({"url": "file:///opt/cs_basics-0.1.0-py3-none-any.whl", "archive_info": {}},
         '{ path = "../../opt/cs_basics-0.1.0-py3-none-any.whl" }'),
        (None, None),
    ],
    ids=["git", "folder", "wheel", "index"],
)  # fmt: skip
def test_new_from_an_installed_cs_basics_names_the_harness_where_it_came_from(monkeypatch, installed, source):
    """Not a checkout (site-packages): PEP 610's record of the install gives the source; an index's gives none."""
    monkeypatch.setattr(new, "HARNESS_ROOT", Path("/nowhere/site-packages"))
    monkeypatch.setattr(new, "installed_from", lambda: installed)
    assert new.harness_source(Path("/courses/next")) == source
    pyproject = tomllib.loads(new.files("next", "next", source)["pyproject.toml"])
    assert ("handout_sources" in pyproject["tool"]["cs-basics"]) == (source is not None and "path" in source)
    assert ("sources" in pyproject["tool"]["uv"]) == (source is not None)


@pytest.mark.slow
@pytest.mark.timeout(900)  # an environment installed, a course locked and tested: minutes under load
def test_new_runs_from_an_installed_cs_basics_and_its_course_runs_under_uv(tmp_path):
    """As a new staff member runs it with cs-basics installed (not this checkout: nothing is written there):
    `cs-basics new`, then `uv run pytest` and `uv run ruff check` in its own environment, and a handout with the
    students' previous assignment where its README says."""
    uv_bin = shutil.which("uv")
    assert uv_bin, "uv is not on PATH"
    env = {k: v for k, v in os.environ.items() if k not in ("CS_BASICS_DEVICE", "PYTEST_ADDOPTS", "VIRTUAL_ENV")}
    env |= {"UV_PYTHON_DOWNLOADS": "never", "UV_PYTHON": sys._base_executable}

    def call(*args, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
        return subprocess.run([*args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

    venv, requirements = tmp_path / "venv", tmp_path / "requirements.txt"
    install = [uv_bin, "pip", "install", "-q", "--python", str(venv / "bin" / "python")]
    steps = [
        ([uv_bin, "venv", "-q", str(venv)], tmp_path),
        ([uv_bin, "export", "-q", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes", "-o", str(requirements)],
         HARNESS_ROOT),  # the locked versions, from uv's cache
        ([*install, "-r", str(requirements)], tmp_path),
        ([*install, "--no-deps", str(HARNESS_ROOT)], tmp_path),  # not editable: cs_basics in site-packages
    ]  # fmt: skip
    for command, cwd in steps:
        done = call(*command, cwd=cwd)
        assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    where = call(str(venv / "bin" / "python"), "-c", "import cs_basics; print(cs_basics.__file__)", cwd=tmp_path)
    assert "site-packages" in where.stdout, where.stdout + where.stderr
    made = call(str(venv / "bin" / "cs-basics"), "new", "fresh", cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    fresh = tmp_path / "fresh"
    sources = tomllib.loads((fresh / "pyproject.toml").read_text())["tool"]["uv"]["sources"]
    assert sources["cs-basics"] == {"path": os.path.relpath(HARNESS_ROOT, fresh)}  # where it was installed from
    tested = call(uv_bin, "run", "pytest", "-q", cwd=fresh)
    assert tested.returncode == 0 and "5 passed" in tested.stdout, tested.stdout[-3000:] + tested.stderr[-3000:]
    linted = call(uv_bin, "run", "ruff", "check", ".", cwd=fresh)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    cut = call(uv_bin, "run", "cs-basics", "handout", str(tmp_path / "handout"), "--no-check", cwd=fresh)
    assert cut.returncode == 0, cut.stdout + cut.stderr
    handout = tomllib.loads((tmp_path / "handout" / "pyproject.toml").read_text())
    assert handout["tool"]["uv"]["sources"]["cs-basics"] == {"path": "../cs_basics", "editable": True}
    assert 'directory = "../cs_basics"' in (tmp_path / "handout" / "uv.lock").read_text()
    texts = [p.read_text() for p in (tmp_path / "handout").rglob("*") if p.is_file() and p.suffix != ".safetensors"]
    assert texts and not [t for t in texts if str(HARNESS_ROOT) in t]
