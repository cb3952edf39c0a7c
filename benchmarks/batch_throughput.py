"""Benchmark: submissions graded per minute for a folder of correct submissions, before and after.

Makes N copies of this checkout's `cs_basics` (a correct submission), then grades the folder with
`cs-basics grade --submission DIR --workers W` twice per repeat, alternately: with this checkout's
grader, and with the grader of an earlier commit (`--before REV`, checked out into a temporary
worktree and run on the same environment). Prints each run's wall time and submissions per minute, and the
CPU seconds of all the grading's processes (cpu_seconds.py): the submissions a minute the machine's cores
would grade were they busy with nothing else, a ratio that holds on a busy machine.
`--sandbox fallback` grades both in the fallback sandbox.
Usage: uv run python benchmarks/batch_throughput.py [--copies 40] [--workers 2] [--before REV] [--repeats 1]
       [--sandbox fallback]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import cpu_seconds
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "6b464c9"  # the last grader with one grading process per submission


def grade_folder(grader: Path, folder: Path, out: Path, workers: int, sandbox: str | None) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds of every process of the grading, and how the CPU was counted (cpu_seconds.py)."""
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "cs_basics.cli", "grade", "--submission", str(folder), "--results", str(out)]
    command += ["--sandbox", sandbox] if sandbox else []
    env = os.environ | {"PYTHONPATH": str(grader)}  # this grader's cs_basics first, on the same environment
    done, wall, cpu, how = cpu_seconds.run(
        [*command, "--workers", str(workers)], cwd=grader, env=env, capture_output=True, text=True
    )
    scores = (out / "scores.csv").read_text().splitlines()[1:] if (out / "scores.csv").is_file() else []
    if done.returncode != 0 or not scores or any(",6.0,6.0" not in line for line in scores):
        raise SystemExit(f"grading with {grader} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return wall, cpu, how


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--before", default=BEFORE, help=f"the earlier grader's commit (default {BEFORE})")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--sandbox", choices=("bubblewrap", "fallback"), default=None, help="default: the grader's")
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
            cpus: dict[str, list[float]] = {args.before: [], "this checkout": []}
            for _ in range(args.repeats):
                for name, grader in ((args.before, before), ("this checkout", ROOT)):
                    wall, cpu, how = grade_folder(grader, folder, tmp / "out", args.workers, args.sandbox)
                    times[name].append(wall)
                    cpus[name].append(cpu)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, capture_output=True)
    cores = len(os.sched_getaffinity(0))
    sandbox = f", --sandbox {args.sandbox}" if args.sandbox else ""
    table = Table(
        title=f"{args.copies} correct submissions, --workers {args.workers}{sandbox}, median of {args.repeats}"
    )
    columns = ("grader", "wall s", "submissions per minute", f"CPU s ({how})", f"CPU-bound per minute, {cores} cores")
    for column in columns:
        table.add_column(column)
    rates, capacities = {}, {}
    for name, values in times.items():
        seconds, cpu = statistics.median(values), statistics.median(cpus[name])
        rates[name], capacities[name] = args.copies / seconds * 60, args.copies / cpu * 60 * cores
        table.add_row(name, f"{seconds:.1f}", f"{rates[name]:.1f}", f"{cpu:.1f}", f"{capacities[name]:.1f}")
    Console().print(table)
    Console().print(
        f"speed-up: {rates['this checkout'] / rates[args.before]:.2f}x in wall time, "
        f"{capacities['this checkout'] / capacities[args.before]:.2f}x in CPU time (less noisy on a busy machine)"
    )


if __name__ == "__main__":
    main()
