"""Benchmark: where the seconds of one grading go (`cs-basics grade` of this checkout, one correct submission).

Runs the grader in this process, as `cs-basics grade` does, with a timer around each of its steps:
importing the grader (torch with it), checking the course's fixtures, the sandbox's start (the uid's
lease, bubblewrap's probe, the grading server: a Python that imports torch), staging, the static
scan (a Python process of its own), the public and the hidden phase (each a child the server forks:
its isolation, the submission's import, the cases), ending the job's processes, the verdicts and
writing results.json. Prints the median of each step over the repeats (wall seconds) and the total.
A step inside another (a phase's processes ended, inside the phase) is indented under it. In this
process the grader has imported torch before the server starts; `cs-basics grade` starts the server
first, so that the two imports overlap (benchmarks/compare.py times the command itself).
Usage: uv run python benchmarks/grading_phases.py [--repeats 3]
"""

from __future__ import annotations

import time

started = time.perf_counter()

import argparse  # noqa: E402 (the imports are the first step timed)
import functools  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

import cs_basics.harness.grading.sandbox.worker as worker  # noqa: E402
from cs_basics.harness.config import Assignment  # noqa: E402
from cs_basics.harness.grading import command  # noqa: E402
from cs_basics.harness.grading.pipeline import grade, runs  # noqa: E402
from cs_basics.harness.grading.sandbox.bubblewrap import bubblewrap_runs, bubblewrap_sizes_tmpfs  # noqa: E402
from cs_basics.harness.grading.sandbox.limits import Limits  # noqa: E402
from cs_basics.harness.grading.sandbox.server import Server  # noqa: E402
from cs_basics.harness.grading.sandbox.worker import Worker  # noqa: E402
from cs_basics.harness.grading.writers import formats  # noqa: E402
from cs_basics.harness.rule import fromscratch  # noqa: E402

IMPORTED = time.perf_counter() - started
ROOT = Path(__file__).resolve().parents[1]

# (module or class, attribute, the step's name); a step timed inside another shows indented under it
STEPS = [
    (grade, "check_course", "check the course's fixtures"),
    (worker, "choose_sandbox", "choose the sandbox (bubblewrap's probe, once a process)"),
    (worker, "lease_uid", "lease a job uid"),
    (Server, "__init__", "start the grading server (not waiting for it)"),
    (Server, "ready", "wait until the server is ready (it imports torch)"),
    (grade, "stage", "stage the submission"),
    (fromscratch, "scan_bounded", "static scan (a fork of the worker's warm scan process)"),
    (grade, "write_inputs", "write the cases' inputs"),
    (Worker, "hand_over", "hand the job's folder over"),
    (runs, "run_phase", "the two phases, public then hidden: a child each, the submission's import, the cases"),
    (Worker, "end_processes", "end the job's processes (by uid)"),
    (runs, "read_outputs", "read the outputs back"),
    (Worker, "clean_up", "clean up the job's folder"),
    (grade, "verdict", "compare (verdicts)"),
    (Worker, "close", "close the worker (its server, its uid)"),
    (formats.Output, "write", "write results.json (a placeholder first)"),
]


def timed(name: str, seconds: dict, inside: list[str], original):
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        inside.append(name)
        path = tuple(inside)
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds[path] += time.perf_counter() - start
            inside.pop()

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    assignment = Assignment.find(ROOT)
    runs: list[dict] = []
    totals = []
    for _ in range(args.repeats):
        seconds: dict = defaultdict(float)
        inside: list[str] = []
        originals = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in STEPS]
        for (owner, attr, original), (_, _, name) in zip(originals, STEPS, strict=True):
            setattr(owner, attr, timed(name, seconds, inside, original))
        bubblewrap_runs.cache_clear()  # as in a fresh `cs-basics grade`
        bubblewrap_sizes_tmpfs.cache_clear()
        try:
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                status = command.grade_one(assignment, ROOT, Path(tmp) / "results.json", "cpu", Limits(), quiet=True)
                totals.append(time.perf_counter() - start)
        finally:
            for owner, attr, original in originals:
                setattr(owner, attr, original)
        if status != 0:
            raise SystemExit(f"grading failed with status {status}")
        runs.append(seconds)
    print(f"import the grader (torch with it), once: {IMPORTED:.2f} s")
    order = [name for _, _, name in STEPS]
    for path in sorted({key for run in runs for key in run}, key=lambda key: [order.index(n) for n in key]):
        median = statistics.median(run.get(path, 0.0) for run in runs)
        print(f"{'  ' * (len(path) - 1)}{path[-1]}: {median:.3f} s")
    print(f"grading, all steps (median of {args.repeats}): {statistics.median(totals):.2f} s")


if __name__ == "__main__":
    main()
