"""`cs-basics new NAME`: the skeleton of a next assignment that passes its own tests.

One problem (ReLU, its oracle torch's own relu, which the rule forbids students), declared once in
tests/cases.py, with a public and a hidden case, a known mistake, the student's function with its solution
region, its fixtures made, and the harness as a dependency:
- by default a path dependency on the cs-basics checkout this command runs from (editable: the course's
  staff work beside a clone of the harness, as examples/ does);
- or whatever `--harness` says, written as it is into `[tool.uv.sources]`, e.g.
  `--harness '{ git = "https://github.com/COURSE/cs_basics", tag = "v1" }'` for a harness the course
  publishes from git. (The Gradescope bundle must carry a path dependency: see docs/assignments.md.)
"""

from __future__ import annotations

import keyword
import re
import subprocess
import sys
from pathlib import Path

import cs_basics

HARNESS_ROOT = Path(cs_basics.__file__).resolve().parent.parent  # the checkout holding cs_basics/


FIXTURE_TEST = "test_fixtures_match_the_cases"


class NewError(Exception):
    pass


def files(package: str, project: str, harness: str) -> dict[str, str]:
    """The skeleton's files by path, for the student package `package`."""
    test_module = "from cs_basics.harness import graded\n\nfrom . import adapters\n\n\n@graded\ndef {name}(case, run_graded_case):\n    run_graded_case(case, adapters)\n"  # noqa: E501
    return {
        "pyproject.toml": f'''[project]
name = "{project}"
version = "0.1.0"
description = "The next assignment, graded by the cs-basics harness"
requires-python = ">=3.11"
dependencies = ["cs-basics"]

[tool.uv]
package = false  # the student's code is imported from this folder; nothing to build
python-preference = "only-system"

[tool.uv.sources]
cs-basics = {harness}

[tool.cs-basics]
fixtures = "fixtures"
cases = "tests.cases"
adapters = "tests.adapters"
hidden = "hidden"  # staff only: hidden cases (and any oracle or mistake that computes from scratch)
student_code = ["{package}"]
one_line_adapters = true
# each problem (points, adapter calls, reference, rule, known mistakes) is declared in tests/cases.py

[tool.pytest.ini_options]
testpaths = ["tests", "hidden"]
pythonpath = ["."]
addopts = ["-p", "no:cacheprovider"]
timeout = 300

[tool.ruff]
line-length = 120
''',
        "README.md": f"# {project}\n\nThe next assignment on the cs-basics harness: `uv run pytest`, "
        "`uv run cs-basics fixtures`, `uv run cs-basics check-cases`, `uv run cs-basics grade`. Add a problem "
        "in `tests/cases.py` (see the harness's docs/assignments.md).\n",
        f"{package}/__init__.py": '"""The student\'s package."""\n',
        f"{package}/functions.py": '''"""The functions students write."""

from __future__ import annotations

from torch import Tensor


def relu(x: Tensor) -> Tensor:
    """max(x, 0), elementwise: the same shape and dtype as x."""
    # BEGIN SOLUTION
    return x.clamp(min=0)
    # END SOLUTION
''',
        "tests/__init__.py": "",
        "tests/conftest.py": 'pytest_plugins = ["cs_basics.harness.pytest_plugin"]\n',
        "tests/adapters.py": f'''"""Where the tests meet your code: each adapter calls one function of your package."""

from __future__ import annotations

from torch import Tensor

from {package} import functions


def run_relu(in_features: Tensor) -> Tensor:
    return functions.relu(in_features)
''',
        "tests/cases.py": '''"""Every graded case, each problem declared once (cs_basics.harness.Problem)."""

from __future__ import annotations

import torch
from cs_basics.harness import Mistake, Problem, Tolerance, randn

FLOAT32 = (Tolerance(atol=1e-6, rtol=1e-5), Tolerance(atol=1e-5, rtol=1e-4))  # (outputs, gradients)
TOLERANCES = {torch.float32: FLOAT32, torch.float64: (Tolerance(atol=1e-12, rtol=1e-10),) * 2}

RELU = Problem(
    "relu",
    points=1,
    calls={"run_relu(in_features)": torch.relu},  # the adapter call, and the float64 oracle: torch's own
    tolerances=TOLERANCES,
    forbidden=["torch.relu", "torch.nn.functional.relu", "torch.nn.ReLU", "torch.Tensor.relu"],
    forbidden_ops=["aten.relu", "aten.relu_"],
    mistakes=(Mistake("absolute_value", "ReLU zeroes the negatives: it is not abs(x)", {"run_relu": torch.abs}),),
)


def relu(param: str, seed: int, *shape: int, grad: bool = False, **kw):
    def make(seed: int) -> dict[str, torch.Tensor]:
        return {"in_features": randn(seed, *shape)} | ({"grad_out": randn(seed + 1, *shape)} if grad else {})

    return RELU.case("test_relu", param, seed, make, **kw)


CASES = [relu("vector", 1, 10), relu("grad", 2, 4, 6, grad=True), relu("float64", 3, 3, 5, dtype=torch.float64)]
''',
        "tests/test_relu.py": test_module.format(name="test_relu"),
        "tests/test_fixtures.py": f"from cs_basics.harness.pytest_plugin import {FIXTURE_TEST}  # noqa: F401\n",
        "hidden/__init__.py": "",
        "hidden/conftest.py": 'pytest_plugins = ["cs_basics.harness.pytest_plugin"]\n',
        "hidden/cases.py": '''"""Hidden cases: never in the handout."""

from dataclasses import replace

from tests.cases import relu

CASES = [replace(relu("hidden_grad", 101, 2, 3, 4, grad=True), test="test_hidden_relu")]
''',
        "hidden/test_hidden.py": test_module.format(name="test_hidden_relu").replace("from . ", "from tests "),
    }


def create(out: Path, harness: str | None = None) -> list[Path]:
    """Write the skeleton into the new folder `out` and make its fixtures; return the files written."""
    out = Path(out)
    if out.exists():
        raise NewError(f"{out} already exists; choose a new folder")
    project = re.sub(r"[^a-z0-9]+", "-", out.name.lower()).strip("-") or "assignment"
    package = project.replace("-", "_")
    if not package.isidentifier() or keyword.iskeyword(package) or package in ("tests", "hidden", "cs_basics"):
        raise NewError(f"{out.name!r} does not make a package name of its own; choose another folder name")
    if harness is None:
        if not (HARNESS_ROOT / "pyproject.toml").is_file():
            raise NewError(f"cs_basics is not a checkout here ({HARNESS_ROOT}); give --harness, e.g. a git source")
        harness = f'{{ path = "{HARNESS_ROOT}", editable = true }}'
    written = []
    for rel, text in files(package, project, harness).items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    made = subprocess.run(
        [sys.executable, "-m", "cs_basics.cli", "fixtures", "--project", str(out)],
        cwd=out, capture_output=True, text=True,
    )  # fmt: skip
    if made.returncode != 0:  # its own process: the skeleton's `tests` package is not this checkout's
        raise NewError(f"making the fixtures failed:\n{made.stdout}{made.stderr}")
    return written
