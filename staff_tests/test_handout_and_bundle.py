"""The student handout and the Gradescope bundle, built and used as the staff would."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from cs_basics.harness.config import Assignment
from cs_basics.harness.course import bundle
from cs_basics.harness.course.handout import HandoutError, build, check_readme, check_ruff, cut, handout_pyproject

from .submissions import ROOT, submission, wrap_attention

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
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "already exists" in again.stderr


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


def test_autograder_bundle_grades_a_submission_in_a_simulated_autograder_tree(assignment, tmp_path):
    bundle = tmp_path / "autograder.zip"
    done = subprocess.run(
        [sys.executable, "-m", "cs_basics.cli", "autograder", str(bundle)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(bundle) as zf:
        names = set(zf.namelist())
        assert {"setup.sh", "run_autograder", "pyproject.toml", "uv.lock"} <= names
        assert any(n.startswith("hidden/fixtures/") for n in names) and not any(".venv" in n for n in names)
        assert (zf.getinfo("run_autograder").external_attr >> 16) & 0o111
        # a folder other users may enter: as root the grader's child runs under a uid of its own
        autograder = Path(tempfile.mkdtemp(prefix="cs-basics-autograder-"))
        try:
            autograder.chmod(0o755)
            zf.extractall(autograder / "source")
            run_bundle(autograder, tmp_path, len(assignment.cases))
        finally:
            shutil.rmtree(autograder, ignore_errors=True)


def run_bundle(autograder: Path, tmp_path: Path, cases: int) -> None:
    for script in ("setup.sh", "run_autograder"):
        (autograder / "source" / script).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_PROJECT", "CS_BASICS"))}
    env["AUTOGRADER_ROOT"] = str(autograder)
    setup = subprocess.run(
        ["bash", "setup.sh"], cwd=autograder / "source", env=env, capture_output=True, text=True, timeout=900
    )
    assert setup.returncode == 0, setup.stdout + setup.stderr
    shutil.copytree(submission(tmp_path, wrap_attention("raise RuntimeError('boom')")), autograder / "submission")
    (autograder / "results").mkdir()
    run = subprocess.run(
        [str(autograder / "source" / "run_autograder")], cwd=autograder, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads((autograder / "results" / "results.json").read_text())
    attention = [t for t in results["tests"] if t["tags"] == ["scaled_dot_product_attention"]]
    assert results["score"] == pytest.approx(1.0) and len(results["tests"]) == cases
    assert attention and all("RuntimeError: boom" in t["output"] for t in attention)
