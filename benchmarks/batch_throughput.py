"""Benchmark: submissions graded per minute for a folder of correct submissions, before and after.

Makes N copies of this checkout's `cs_basics` (a correct submission), then grades the folder with
`cs-basics grade --submission DIR --workers W` twice per repeat, alternately: with this checkout's
grader, and with the grader of an earlier commit (`--before REV`, checked out into a temporary
worktree and run on the same environment). Prints each run's wall time and submissions per minute.
Usage: uv run python benchmarks/batch_throughput.py [--copies 40] [--workers 2] [--before REV] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "6b464c9"  # the last grader with one grading process per submission


def grade_folder(grader: Path, folder: Path, out: Path, workers: int) -> float:
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "cs_basics.cli", "grade", "--submission", str(folder), "--results", str(out)]
    env = os.environ | {"PYTHONPATH": str(grader)}  # this grader's cs_basics first, on the same environment
    start = time.perf_counter()
    done = subprocess.run([*command, "--workers", str(workers)], cwd=grader, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    scores = (out / "scores.csv").read_text().splitlines()[1:] if (out / "scores.csv").is_file() else []
    if done.returncode != 0 or not scores or any(",6.0,6.0" not in line for line in scores):
        raise SystemExit(f"grading with {grader} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--before", default=BEFORE, help=f"the earlier grader's commit (default {BEFORE})")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cs-basics-throughput-") as tmp:
        tmp = Path(tmp)
        tmp.chmod(0o755)  # the earlier grader's child must reach its checkout under its own uid
        folder = tmp / "submissions"
        for i in range(args.copies):
            shutil.copytree(
                ROOT / "cs_basics", folder / f"s{i:03d}" / "cs_basics", ignore=shutil.ignore_patterns("__pycache__")
            )
        before = tmp / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(before), args.before], cwd=ROOT, check=True,
                       capture_output=True)  # fmt: skip
        try:
            times: dict[str, list[float]] = {args.before: [], "this checkout": []}
            for _ in range(args.repeats):
                for name, grader in ((args.before, before), ("this checkout", ROOT)):
                    times[name].append(grade_folder(grader, folder, tmp / "out", args.workers))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, capture_output=True)
    table = Table(title=f"{args.copies} correct submissions, --workers {args.workers}, median of {args.repeats}")
    for column in ("grader", "wall s", "submissions per minute"):
        table.add_column(column)
    rates = {}
    for name, values in times.items():
        seconds = statistics.median(values)
        rates[name] = args.copies / seconds * 60
        table.add_row(name, f"{seconds:.1f}", f"{rates[name]:.1f}")
    Console().print(table)
    Console().print(f"speed-up: {rates['this checkout'] / rates[args.before]:.2f}x")


if __name__ == "__main__":
    main()
