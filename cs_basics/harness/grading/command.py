"""`cs-basics grade` for one submission: a valid results file first, the real one at the end.

A signal to stop (SIGTERM from a platform's time limit or a cluster, SIGINT from Ctrl-C, SIGHUP)
winds grading down instead of killing it: the submission's processes are ended, the cases that
finished keep their points, the others say they were not run, and the results file is written.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape

from cs_basics.harness.config import Assignment
from cs_basics.harness.device import choose_device
from cs_basics.harness.grading.grade import Grade, GradingError, grade
from cs_basics.harness.grading.limits import limits_from as limits_from  # the command line's, for the course's tools
from cs_basics.harness.grading.results import placeholder, print_table, printable, results_json, write_results
from cs_basics.harness.grading.sandbox import STOP, Limits, StaffError, Worker, stopping_on_signals


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
            try:
                result = grade_safely(assignment, submission, results, device, limits, sandbox=sandbox, worker=worker)
            except StaffError as err:  # the worker given (started before torch was imported) failed to start
                result = str(err)
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
