"""The Gradescope autograder bundle: the course repository with `setup.sh` and `run_autograder`.

Gradescope unpacks the zip into /autograder/source, runs setup.sh once while building the
image, then for each submission runs run_autograder, which must leave
/autograder/results/results.json. `AUTOGRADER_ROOT` moves that tree (default /autograder),
so the bundle can be run end to end on a simulated folder.
"""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

from cs_basics.harness.config import Assignment
from cs_basics.harness.course.handout import ALWAYS_LEFT_OUT, repository_files

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, in /autograder/source, while building the image.
set -euo pipefail
cd "$(dirname "$0")"
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    apt-get update && apt-get install -y python3.11 python3.11-venv python3-pip
fi
# the sandbox the grader runs submissions in (it falls back to its own where bubblewrap cannot run)
command -v bwrap >/dev/null 2>&1 || { apt-get update && apt-get install -y bubblewrap; } || true
command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
export UV_PYTHON_DOWNLOADS=never
uv sync --frozen --no-dev --compile-bytecode
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for each submission. It always leaves results/results.json.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
cd "$ROOT/source"
export UV_PYTHON_DOWNLOADS=never
uv run --frozen --no-dev cs-basics grade --submission "$ROOT/submission" --results "$ROOT/results/results.json"
"""


def course_files(assignment: Assignment) -> list[Path]:
    """The course repository's files a grader needs (relative paths): all but caches, venvs, results and the
    bundle's own scripts."""
    found = []
    for rel in repository_files(assignment.root):
        path = assignment.root / rel
        if path.is_file() and not ALWAYS_LEFT_OUT & set(rel.parts) and rel.name not in ("setup.sh", "run_autograder"):
            found.append(rel)
    return found


def build(assignment: Assignment, out: Path) -> list[str]:
    """Write the zip; return the paths it holds."""
    names = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for script, text in (("setup.sh", SETUP), ("run_autograder", RUN)):
            info = zipfile.ZipInfo(script)
            info.external_attr = (stat.S_IFREG | 0o755) << 16
            zf.writestr(info, text)
            names.append(script)
        for rel in course_files(assignment):
            zf.write(assignment.root / rel, rel.as_posix())
            names.append(rel.as_posix())
    return names
