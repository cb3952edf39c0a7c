"""Benchmark: what the run-time record of operators (the from-scratch rule) costs.

Runs, alternately and warm, `uv run pytest -m points` and `uv run cs-basics grade` of this checkout
(a correct submission), each with the record on and with it off (CS_BASICS_RECORD_OPS=0, which
exists only for this measurement), and prints the medians and the ratios on/off.
Usage: uv run python benchmarks/record_overhead.py [--repeats N]
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
RECORD_ENV = "CS_BASICS_RECORD_OPS"


def seconds(command: list[str], record: bool) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {RECORD_ENV: str(int(record))}
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        commands = {
            "uv run pytest -m points": ["uv", "run", "pytest", "-q", "-m", "points"],
            "uv run cs-basics grade": ["uv", "run", "cs-basics", "grade", "--quiet", "--results", f"{tmp}/r.json"],
        }
        runs = [(name, record) for name in commands for record in (True, False)]
        times: dict[tuple[str, bool], list[float]] = {run: [] for run in runs}
        for name, record in runs:  # warm the caches once
            seconds(commands[name], record)
        for _ in range(args.repeats):
            for name, record in runs:
                times[name, record].append(seconds(commands[name], record))
    table = Table(title=f"warm wall time, median of {args.repeats} alternating runs")
    for column in ("command", "record on s", "record off s", "on / off"):
        table.add_column(column)
    for name in commands:
        on, off = (statistics.median(times[name, record]) for record in (True, False))
        table.add_row(name, f"{on:.2f}", f"{off:.2f}", f"{on / off:.3f}")
    Console().print(table)


if __name__ == "__main__":
    main()
