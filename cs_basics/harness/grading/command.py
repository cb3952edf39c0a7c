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

from cs_basics.harness.config import Assignment, ConfigError
from cs_basics.harness.device import choose_device
from cs_basics.harness.grading.pipeline.grade import Grade, GradingError, grade
from cs_basics.harness.grading.pipeline.upload import NotGradable, laid_out
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.stopping import STOP, StaffError, stopping_on_signals
from cs_basics.harness.grading.sandbox.worker import Worker
from cs_basics.harness.grading.writers.formats import GRADESCOPE, Output
from cs_basics.harness.grading.writers.results import print_table, printable
from cs_basics.harness.text import safe_terminal


def as_outputs(results: Path | list[Output]) -> list[Output]:
    return [Output(GRADESCOPE, results)] if isinstance(results, Path) else list(results)


def write_placeholders(assignment: Assignment, outputs: list[Output], why: str) -> None:
    for output in outputs:
        output.write(output.writer.write_placeholder(assignment, why))


def grade_safely(
    assignment: Assignment,
    submission: Path,
    results: Path | list[Output],
    device: torch.device,
    limits: Limits,
    **where,
) -> Grade | str:
    """Grade into each output (Gradescope's results file, or the formats asked for; a placeholder first);
    the grade, or why grading could not be trusted."""
    outputs = as_outputs(results)
    write_placeholders(assignment, outputs, "grading did not finish")
    try:
        for output in outputs:
            output.writer.check(assignment)  # the course's settings each writer reads, before any student code runs
        result = grade(assignment, submission, device, limits, **where)
    except (GradingError, ValueError, ConfigError) as err:
        write_placeholders(assignment, outputs, f"grading stopped: {err}")
        return str(err)
    for output in outputs:
        output.write(output.writer.write_grade(result, assignment))
    return result


def not_gradable(assignment: Assignment, outputs: list[Output], err: NotGradable) -> int:
    """A submission with nothing to grade (no file, not Python): each output says so; exit status 1."""
    for output in outputs:
        output.write(output.writer.write_not_gradable(assignment, err.errors))
    for line in err.errors:
        print(printable(f"cs-basics grade: the submission cannot be graded: {line}"), file=sys.stderr)
    return 1


def grade_one(
    assignment: Assignment,
    submission: Path,
    results: Path | list[Output],
    device_name: str | None,
    limits: Limits,
    quiet: bool = False,
    sandbox: str | None = None,
    worker: Worker | None = None,
) -> int:
    """Exit status 0 whenever grading completed, whatever the score; 1 when the submission holds nothing to
    grade; 2 when the staff must act; 128 + the signal when a signal stopped it (the results files hold what
    was graded by then)."""
    outputs = as_outputs(results)
    safe_terminal()  # a character the terminal's encoding lacks is printed as an escape, never a crash
    console = Console(stderr=quiet, width=None if sys.stdout.isatty() else 100)
    with stopping_on_signals() as came:
        try:
            device = choose_device(device_name)
        except ValueError as err:
            result: Grade | str = str(err)
        else:
            try:
                with laid_out(assignment, submission) as folder:
                    result = grade_safely(assignment, folder, outputs, device, limits, sandbox=sandbox, worker=worker)
            except NotGradable as err:
                return not_gradable(assignment, outputs, err)
            except StaffError as err:  # the worker given (started before torch was imported) failed to start
                result = str(err)
    written = ", ".join(str(o.path) for o in outputs)
    if isinstance(result, str):
        write_placeholders(assignment, outputs, f"grading stopped: {result}")
        print(printable(f"cs-basics grade: {result}\nthe results in {written} give 0 points"), file=sys.stderr)
        return 2
    for note in result.notes:
        print(printable(f"cs-basics grade: {note}"), file=sys.stderr)
    for problem in result.held:
        print(
            f"cs-basics grade: {problem} is held for the staff's review (its entries say why): "
            f"read it, then grade again with --release {problem}",
            file=sys.stderr,
        )
    if not quiet:
        print_table(result, console)
    console.print(escape(printable(f"score {result.score:.3g}/{result.max_score:.3g}; results written to {written}")))
    if came or STOP.is_set():
        print(f"cs-basics grade: stopped by {signal.Signals(came[0]).name if came else 'a signal'}", file=sys.stderr)
        return 128 + (came[0] if came else signal.SIGTERM)
    return 0
