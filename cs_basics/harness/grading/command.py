"""`cs-basics grade` for one submission: a valid results file first, the real one at the end.

A signal to stop (SIGTERM from a platform's time limit or a cluster, SIGINT from Ctrl-C, SIGHUP)
winds grading down instead of killing it: the submission's processes are ended, the cases that
finished keep their points, the others say they were not run, and the results file is written.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape

from cs_basics.harness.config import Assignment
from cs_basics.harness.device import choose_device
from cs_basics.harness.grading.grade import Grade, GradingError, grade
from cs_basics.harness.grading.results import placeholder, print_table, printable, results_json, write_results
from cs_basics.harness.grading.sandbox import STOP, Limits, Worker, request_stop

STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGBREAK") if hasattr(signal, name)
)  # Windows: no SIGHUP, and Ctrl-Break is SIGBREAK


def limits_from(args: argparse.Namespace) -> Limits:
    return Limits(
        case_seconds=args.case_seconds,
        total_seconds=args.total_seconds,
        memory_mb=args.memory_mb,
        tmp_mb=args.tmp_mb,
        timeouts_per_problem=args.timeouts_per_problem,
        released=tuple(getattr(args, "release", None) or ()),
    )


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[list[int]]:
    """While inside: a stop signal asks grading to wind down; yields [the signal's number] once one came."""
    came: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return

    def stop(signum: int, frame: object) -> None:
        came.append(signum)
        request_stop(signal.Signals(signum).name)

    before = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield came
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def grade_safely(
    assignment: Assignment, submission: Path, results: Path, device: torch.device, limits: Limits, **where
) -> Grade | str:
    """Grade into `results` (a placeholder first); the grade, or why grading could not be trusted."""
    write_results(results, placeholder(assignment, "grading did not finish"))
    try:
        result = grade(assignment, submission, device, limits, **where)
    except (GradingError, ValueError) as err:
        write_results(results, placeholder(assignment, f"grading stopped: {err}"))
        return str(err)
    write_results(results, results_json(result))
    return result


def grade_one(
    assignment: Assignment,
    submission: Path,
    results: Path,
    device_name: str | None,
    limits: Limits,
    quiet: bool = False,
    sandbox: str | None = None,
    worker: Worker | None = None,
) -> int:
    """Exit status 0 whenever grading completed, whatever the score; 2 when the staff must act;
    128 + the signal when a signal stopped it (the results file holds what was graded by then)."""
    console = Console(stderr=quiet, width=None if sys.stdout.isatty() else 100)
    with stopping_on_signals() as came:
        try:
            device = choose_device(device_name)
        except ValueError as err:
            result: Grade | str = str(err)
        else:
            result = grade_safely(assignment, submission, results, device, limits, sandbox=sandbox, worker=worker)
    if isinstance(result, str):
        write_results(results, placeholder(assignment, f"grading stopped: {result}"))
        print(printable(f"cs-basics grade: {result}\nthe results file {results} gives 0 points"), file=sys.stderr)
        return 2
    for note in result.notes:
        print(printable(f"cs-basics grade: {note}"), file=sys.stderr)
    for problem in result.held:
        print(
            f"cs-basics grade: {problem} is held for the staff's review (its code reaches into the interpreter): "
            f"read it, then grade again with --release {problem}",
            file=sys.stderr,
        )
    if not quiet:
        print_table(result, console)
    console.print(escape(printable(f"score {result.score:.3g}/{result.max_score:.3g}; results written to {results}")))
    if came or STOP.is_set():
        print(f"cs-basics grade: stopped by {signal.Signals(came[0]).name if came else 'a signal'}", file=sys.stderr)
        return 128 + (came[0] if came else signal.SIGTERM)
    return 0
