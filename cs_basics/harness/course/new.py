"""`cs-basics new NAME`: the skeleton of a next assignment that passes its own tests, and cuts a handout students
can install.

One problem (ReLU, its oracle torch's own relu, which the rule forbids students), declared once in
tests/cases.py, with a public and a hidden case, a known mistake, the student's function with its solution
region, its fixtures made, what `cs-basics handout` and a CI need (ruff in the dev group and its config, a
.gitignore that keeps grades out of git), the handout's README, and the harness as a dependency, written the
way this cs-basics was installed (it may be a copy that cannot be written to; nothing is written there):
- run from a checkout of cs-basics: a path dependency on it, relative, editable (the course's staff work
  beside a clone of the harness, as examples/ does);
- installed from git: that repository at the commit installed; from a local folder or file: that path;
  from a package index: none (the index's `cs-basics`);
- or whatever `--harness` says, written as it is into `[tool.uv.sources]`, e.g.
  `--harness '{ git = "https://github.com/COURSE/cs_basics", tag = "v1" }'` for a harness the course
  publishes from git.
A harness at a path is the staff's layout: the handout gives the students' own previous assignment instead,
beside the handout as its README says (`handout_sources`).
"""

from __future__ import annotations

import importlib.metadata
import json
import keyword
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import unquote, urlparse

import cs_basics
from cs_basics.harness.grading.writers.formats import WRITERS

HARNESS_ROOT = Path(cs_basics.__file__).resolve().parent.parent  # the checkout (or site-packages) holding cs_basics/
PREVIOUS = "../cs_basics"  # where the handout expects the students' previous assignment (its README says so)


FIXTURE_TEST = "test_fixtures_match_the_cases"


class NewError(Exception):
    pass


def gitignore() -> str:
    """The course's .gitignore: environments and caches, and every file `cs-basics grade` writes by default (grades,
    with hidden cases' messages: never committed; the handout's allowlist leaves them out besides)."""
    written = sorted({w.default_file for w in WRITERS.values() if w.default_file})
    return (
        "\n".join([".venv/", "__pycache__/", "*.pyc", ".pytest_cache/", ".ruff_cache/", *written, "/results/"]) + "\n"
    )


def files(package: str, project: str, harness: str | None) -> dict[str, str]:
    """The skeleton's files by path, for the student package `package`; `harness`: cs-basics's [tool.uv.sources]
    entry (None: from the package index)."""
    test_module = "from cs_basics.harness import graded\n\nfrom . import adapters\n\n\n@graded\ndef {name}(case, run_graded_case):\n    run_graded_case(case, adapters)\n"  # noqa: E501
    at_path = harness is not None and tomllib.loads(f"h = {harness}")["h"].get("path") is not None
    sources = f"\n[tool.uv.sources]\ncs-basics = {harness}\n" if harness else ""
    handout_sources = (
        "# the previous assignment as a student has it, beside the handout (its README, student/README.md, says so)\n"
        f'handout_sources = {{ cs-basics = {{ path = "{PREVIOUS}", editable = true }} }}\n'
        if at_path
        else ""
    )
    where = (
        f"Keep this folder beside your copy of the previous assignment, in a folder named `{PREVIOUS[3:]}`:\n"
        f"`pyproject.toml` finds it at `{PREVIOUS}` (if yours is elsewhere, put its relative path there instead). "
        "Its grading harness runs these tests.\n\n"
        if at_path
        else ""
    )
    return {
        "pyproject.toml": f'''[project]
name = "{project}"
version = "0.1.0"
description = "The next assignment, graded by the cs-basics harness"
requires-python = ">=3.11"
dependencies = ["cs-basics"]

[dependency-groups]
dev = ["ruff>=0.8"]  # `cs-basics handout` checks the handout with it, and so can CI

[tool.uv]
package = false  # the student's code is imported from this folder; nothing to build
python-preference = "only-system"
{sources}
[tool.cs-basics]
fixtures = "fixtures"
cases = "tests.cases"
adapters = "tests.adapters"
hidden = "hidden"  # staff only: hidden cases (and any oracle or mistake that computes from scratch)
student_code = ["{package}"]
one_line_adapters = true
handout_readme = "student/README.md"  # the handout's README.md
{handout_sources}# each problem (points, adapter calls, reference, rule, known mistakes) is declared in tests/cases.py

[tool.pytest.ini_options]
testpaths = ["tests", "hidden"]
pythonpath = ["."]
addopts = ["-p", "no:cacheprovider"]
timeout = 300

[tool.ruff]
line-length = 120
target-version = "py311"

[tool.ruff.lint]
select = ["E", "F", "W", "I", "B", "UP", "SIM", "RUF"]
''',
        ".gitignore": gitignore(),
        "README.md": f"# {project}\n\nThe next assignment on the cs-basics harness: `uv run pytest`, "
        "`uv run cs-basics fixtures`, `uv run cs-basics check-cases`, `uv run cs-basics grade`, "
        "`uv run cs-basics handout ../handout`. Add a problem in `tests/cases.py` (see the harness's "
        "docs/assignments.md); the students' README is `student/README.md`.\n",
        "student/README.md": f"# {project}\n\nWrite `relu` in `{package}/functions.py`; the tests call it "
        "through `tests/adapters.py`.\n\n"
        f"{where}"
        "```bash\nuv run pytest                 # every graded test\n"
        "uv run pytest -k test_relu    # one problem\n```\n\n"
        "A failure says which case failed, what differs, the known mistake it looks like where there is one, and "
        f"the command that reruns it. Submit `{package}/`.\n",
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
    harness = harness_source(out) if harness is None else harness
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


def harness_source(out: Path) -> str | None:
    """cs-basics's [tool.uv.sources] entry for a course at `out`, as this cs-basics was installed (None: from the
    package index). Paths are relative to `out`: nothing of this machine's layout but the two folders' places."""
    if is_checkout(HARNESS_ROOT):
        return f'{{ path = "{relative(HARNESS_ROOT, out)}", editable = true }}'
    url = installed_from()
    if url is None:
        return None
    where = urlparse(url["url"])
    if "vcs_info" in url:
        vcs = url["vcs_info"]
        return f'{{ {vcs.get("vcs", "git")} = "{url["url"]}", rev = "{vcs["commit_id"]}" }}'
    if where.scheme != "file":
        return f'{{ url = "{url["url"]}" }}'
    local = Path(unquote(where.path))
    editable = ", editable = true" if url.get("dir_info", {}).get("editable") else ""
    return f'{{ path = "{relative(local, out)}"{editable} }}'


def is_checkout(folder: Path) -> bool:
    """A folder holding cs-basics's own pyproject.toml (a clone of the harness, not an installed copy)."""
    try:
        return tomllib.loads((folder / "pyproject.toml").read_text())["project"]["name"] == "cs-basics"
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return False


def installed_from() -> dict | None:
    """Where the installed cs-basics came from (PEP 610's direct_url.json); None from a package index."""
    try:
        text = importlib.metadata.distribution("cs-basics").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    return json.loads(text) if text else None


def relative(path: Path, out: Path) -> str:
    return Path(os.path.relpath(path.resolve(), out.resolve())).as_posix()
