"""Benchmark: the student's inner loop, where students run it, against the floor set by importing torch.

Cuts the handout (`cs-basics handout`) into a temporary folder, copies the reference solution
into it (what a student who has finished sees), and gives it its own environment from the
lock file, as `uv run` does on a student's machine. Then runs, alternately and warm, in that
handout and its environment: `uv run pytest -m points` (every graded test) and `uv run pytest`
of one trivial torch test. Beside them, in this staff repository: `uv run pytest -m points`
(which also collects the staff tests) and `uv run cs-basics grade` of this checkout (one
correct submission, end to end). Prints the medians and their ratios. Python caches bytecode
as on a student's machine, even where the calling shell sets PYTHONDONTWRITEBYTECODE (which
would recompile torch on every run).
Usage: uv run python benchmarks/student_loop.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cs_basics.harness.config import Assignment
from cs_basics.harness.course import handout

ROOT = Path(__file__).resolve().parents[1]
TRIVIAL = "import torch\n\n\ndef test_trivial():\n    assert torch.ones(2).sum() == 2\n"
SOLUTION = Path("cs_basics/nn/functional.py")


def environment() -> dict[str, str]:
    drop = ("PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV", "UV_PROJECT", "CS_BASICS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return env | {"UV_PYTHON_DOWNLOADS": "never"}


def seconds(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=environment(), capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed in {cwd}:\n{result.stdout}{result.stderr}")
    return elapsed


def finished_handout(folder: Path) -> Path:
    """The handout with the reference solution in it: what a student who has finished has."""
    out = folder / "handout"
    handout.build(Assignment.find(ROOT), out)
    shutil.copy(ROOT / SOLUTION, out / SOLUTION)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        student = finished_handout(Path(tmp))
        trivial = Path(tmp) / "trivial"
        trivial.mkdir()
        (trivial / "test_trivial.py").write_text(TRIVIAL)
        (trivial / "pytest.ini").write_text("[pytest]\n")
        results = Path(tmp) / "results.json"
        uv_run = ["uv", "run", "--frozen", "--project"]
        runs = {
            "handout: uv run pytest -m points": ([*uv_run, str(student), "pytest", "-q", "-m", "points"], student),
            "handout: uv run pytest (one trivial torch test)": (
                [*uv_run, str(student), "pytest", "-q", str(trivial)],
                trivial,
            ),
            "staff repository: uv run pytest -m points": ([*uv_run, str(ROOT), "pytest", "-q", "-m", "points"], ROOT),
            "staff repository: uv run cs-basics grade": (
                [*uv_run, str(ROOT), "cs-basics", "grade", "--quiet", "--results", str(results)],
                ROOT,
            ),
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        for command, cwd in runs.values():  # the handout's environment is made here; then every cache is warm
            seconds(command, cwd)
        for _ in range(args.repeats):
            for name, (command, cwd) in runs.items():
                times[name].append(seconds(command, cwd))
    table = Table(title=f"warm wall time, median of {args.repeats} alternating runs")
    for column in ("command", "median s", "min s", "max s"):
        table.add_column(column)
    for name, values in times.items():
        table.add_row(name, f"{statistics.median(values):.2f}", f"{min(values):.2f}", f"{max(values):.2f}")
    console = Console()
    console.print(table)
    graded, floor, staff_graded, grading = (statistics.median(v) for v in times.values())
    console.print(f"handout: graded tests / trivial test: {graded / floor:.2f}")
    console.print(f"staff repository: graded tests / the handout's trivial test: {staff_graded / floor:.2f}")
    console.print(f"cs-basics grade / the handout's graded tests: {grading / graded:.2f}")


if __name__ == "__main__":
    main()
