"""Benchmark: where the seconds of one grading, or of a batch, go (`cs-basics grade`, correct submissions).

Runs the grader in this process, as `cs-basics grade` does, with a timer around each of its steps:
importing the grader (torch with it), checking the course's fixtures, the sandbox's start (the uid's
lease, bubblewrap's probe, the grading server: a Python that imports torch), staging, the static
scan (a Python process of its own), the public and the hidden phase (each a child the server forks:
its isolation, the submission's import, the cases), ending the job's processes, the verdicts and
writing results.json. Prints the median of each step over the repeats (wall seconds) and the total.
A step inside another (a phase's processes ended, inside the phase) is indented under it. In this
process the grader has imported torch before the server starts; `cs-basics grade` starts the server
first, so that the two imports overlap (benchmarks/compare.py times the command itself).
With `--copies N`: a batch of N copies of this checkout's `cs_basics` graded by `cs-basics grade --submission
FOLDER --workers W` (in this process, as the command drives its workers), each step summed over the workers'
threads and shown per submission and per course; a phase is split into its child's fork and isolation (until
it says it is armed), the submission's import (until it says it is ready) and its cases (until it says it
finished), then its end. `--sandbox fallback` grades in the fallback sandbox.
Usage: uv run python benchmarks/grading_phases.py [--repeats 3] [--copies 16 --workers 2 [--sandbox fallback]]
"""

from __future__ import annotations

import time

started = time.perf_counter()

import argparse  # noqa: E402 (the imports are the first step timed)
import contextlib  # noqa: E402
import functools  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from collections import defaultdict  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import cpu_seconds  # noqa: E402

import cs_basics.harness.grading.sandbox.worker as worker  # noqa: E402
from cs_basics import cli  # noqa: E402
from cs_basics.harness.config import Assignment  # noqa: E402
from cs_basics.harness.course import batch, regrade  # noqa: E402
from cs_basics.harness.grading import command  # noqa: E402
from cs_basics.harness.grading.pipeline import grade, runs, staging  # noqa: E402
from cs_basics.harness.grading.sandbox import attempts  # noqa: E402
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
    (regrade, "plan", "plan the batch (fingerprints of the course and of each submission)"),
    (batch, "grade_planned", "grade one submission of the batch (all of it)"),
    (grade, "check_course", "check the course's fixtures"),
    (worker, "choose_sandbox", "choose the sandbox (bubblewrap's probe, once a process)"),
    (worker, "lease_uid", "lease a job uid"),
    (worker, "make_job_cgroup", "make the worker's job cgroup"),
    (Server, "__init__", "start the grading server (not waiting for it)"),
    (Server, "ready", "wait until the server is ready (it imports torch)"),
    (batch, "grade_safely", "grade into the results file (placeholder, grade, write)"),
    (grade, "stage", "stage the submission"),
    (staging.Overlay, "make", "make the worker's overlay (once a worker)"),
    (fromscratch, "scan_bounded", "static scan (a fork of the worker's warm scan process)"),
    (grade, "write_inputs", "write the cases' inputs"),
    (Worker, "hand_over", "hand the job's folder over"),
    (runs, "run_phase", "the two phases, public then hidden: a child each, the submission's import, the cases"),
    (attempts.Attempt, "end", "the child's end (its grace, the server's word)"),
    (Worker, "end_processes", "end the job's processes (by uid)"),
    (worker, "kill_uid", "kill_uid (look at /proc, signal, wait)"),
    (Worker, "after_kill", "after the kill: reap orphans, remove System V IPC"),
    (runs, "read_outputs", "read the outputs back"),
    (grade, "stage_hidden", "stage the hidden phase's folder"),
    (Worker, "clean_up", "clean up the job's folder"),
    (worker, "remove_litter", "remove litter (the shared temporary folders)"),
    (grade, "verdict", "compare (verdicts)"),
    (Worker, "close", "close the worker (its server, its uid)"),
    (formats.Output, "write", "write results.json (a placeholder first)"),
    (batch, "write_results", "write the batch's results file (stamped)"),
    (batch, "write_scores", "write scores.csv"),
    (batch, "analyse", "analyse the course (figures)"),
    (batch, "print_analysis", "print the analysis"),
    (batch, "warm_figures", "warm the figures (the first worker done)"),
]
# a phase's child, split by what it says on its progress channel (Attempt.events): each event ends the span before
EVENT_SPANS = {"armed": "fork and isolate the child", "ready": "import the submission", "finished": "the cases"}


class Timer:
    """Seconds and calls of each step, by its path of steps (one stack of steps per thread: a batch's workers)."""

    def __init__(self) -> None:
        self.seconds: dict = defaultdict(float)
        self.calls: dict = defaultdict(int)
        self.lock = threading.Lock()
        self.local = threading.local()

    def stack(self) -> list[str]:
        if not hasattr(self.local, "stack"):
            self.local.stack = []
        return self.local.stack

    def add(self, path: tuple, seconds: float) -> None:
        with self.lock:
            self.seconds[path] += seconds
            self.calls[path] += 1

    def timed(self, name: str, original):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            inside = self.stack()
            if name.startswith("the two phases") and len(args) > 3:  # run_phase(worker, job, cases, state)
                label = "hidden phase" if args[3].hidden else "public phase"
            else:
                label = name
            inside.append(label)
            path, start = tuple(inside), time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.add(path, time.perf_counter() - start)
                inside.pop()

        return wrapper

    def events(self, original):
        """Attempt.events, timing the spans between the child's start and the events of EVENT_SPANS."""

        @functools.wraps(original)
        def wrapper(attempt, *args, **kwargs):
            mark = getattr(attempt, "_timer_started", time.perf_counter())
            for event in original(attempt, *args, **kwargs):
                kind = event.get("event") if isinstance(event, dict) else None
                if kind in EVENT_SPANS:
                    now = time.perf_counter()
                    self.add((*self.stack(), EVENT_SPANS[kind]), now - mark)
                    mark = now
                yield event

        return wrapper

    def patched(self) -> list:
        originals = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in STEPS]
        for (owner, attr, original), (_, _, name) in zip(originals, STEPS, strict=True):
            setattr(owner, attr, self.timed(name, original))
        originals.append((attempts.Attempt, "events", attempts.Attempt.events))
        attempts.Attempt.events = self.events(attempts.Attempt.events)
        init = attempts.Attempt.__init__
        originals.append((attempts.Attempt, "__init__", init))

        def started(attempt, *args, **kwargs):
            attempt._timer_started = time.perf_counter()
            init(attempt, *args, **kwargs)

        attempts.Attempt.__init__ = started
        return originals


def order_key(path: tuple) -> list[float]:
    """Steps in the order of STEPS; a phase where run_phase is, the public one first; the spans of a child in order."""
    order = [name for _, _, name in STEPS]
    phases = order.index(next(n for n in order if n.startswith("the two phases")))
    places = {"public phase": phases, "hidden phase": phases + 0.5}
    places |= {span: -1 + i / 10 for i, span in enumerate(EVENT_SPANS.values())}
    return [order.index(n) if n in order else places.get(n, 99) for n in path]


def one_grading(args: argparse.Namespace) -> None:
    assignment = Assignment.find(ROOT)
    runs: list[dict] = []
    totals = []
    for _ in range(args.repeats):
        timer = Timer()
        originals = timer.patched()
        bubblewrap_runs.cache_clear()  # as in a fresh `cs-basics grade`
        bubblewrap_sizes_tmpfs.cache_clear()
        try:
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                status = command.grade_one(
                    assignment, ROOT, Path(tmp) / "results.json", "cpu", Limits(), quiet=True, sandbox=args.sandbox
                )
                totals.append(time.perf_counter() - start)
        finally:
            for owner, attr, original in originals:
                setattr(owner, attr, original)
        if status != 0:
            raise SystemExit(f"grading failed with status {status}")
        runs.append(timer.seconds)
    print(f"import the grader (torch with it), once: {IMPORTED:.2f} s")
    for path in sorted({key for run in runs for key in run}, key=order_key):
        median = statistics.median(run.get(path, 0.0) for run in runs)
        print(f"{'  ' * (len(path) - 1)}{path[-1]}: {median:.3f} s")
    print(f"grading, all steps (median of {args.repeats}): {statistics.median(totals):.2f} s")


@contextlib.contextmanager
def counted_cpu() -> Iterator[Callable[[], tuple[float, float]]]:
    """This process moved into a cgroup of its own for the while (where it may make one: cpu_seconds.py), so that
    what its children use is counted, those killed unreaped (bubblewrap's) too; yields a function: the CPU seconds
    so far of this process, and of its children (where no cgroup could be made: those it reaped)."""
    root, own = cpu_seconds._cgroup_root(), resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    was = Path("/proc/self/cgroup").read_text().strip().splitlines()[-1].partition("::")[2]
    group = root / f"cs-basics-phases-{os.getpid()}" if root and was else None
    if group is not None:
        group.mkdir()
        (group / "cgroup.procs").write_text(str(os.getpid()))

    def seconds() -> tuple[float, float]:
        now = resource.getrusage(resource.RUSAGE_SELF)
        mine = now.ru_utime + now.ru_stime - own.ru_utime - own.ru_stime
        if group is not None:
            return mine, cpu_seconds._usage(group) - mine
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return mine, after.ru_utime + after.ru_stime - reaped.ru_utime - reaped.ru_stime

    try:
        yield seconds
    finally:
        if group is not None:
            (root / was.lstrip("/") / "cgroup.procs").write_text(str(os.getpid()))
            cpu_seconds.remove_cgroup(group)


def a_batch(args: argparse.Namespace) -> None:
    """N copies of this checkout's student code graded as a folder with W workers; each step's seconds summed over
    the workers, per submission (divided by N, where it runs per submission) and per course."""
    timer = Timer()
    with tempfile.TemporaryDirectory(prefix="cs-basics-phases-") as tmp:
        folder = Path(tmp) / "submissions"
        for i in range(args.copies):
            shutil.copytree(
                ROOT / "cs_basics", folder / f"s{i:03d}" / "cs_basics", ignore=shutil.ignore_patterns("__pycache__")
            )
        out = Path(tmp) / "out"
        argv = ["grade", "--project", str(ROOT), "--submission", str(folder), "--results", str(out)]
        argv += ["--workers", str(args.workers), "--device", "cpu"]
        argv += ["--sandbox", args.sandbox] if args.sandbox else []
        originals = timer.patched()
        try:
            with counted_cpu() as seconds:
                start = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as said:
                    status = cli.main(argv)
                wall = time.perf_counter() - start
                cpu = seconds()
        finally:
            for owner, attr, original in originals:
                setattr(owner, attr, original)
        scores = (out / "scores.csv").read_text().splitlines()[1:] if (out / "scores.csv").is_file() else []
    if status != 0 or len(scores) != args.copies or any(",6.0,6.0" not in line for line in scores):
        raise SystemExit(f"grading failed with status {status}: {scores}\n{said.getvalue()[-3000:]}")
    n = args.copies
    print(f"{n} copies, --workers {args.workers}, sandbox {args.sandbox or 'default'}; seconds summed over the workers")
    print(f"import the grader (torch with it), once: {IMPORTED:.2f} s")
    print(f"{'step':<100} {'calls':>6} {'per submission':>15} {'per course':>11}")
    for path in sorted(timer.seconds, key=order_key):
        name = f"{'  ' * (len(path) - 1)}{path[-1]}"
        seconds, calls = timer.seconds[path], timer.calls[path]
        each = f"{seconds / n:.3f}" if calls >= n else ""
        print(f"{name[:100]:<100} {calls:>6} {each:>15} {seconds:>11.3f}")
    print(f"the batch's wall time, in this process (the grader imported): {wall:.2f} s, {n / wall * 60:.1f} a minute")
    print(
        f"CPU seconds: the grader's process {cpu[0]:.1f} ({cpu[0] / n:.3f} a submission), its children (servers, "
        f"their jobs, scans) {cpu[1]:.1f} ({cpu[1] / n:.3f} a submission)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--copies", type=int, default=0, help="time a batch of this many copies (0: one grading)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sandbox", choices=("bubblewrap", "fallback"), default=None)
    args = parser.parse_args()
    a_batch(args) if args.copies else one_grading(args)


if __name__ == "__main__":
    main()
