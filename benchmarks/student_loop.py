"""Benchmark: the student's inner loop, and grading, against the floor set by importing torch.

Runs, alternately and warm, `uv run pytest -m points` (every graded test), `uv run pytest`
of one trivial torch test in an empty folder, and `uv run cs-basics grade` of this checkout
(one correct submission, end to end: staging, the child process, every check), then prints
the medians and their ratios. Python caches bytecode as on a student's machine, even where the
calling shell sets PYTHONDONTWRITEBYTECODE (which would recompile torch on every run).
Usage: uv run python benchmarks/student_loop.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
TRIVIAL = "import torch\n\n\ndef test_trivial():\n    assert torch.ones(2).sum() == 2\n"


def seconds(command: list[str], cwd: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed in {cwd}:\n{result.stdout}{result.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trivial = Path(tmp)
        results = trivial / "results.json"
        (trivial / "test_trivial.py").write_text(TRIVIAL)
        (trivial / "pytest.ini").write_text("[pytest]\n")
        runs = {
            "uv run pytest -m points": (["uv", "run", "--project", str(ROOT), "pytest", "-q", "-m", "points"], ROOT),
            "uv run pytest (one trivial torch test)": (
                ["uv", "run", "--project", str(ROOT), "pytest", "-q", str(trivial)],
                trivial,
            ),
            "uv run cs-basics grade": (
                ["uv", "run", "--project", str(ROOT), "cs-basics", "grade", "--quiet", "--results", str(results)],
                ROOT,
            ),
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        for command, cwd in runs.values():  # warm the caches once
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
    graded, floor, grading = (statistics.median(v) for v in times.values())
    console.print(f"ratio (graded tests / trivial test): {graded / floor:.2f}")
    console.print(f"ratio (cs-basics grade / graded tests): {grading / graded:.2f}")


if __name__ == "__main__":
    main()
