"""The student handout and the Gradescope bundle, built and used as the staff would."""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from cs_basics.cli import main
from cs_basics.harness.config import Assignment
from cs_basics.harness.course import bundle, classroom, handout, prairielearn
from cs_basics.harness.course.handout import (
    STUDY_SOLUTIONS,
    HandoutError,
    build,
    check_readme,
    check_ruff,
    code_lines,
    cut,
    handout_pyproject,
    make_room,
    repository_files,
)
from cs_basics.harness.grading.pipeline.grade import student_files

from .submissions import ROOT, course_shipping_a_from_scratch_mistake, said, submission, wrap_attention

pytestmark = pytest.mark.slow


def test_cut_stubs_function_bodies_and_drops_top_level_helpers():
    source = (
        'import math\n\n\ndef f(x):\n    """Doc."""\n    # BEGIN SOLUTION\n    return math.sqrt(x)\n'
        "    # END SOLUTION\n\n\n# BEGIN SOLUTION\ndef _helper():\n    return 1\n\n\n# END SOLUTION\n"
    )
    text, removed = cut(source)
    assert text == 'def f(x):\n    """Doc."""\n    raise NotImplementedError\n'  # math: for the solution only
    assert removed == ["    return math.sqrt(x)\n", "def _helper():\n", "    return 1\n", "\n", "\n"]


def test_cut_drops_the_imports_only_the_solution_used():
    source = (
        '"""Doc."""\n\nfrom __future__ import annotations\n\nimport itertools\nimport math\n\nimport torch\n'
        "from jaxtyping import Bool, Float\nfrom torch import Tensor\n\n\n"
        "def f(x: Float[Tensor, ' n']) -> Tensor:\n    # BEGIN SOLUTION\n"
        "    return torch.tensor(math.pi) * x\n    # END SOLUTION\n"
    )
    assert cut(source)[0] == (
        '"""Doc."""\n\nfrom __future__ import annotations\n\nfrom jaxtyping import Float\nfrom torch import Tensor\n'
        "\n\ndef f(x: Float[Tensor, ' n']) -> Tensor:\n    raise NotImplementedError\n"
    )


@pytest.mark.parametrize(
    "source", ["# BEGIN SOLUTION\nx = 1\n", "x = 1\n# END SOLUTION\n", "# BEGIN SOLUTION\n# BEGIN SOLUTION\n"]
)
def test_cut_refuses_unbalanced_markers(source):
    with pytest.raises(HandoutError):
        cut(source, "functional.py")


def test_installs_that_serve_many_processes_compile_bytecode_once(assignment):
    """Where PYTHONDONTWRITEBYTECODE is set, an install that does not compile leaves every process compiling;
    the project's own setting would make every `uv run` (each student's pytest) check the bytecode again."""
    ours = (ROOT / "pyproject.toml").read_text()
    for text in (ours, handout_pyproject(ours, assignment)):
        assert "compile-bytecode" not in tomllib.loads(text)["tool"]["uv"]
    assert "uv sync --frozen --no-dev --compile-bytecode" in bundle.SETUP
    assert "UV_COMPILE_BYTECODE=1" in (ROOT / ".ci" / "run").read_text()
    for script in ("grade.sbatch", "merge.sbatch"):
        text = (ROOT / "docs" / "cluster" / script).read_text()
        assert "sync --frozen --compile-bytecode" in text and "run --frozen --no-sync" in text, script


def test_handout_command_builds_and_checks_the_starter_repository(tmp_path):
    out = tmp_path / "handout"
    command = [sys.executable, "-m", "cs_basics.cli", "handout", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the handout checks out" in done.stdout
    assert not (out / "hidden").exists() and not (out / "staff_tests").exists()
    assert (out / "fixtures" / "MANIFEST.json").is_file() and (out / "uv.lock").is_file()
    functional = (out / "cs_basics" / "nn" / "functional.py").read_text()
    assert functional.count("raise NotImplementedError") == 2 and "# BEGIN SOLUTION" not in functional
    assert "import itertools" not in functional and "einops" not in functional and "staff" not in functional
    assert (out / "README.md").read_text() == (ROOT / "docs" / "student" / "README.md").read_text()
    assert not (out / "docs").exists()
    assert "hidden" not in (out / "pyproject.toml").read_text().split("[tool.pytest.ini_options]")[1]
    assert "handout_readme" not in (out / "pyproject.toml").read_text()
    assert "autograding-grading-reporter" in (out / ".github" / "workflows" / "classroom.yml").read_text()
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_a_handout_that_would_ship_a_from_scratch_mistake_is_refused_naming_it(tmp_path, capsys, monkeypatch):
    """A known mistake whose code computes a softmax from scratch, moved back into tests/: a student reading the
    handout would get a working softmax. The handout's check says so, naming its file and line, and its other
    checks find nothing else wrong (the handout's `uv run pytest` and the two gradings, which test_handout_command_
    builds_and_checks_the_starter_repository runs on this course, are left out here: minutes of a CI run for
    nothing new)."""
    copy = course_shipping_a_from_scratch_mistake(tmp_path)

    class Graded:
        score = max_score = 0.0

    monkeypatch.setattr(handout, "check_pytest", lambda out, previous=None: [])
    monkeypatch.setattr(handout, "grade", lambda assignment, folder, device: Graded())
    assert main(["handout", "--project", str(copy), str(tmp_path / "handout")]) == 1
    said = capsys.readouterr()
    # the mistake is named with its file and line (a lambda's name alone does not say which one)
    named = "cs-basics handout: softmax: the known mistake sum_over_everything (tests.mistakes.<lambda>, mistakes.py:"
    assert named in said.err and "1 problems with the handout" in said.out, said.out + said.err[-4000:]
    assert ") ships in the handout" in said.err.split(named, 1)[1].splitlines()[0], said.err[-4000:]


def test_a_second_handout_into_a_folder_is_refused_naming_it_and_force_replaces_it(tmp_path, capsys):
    out = tmp_path / "handout"
    command = ["handout", str(out), "--no-check"]
    assert main(command) == 0
    (out / "stale.txt").write_text("from the last cut")
    capsys.readouterr()
    assert main(command) == 2
    said = capsys.readouterr().err
    assert f"cs-basics handout: {out} already exists" in said and "--force" in said, said
    assert (out / "stale.txt").is_file()  # refused: nothing touched
    assert main([*command, "--force"]) == 0
    assert not (out / "stale.txt").exists() and (out / "cs_basics" / "nn" / "functional.py").is_file()


def test_force_never_removes_the_folder_that_holds_the_course(tmp_path):
    course = tmp_path / "course" / "assignment"
    course.mkdir(parents=True)
    for out in (course, tmp_path / "course"):
        with pytest.raises(HandoutError, match="holds the course itself"):
            make_room(Assignment(course, {}), out, force=True)
    assert course.is_dir()


def test_the_handout_command_names_the_assignments_own_maximum(tmp_path, capsys, monkeypatch):
    """The example next assignment is worth 5 points: the handout's check says it grades 0 and 5."""
    monkeypatch.setattr(handout, "check", lambda *args: [])
    example = ROOT / "examples" / "multihead_attention"
    assert main(["handout", str(tmp_path / "handout"), "--project", str(example)]) == 0
    total = sum(p.points for p in Assignment.find(example).problems.values())
    assert total != 6 and f"grades 0 and {total:g} ..." in capsys.readouterr().out


def test_the_handout_checks_catch_a_staff_section_a_solution_import_and_the_threat_model(tmp_path):
    assignment = Assignment.find(ROOT)
    out = tmp_path / "handout"
    build(assignment, out)
    assert check_readme(assignment, out) == [] and check_ruff(out) == []
    readme = out / "README.md"
    readme.write_text(readme.read_text() + "\n## What next, by role\n\nThe reference solution...\n")
    assert "README.md has the staff README's section 'What next, by role'" in check_readme(assignment, out)
    readme.write_text((ROOT / "docs" / "student" / "README.md").read_text())
    staff = (ROOT / "docs" / "grading.md").read_text()
    threat_model = staff[staff.index("## Threat model") :].split("\n## ")[0]
    (out / "NOTES.md").write_text(threat_model)
    assert check_readme(assignment, out) == ["NOTES.md has the staff README's section 'Threat model'"]
    (out / "NOTES.md").unlink()
    functional = out / "cs_basics" / "nn" / "functional.py"
    text = functional.read_text()
    functional.write_text(
        text.replace("from __future__ import annotations\n", "from __future__ import annotations\n\nimport itertools\n")
    )
    problems = check_ruff(out)
    assert len(problems) == 1 and "F401" in problems[0] and "itertools" in problems[0]


def solution_lines(assignment: Assignment) -> set[str]:
    """The code lines of the source's `# BEGIN SOLUTION` blocks (the files the handout cuts) that the course's own
    code has nowhere outside such a block (`return`, `raise ValueError(`, `if mask is None:` are the harness's too)."""
    cut_files = {p.relative_to(ROOT) for p in student_files(assignment, ROOT)} | STUDY_SOLUTIONS
    inside, outside = set(), set()
    for rel in repository_files(ROOT):
        if rel.suffix != ".py" or rel.parts[0] not in ("cs_basics", "tests", "hidden"):
            continue
        text = (ROOT / rel).read_text()
        if rel in cut_files:
            kept, removed = cut(text, str(rel))
            inside |= set(code_lines("".join(removed)))
            outside |= set(code_lines(kept))
        else:
            outside |= set(code_lines(text))
    return inside - outside


def solution_lines_in(files: dict[str, bytes], lines: set[str]) -> list[str]:
    found = []
    for name, data in files.items():
        for line in data.decode(errors="replace").splitlines():
            if line.strip() in lines:
                found.append(f"{name}: {line.strip()}")
    return found


LEFT_OUT = ("staff_tests/", "benchmarks/", "docs/", "examples/", ".ci/", "CHANGELOG.md", ".github/")


def test_the_grader_ships_no_line_of_the_reference_solution(assignment, tmp_path):
    """The Gradescope zip and PrairieLearn's files carry the handout's stubs, the hidden cases and the harness:
    no line of a solution block (the study kernel's included), nothing grading never reads."""
    lines = solution_lines(assignment)
    assert len(lines) > 60, sorted(lines)  # both files' blocks: the test can see a leak
    zipped = tmp_path / "autograder.zip"
    bundle.build(assignment, zipped)
    with zipfile.ZipFile(zipped) as zf:
        shipped = {name: zf.read(name) for name in zf.namelist()}
    course = tmp_path / "pl"
    prairielearn.build(assignment, course)
    written = {p.relative_to(course).as_posix(): p.read_bytes() for p in course.rglob("*") if p.is_file()}
    for files in (shipped, written):
        assert solution_lines_in(files, lines) == []
    prefix = "serverFilesCourse/cs_basics/"
    grader = {name.removeprefix(prefix) for name in written if name.startswith(prefix)}
    assert grader == set(shipped) - {"setup.sh", "run_autograder"} | {"run.sh"}
    assert not [n for n in shipped if n.startswith(LEFT_OUT)], sorted(shipped)
    assert {"hidden/cases.py", "fixtures/MANIFEST.json", "hidden/fixtures/MANIFEST.json"} <= set(shipped)
    assert 'hidden = "hidden"' in shipped["pyproject.toml"].decode()
    assert "handout_readme" not in shipped["pyproject.toml"].decode()
    # the check itself sees the solution where it is: the repository's own file
    reference = {"functional.py": (ROOT / "cs_basics" / "nn" / "functional.py").read_bytes()}
    assert len(solution_lines_in(reference, lines)) > 20


def test_autograder_bundle_grades_a_submission_in_a_simulated_autograder_tree(assignment, tmp_path):
    """Unpacked and set up as Gradescope does, the bundle grades: the reference solution full marks (as a folder and
    as the one file uploaded), the handout's stub (the bundle's own cs_basics) 0, a crashing attention its softmax."""
    zipped = tmp_path / "autograder.zip"
    done = subprocess.run(
        [sys.executable, "-m", "cs_basics.cli", "autograder", str(zipped)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    total = sum(p.points for p in assignment.problems.values())
    with unpacked(zipped) as autograder:
        names = {p.relative_to(autograder / "source").as_posix() for p in (autograder / "source").rglob("*")}
        assert {"setup.sh", "run_autograder", "pyproject.toml", "uv.lock"} <= names
        assert any(n.startswith("hidden/fixtures/") for n in names) and not any(".venv" in n for n in names)
        set_up(autograder)
        stub = tmp_path / "stub"
        shutil.copytree(autograder / "source" / "cs_basics", stub / "cs_basics")
        upload = tmp_path / "upload"  # Gradescope's upload of the one file: laid out from the stubs' package
        upload.mkdir()
        shutil.copy(ROOT / "cs_basics" / "nn" / "functional.py", upload)
        crashing = submission(tmp_path, wrap_attention("raise RuntimeError('boom')"))
        reference = submission(tmp_path, name="reference")
        for folder, score in ((reference, total), (upload, total), (stub, 0.0), (crashing, 1.0)):
            results = run_autograder(autograder, folder)
            assert results["score"] == pytest.approx(score), folder.name
            assert len(results["tests"]) == len(assignment.cases)
        attention = [t for t in results["tests"] if t["tags"] == ["scaled_dot_product_attention"]]
        assert attention and all("RuntimeError: boom" in said(results, t) for t in attention)


@pytest.mark.parametrize("name", ["multihead_attention", "transformer_blocks", "training_utilities"])
def test_a_course_with_a_path_dependency_outside_it_installs_and_grades_wherever_it_is_unpacked(tmp_path, name):
    """Each example next assignment depends on this harness by path (`../..`): the zip carries the harness and
    nothing else of the previous course (no test, fixture, student file or study kernel of it), pyproject.toml and
    uv.lock name it where it is carried, and it installs and grades: the reference full marks, the stubs 0."""
    example = Assignment.find(ROOT / "examples" / name)
    zipped = tmp_path / "autograder.zip"
    names = bundle.build(example, zipped)
    carried = [n.removeprefix("path_dependencies/cs-basics/") for n in names if n.startswith("path_dependencies/")]
    assert "cs_basics/harness/grading/pipeline/grade.py" in carried
    harness = ("cs_basics/harness/", "cs_basics/cli.py", "cs_basics/__init__.py", "pyproject.toml", "README.md")
    assert not [n for n in carried if not n.startswith(harness)], carried
    with zipfile.ZipFile(zipped) as zf:
        shipped = {name: zf.read(name) for name in zf.namelist()}
    assert solution_lines_in(shipped, solution_lines(Assignment.find(ROOT))) == []
    assert b"[tool.cs-basics" not in shipped["path_dependencies/cs-basics/pyproject.toml"]
    assert b'editable = "path_dependencies/cs-basics"' in shipped["uv.lock"] and b"../.." not in shipped["uv.lock"]
    with unpacked(zipped) as autograder:
        set_up(autograder, compile_bytecode=False)
        folder, stubs = tmp_path / "reference", tmp_path / "stubs"
        for package in example.student_code:  # the example's own, or this course's it builds on (cs_basics)
            found = example.root / package if (example.root / package).exists() else ROOT / package
            shutil.copytree(found, folder / package, ignore=IGNORE)
            stub = autograder / "source" / package
            shutil.copytree(stub if stub.exists() else found, stubs / package, ignore=IGNORE)
        total = sum(p.points for p in example.problems.values())
        assert run_autograder(autograder, folder)["score"] == pytest.approx(total)
        assert run_autograder(autograder, stubs)["score"] == pytest.approx(0)


@pytest.mark.parametrize(
    ("source", "lock", "named"),
    [
        ('lib = { path = "../missing-lib" }', "", "../missing-lib"),
        ("", 'source = { editable = "../other" }', "../other"),
    ],
    ids=["missing", "reached-through-another"],
)
def test_a_path_dependency_the_bundle_cannot_carry_is_named(tmp_path, source, lock, named):
    course = tmp_path / "course"
    course.mkdir()
    (tmp_path / "other").mkdir()
    pyproject = f"[project]\nname = 'c'\n\n[tool.uv.sources]\n{source}\n"
    with pytest.raises(bundle.BundleError, match=re.escape(named)):
        bundle.path_dependencies(course, pyproject, lock)


IGNORE = shutil.ignore_patterns("__pycache__", ".venv")


@contextlib.contextmanager
def unpacked(zipped: Path):
    """The zip unpacked in /autograder/source's place, in a folder other users may enter: as root the grader's
    child runs under a uid of its own."""
    autograder = Path(tempfile.mkdtemp(prefix="cs-basics-autograder-"))
    try:
        autograder.chmod(0o755)
        with zipfile.ZipFile(zipped) as zf:
            zf.extractall(autograder / "source")
            assert (zf.getinfo("run_autograder").external_attr >> 16) & 0o111
        yield autograder
    finally:
        shutil.rmtree(autograder, ignore_errors=True)


def bundle_env(autograder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_PROJECT", "CS_BASICS"))}
    return env | {"AUTOGRADER_ROOT": str(autograder)}


def set_up(autograder: Path, compile_bytecode: bool = True) -> None:
    """The bundle's setup.sh, run as Gradescope runs it. Without `compile_bytecode`, its `uv sync` is told to leave
    the environment's bytecode to the first import (it only writes .pyc files: about 20 CPU seconds of torch's,
    which one test, the simulated autograder tree's, pays for all)."""
    for script in ("setup.sh", "run_autograder"):
        (autograder / "source" / script).chmod(0o755)
    if not compile_bytecode:
        setup = autograder / "source" / "setup.sh"
        text = setup.read_text()
        assert " --compile-bytecode" in text, text
        setup.write_text(text.replace(" --compile-bytecode", ""))
    setup = subprocess.run(
        ["bash", "setup.sh"],
        cwd=autograder / "source",
        env=bundle_env(autograder),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert setup.returncode == 0, setup.stdout + setup.stderr


def run_autograder(autograder: Path, folder: Path) -> dict:
    for name in ("submission", "results"):
        shutil.rmtree(autograder / name, ignore_errors=True)
    shutil.copytree(folder, autograder / "submission", ignore=IGNORE)
    (autograder / "results").mkdir()
    run = subprocess.run(
        [str(autograder / "source" / "run_autograder")],
        cwd=autograder,
        env=bundle_env(autograder),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads((autograder / "results" / "results.json").read_text())


# ---------------------------------------------------------------- setup.sh on images it has never met
# setup.sh runs with nothing on PATH but a shell, coreutils and fakes: python3 (a given version: it answers
# `-c` with the real Python, `sys.version_info` set to its own), apt-get (python3.11 in its archive or not),
# uv (downloads a Python or not). Each fake writes what it was asked to the log.

TOOLS = ("bash", "sh", "dirname", "env", "ln", "mkdir", "cat", "cp", "chmod", "touch")

FAKE_PYTHON = """#!/bin/bash
case "$1" in
  -c) exec {real} -c "import sys; sys.version_info = ({version}, 'final', 0); exec(sys.argv[1])" "$2" ;;
  -V) echo "Python {dotted}" ;;
  -m)
    echo "$0 $*" >> "$FAKE_LOG"
    if [ "$2" = venv ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0; fi
    if [ "$2 $3" = "pip install" ]; then
      if [ "$(dirname "$0")" = "$FAKE_BIN" ] && [ -n "${{FAKE_PIP_REFUSED:-}}" ]; then
        echo "error: externally-managed-environment" >&2; exit 1
      fi
      cp "$FAKE_BIN/.uv" "$(dirname "$0")/uv"
    fi ;;
esac
"""

FAKE_UV = """#!/bin/bash
echo "uv $* (downloads=${UV_PYTHON_DOWNLOADS:-} preference=${UV_PYTHON_PREFERENCE:-})" >> "$FAKE_LOG"
case "$1 $2" in
  "python install") [ -n "${FAKE_DOWNLOADS:-}" ] || { echo "error: no network" >&2; exit 2; }
                    mkdir -p "$FAKE_HOME/managed" && cp "$FAKE_BIN/.python311" "$FAKE_HOME/managed/python3.11" ;;
  "python find") [ -x "$FAKE_HOME/managed/python3.11" ] && echo "$FAKE_HOME/managed/python3.11" ;;
esac
"""

FAKE_APT = """#!/bin/bash
echo "apt-get $*" >> "$FAKE_LOG"
for package in "$@"; do
  if [ "$package" = python3.11 ]; then
    [ -n "${FAKE_APT_PYTHON311:-}" ] || { echo "E: Unable to locate package python3.11" >&2; exit 100; }
    cp "$FAKE_BIN/.python311" "$FAKE_BIN/python3.11"
  fi
done
"""


def fake_python(version: tuple[int, int, int]) -> str:
    return FAKE_PYTHON.format(
        real=sys.executable, version=", ".join(map(str, version)), dotted=".".join(map(str, version))
    )


def run_setup(tmp_path: Path, python3: tuple[int, int, int], **fakes: str) -> tuple[subprocess.CompletedProcess, str]:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in TOOLS:
        (bin_ / tool).symlink_to(shutil.which(tool))
    scripts = {"python3": fake_python(python3), ".python311": fake_python((3, 11, 4)), ".uv": FAKE_UV}
    scripts["apt-get"] = FAKE_APT
    for name, text in scripts.items():
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    source = tmp_path / "source"
    source.mkdir()
    (source / "setup.sh").write_text(bundle.SETUP)
    log = tmp_path / "log"
    env = {"PATH": str(bin_), "FAKE_LOG": str(log), "FAKE_BIN": str(bin_), "FAKE_HOME": str(tmp_path), **fakes}
    env |= {"CS_BASICS_UV_HOME": str(tmp_path / "uv-venv"), "CS_BASICS_BIN": str(bin_), "HOME": str(tmp_path)}
    done = subprocess.run(
        [str(bin_ / "bash"), "setup.sh"], cwd=source, env=env, capture_output=True, text=True, timeout=60
    )
    return done, log.read_text() if log.exists() else ""


def synced_with(log: str) -> str | None:
    """The Python `uv sync` was told to use, with the downloads setting it ran under."""
    found = re.search(r"^uv sync --frozen --no-dev --compile-bytecode --python (\S+) \(downloads=(\w+)", log, re.M)
    return found and f"{found.group(1)} {found.group(2)}"


def test_setup_uses_the_images_python_where_it_is_3_11_or_later(tmp_path):
    done, log = run_setup(tmp_path, (3, 12, 3), FAKE_PIP_REFUSED="")
    assert done.returncode == 0, done.stdout + done.stderr
    assert synced_with(log) == f"{tmp_path}/bin/python3 never" and "python3.11" not in log, log


def test_setup_on_gradescopes_ubuntu_22_04_installs_apts_python_3_11(tmp_path):
    """python3 is 3.10; the archive has python3.11 (Ubuntu 22.04's universe): no Python downloaded."""
    done, log = run_setup(tmp_path, (3, 10, 12), FAKE_APT_PYTHON311="1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^apt-get install .*python3\.11", log, re.M) and "python install" not in log, log
    assert synced_with(log) == f"{tmp_path}/bin/python3.11 never", log


def test_setup_without_a_python_3_11_anywhere_stops_and_says_what_it_found(tmp_path):
    """Debian 11's python3 is 3.9 and its archive has no python3.11; uv cannot reach GitHub here."""
    done, log = run_setup(tmp_path, (3, 9, 2))
    assert done.returncode != 0 and synced_with(log) is None, log
    assert "no Python 3.11 or later: python3 is Python 3.9.2" in done.stderr
    assert "uv python install 3.11 (downloads=manual" in log  # it asked, once apt had none


def test_setup_lets_uv_download_a_python_only_where_nothing_else_has_one(tmp_path):
    done, log = run_setup(tmp_path, (3, 9, 2), FAKE_DOWNLOADS="1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert synced_with(log) == f"{tmp_path}/managed/python3.11 never", log


def test_setup_installs_uv_in_a_venv_where_pip_is_refused(tmp_path):
    """PEP 668 (Debian 12, Ubuntu 23.04+): `pip install uv` into the distribution's Python is refused."""
    done, log = run_setup(tmp_path, (3, 11, 2), FAKE_PIP_REFUSED="1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        f"python3 -m venv {tmp_path}/uv-venv" in log
        and (tmp_path / "bin" / "uv").resolve() == tmp_path / "uv-venv/bin/uv"
    )
    assert synced_with(log) == f"{tmp_path}/bin/python3 never", log


def test_the_kubernetes_recipe_names_the_image_the_shipped_dockerfile_builds_from_the_bundle():
    """docs/cluster/Dockerfile builds the image grade-job.yaml and merge-job.yaml run: the bundle unpacked (its
    build context), installed by the bundle's setup.sh, in the folder the pods work in."""
    cluster = ROOT / "docs" / "cluster"
    dockerfile = (cluster / "Dockerfile").read_text()
    jobs = [yaml.safe_load((cluster / name).read_text()) for name in ("grade-job.yaml", "merge-job.yaml")]
    containers = [job["spec"]["template"]["spec"]["containers"][0] for job in jobs]
    images = {c["image"] for c in containers}
    assert len(images) == 1
    built = re.search(r"docker build --platform linux/amd64 -f docs/cluster/Dockerfile -t (\S+) grader/", dockerfile)
    assert built and built.group(1) in images
    assert "unzip -q autograder.zip -d grader" in dockerfile and "cs-basics autograder autograder.zip" in dockerfile
    instructions = [line.split()[0] for line in dockerfile.splitlines() if line and not line.startswith(("#", " "))]
    assert instructions == ["FROM", "RUN", "WORKDIR", "ENV", "COPY", "RUN", "COPY", "RUN"], instructions
    assert "FROM debian:bookworm-slim\n" in dockerfile and "RUN bash setup.sh" in dockerfile
    assert {f"WORKDIR {c['workingDir']}" for c in containers} <= set(dockerfile.splitlines())
    # the locked dependencies in a layer of their own, before the course's code: its changes rebuild only the rest
    deps = "COPY pyproject.toml uv.lock setup.sh /course/\nRUN UV_NO_INSTALL_PROJECT=1 UV_NO_INSTALL_LOCAL=1 bash setup"
    assert deps in dockerfile and dockerfile.index(deps) < dockerfile.index("COPY . /course")
    assert "docs/cluster/Dockerfile" in (cluster / "grade-job.yaml").read_text()


def test_the_classroom_workflow_tells_the_staff_to_leave_classrooms_own_autograding_off(assignment):
    header = [line for line in classroom.workflow(assignment).splitlines() if line.startswith("#")]
    assert any("leave autograding off" in line for line in header), header
    assert any("over this file" in line for line in header), header


def test_prairielearns_grader_carries_the_path_dependency_and_puts_it_on_pythonpath(tmp_path):
    """The image installs none of the course's code (`--no-install-local`): run.sh finds the carried harness."""
    example = Assignment.find(ROOT / "examples" / "multihead_attention")
    out = tmp_path / "pl"
    prairielearn.build(example, out)
    grader = out / "serverFilesCourse" / prairielearn.GRADER
    assert (grader / "path_dependencies" / "cs-basics" / "cs_basics" / "cli.py").is_file()
    assert 'PYTHONPATH="$PWD/path_dependencies/cs-basics' in (grader / "run.sh").read_text()
    assert "--no-install-local" in (out / "Dockerfile").read_text()
    assert (out / "uv.lock").read_text() == (grader / "uv.lock").read_text()  # the image's lock names it there
    assert "PYTHONPATH" not in prairielearn.RUN  # a course without one keeps its run.sh


def tracked_copy(tmp_path: Path) -> Path:
    """This course's files, copied into a git repository of its own that tracks them (nothing committed)."""
    course = tmp_path / "course"
    for rel in repository_files(ROOT):
        if (ROOT / rel).is_file() and rel.parts[0] not in ("examples", "benchmarks", "staff_tests"):
            (course / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, course / rel)
    subprocess.run(["git", "init", "-q"], cwd=course, check=True)
    subprocess.run(["git", "add", "-A"], cwd=course, check=True)
    return course


def test_a_grader_built_earlier_inside_the_repository_reaches_neither_the_handout_nor_the_next_bundle(tmp_path):
    """`cs-basics autograder autograder.zip` at the repository's root (as the docs once said), the zip unpacked
    to build an image, PrairieLearn's files: each holds the hidden cases, and none is ignored by git."""
    course = tracked_copy(tmp_path)  # what is built below is untracked, as new outputs are
    assignment = Assignment.find(course)
    bundle.build(assignment, course / "autograder.zip")
    with zipfile.ZipFile(course / "autograder.zip") as zf:
        zf.extractall(course / "grader")
    prairielearn.build(assignment, course / "pl")
    handed_out = set(handout.handout_files(assignment)[0])
    shipped = set(bundle.grader_files(assignment))
    stray = {Path("autograder.zip"), Path("grader"), Path("pl")}
    for files in (handed_out, shipped):
        assert not [p for p in files if stray & {p, *p.parents}], sorted(map(str, files))
    assert not [p for p in handed_out if "hidden" in p.parts]
    assert Path("hidden/cases.py") in shipped and Path("cs_basics/nn/functional.py") in handed_out


RESULTS = '{"tests": [{"name": "test_hidden_softmax[grad_dim_0]", "output": "expected 0.123456789"}]}\n'


def test_a_results_file_anywhere_in_the_repository_reaches_neither_the_handout_nor_the_zip_nor_prairielearn(tmp_path):
    """Grades written into the repository (docs/grading.md's `--results alice.json` once did), even tracked by
    mistake, stay out of every cut: the handout, the Gradescope zip and PrairieLearn's files are allowlists."""
    course = tracked_copy(tmp_path)
    kept = ["alice.json", "tests/alice.json", "fixtures/alice.json", "hidden/alice.json", "cs_basics/alice.json"]
    for rel in [*kept, "bob.json", "tests/bob.json", "oom"]:
        (course / rel).write_text(RESULTS)
    subprocess.run(["git", "add", "-f", *kept], cwd=course, check=True)  # tracked: the worst case
    assignment = Assignment.find(course)
    zipped = tmp_path / "autograder.zip"
    bundle.build(assignment, zipped)
    prairielearn.build(assignment, tmp_path / "pl")
    with zipfile.ZipFile(zipped) as zf:
        shipped = set(zf.namelist())
    written = {p.relative_to(tmp_path / "pl").as_posix() for p in (tmp_path / "pl").rglob("*") if p.is_file()}
    handed_out = {p.as_posix() for p in handout.handout_files(assignment)[0]}
    assert "hidden/cases.py" in shipped and "serverFilesCourse/cs_basics/hidden/cases.py" in written
    for files in (handed_out, shipped, written):
        assert any(f.endswith("tests/cases.py") for f in files)  # the cuts are whole
        assert not [f for f in files if f.endswith(("alice.json", "bob.json", "oom"))], sorted(files)
    # the handout's check refuses such a file wherever it is found in a handout
    out = tmp_path / "handout"
    handout.write_files(handout.handout_files(assignment)[0], out)
    assert handout.not_allowed(assignment, out) == []
    (out / "tests" / "alice.json").write_text(RESULTS)
    (out / "notes.txt").write_text("the staff's")
    assert [p.split(" ")[0] for p in handout.not_allowed(assignment, out)] == ["notes.txt", "tests/alice.json"]


def test_a_file_the_handout_would_hold_but_git_does_not_track_is_refused_naming_it(tmp_path):
    course = tracked_copy(tmp_path)
    (course / "tests" / "test_extra.py").write_text("def test_x():\n    pass\n")
    with pytest.raises(HandoutError, match=r"git does not track tests/test_extra\.py"):
        handout.handout_files(Assignment.find(course))
    with pytest.raises(bundle.BundleError, match=r"git does not track tests/test_extra\.py"):
        bundle.grader_files(Assignment.find(course))


def test_every_results_file_grading_writes_by_default_is_ignored_by_git_and_so_is_oom():
    from cs_basics.harness.grading.writers.formats import WRITERS

    defaults = [w.default_file for w in WRITERS.values() if w.default_file]
    assert "results.json" in defaults and len(defaults) >= 3
    paths = [*defaults, "results/alice.json", "oom"]
    ignored = subprocess.run(["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True)
    assert ignored.stdout.split() == paths
    assert "oom" not in [p.as_posix() for p in handout.git_files(ROOT, "--cached")]
