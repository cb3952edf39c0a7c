"""The harness's layers hold: a module imports only the layers below its own (import-linter's contract in
pyproject.toml), so the course's tools, the grader, the rule and the test library can each be read alone."""

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_module_imports_a_layer_above_its_own():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is a dev dependency: uv sync installs it"
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"{len(contracts)} kept, 0 broken" in done.stdout  # every contract declared was checked and held


def test_each_layer_says_what_it_is():
    layers = ("harness", "harness/rule", "harness/grading", "harness/course")
    for package in (*layers, *(f"harness/grading/{job}" for job in ("pipeline", "sandbox", "job", "writers"))):
        doc = (ROOT / "cs_basics" / package / "__init__.py").read_text()
        assert doc.startswith('"""') and "import" in doc, f"cs_basics/{package}/__init__.py explains its layer"


def test_no_module_of_the_harness_is_over_600_lines():
    """A module is one job: one that grows past 600 lines holds two (split it along them, docs/layout.md)."""
    long = {
        str(path.relative_to(ROOT)): n
        for path in (ROOT / "cs_basics" / "harness").rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 600
    }
    assert not long, f"over 600 lines: {long}"
