"""`cs-basics grade` for one submission: a valid results file first, the real one at the end."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from cs_basics.harness.config import Assignment
from cs_basics.harness.device import choose_device
from cs_basics.harness.grading import GradingError, grade
from cs_basics.harness.results import placeholder, print_table, results_json, write_results
from cs_basics.harness.sandbox import Limits


def limits_from(args: argparse.Namespace) -> Limits:
    return Limits(case_seconds=args.case_seconds, total_seconds=args.total_seconds, memory_mb=args.memory_mb)


def grade_one(
    assignment: Assignment, submission: Path, results: Path, device_name: str | None, limits: Limits, quiet=False
) -> int:
    """Exit status 0 whenever grading completed, whatever the score; 2 when the staff must act."""
    console = Console(stderr=quiet, width=None if sys.stdout.isatty() else 100)
    write_results(results, placeholder(assignment, "grading did not finish"))
    try:
        device = choose_device(device_name)
        result = grade(assignment, submission, device, limits)
    except (GradingError, ValueError) as err:
        write_results(results, placeholder(assignment, f"grading stopped: {err}"))
        print(f"cs-basics grade: {err}\nthe results file {results} gives 0 points", file=sys.stderr)
        return 2
    write_results(results, results_json(result))
    for note in result.notes:
        print(f"cs-basics grade: {note}", file=sys.stderr)
    if not quiet:
        print_table(result, console)
    console.print(f"score {result.score:.3g}/{result.max_score:.3g}; results written to {results}")
    return 0
