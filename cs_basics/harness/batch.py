"""Grade a folder of submissions: one grading process each, several at a time, plus a CSV.

Each submission gets its own `cs-basics grade` process (its own child, uid, limits and
results file), so one submission can neither slow nor touch another's grading beyond
sharing the machine. For a whole course the autograder bundle scales out instead:
Gradescope runs each submission in its own container.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from rich.progress import Progress

from cs_basics.harness.config import Assignment
from cs_basics.harness.regrade import Planned, plan, read_results, settings_of, stamp
from cs_basics.harness.report import SCORES, analyse, print_analysis, score_row, write_scores
from cs_basics.harness.results import write_results
from cs_basics.harness.shards import resolve_shard, select


def has_student_code(assignment: Assignment, folder: Path) -> bool:
    return any((folder / rel).exists() for rel in assignment.student_code)


def is_batch(assignment: Assignment, folder: Path) -> bool:
    """A folder of submissions: no student code of its own, but subfolders that have some."""
    if has_student_code(assignment, folder) or not folder.is_dir():
        return False
    return any(sub.is_dir() and has_student_code(assignment, sub) for sub in folder.iterdir())


def grade_command(assignment: Assignment, submission: Path, results: Path, args: argparse.Namespace) -> list[str]:
    command = [sys.executable, "-m", "cs_basics.cli", "grade", "--quiet", "--project", str(assignment.root)]
    command += ["--submission", str(submission), "--results", str(results)]
    command += ["--case-seconds", str(args.case_seconds), "--total-seconds", str(args.total_seconds)]
    command += ["--memory-mb", str(args.memory_mb)] + (["--device", args.device] if args.device else [])
    return command


def grade_in_process(assignment: Assignment, planned: Planned, args: argparse.Namespace) -> dict:
    submission, results = planned.submission, planned.results
    command = grade_command(assignment, submission, results, args)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.total_seconds + 300)
        error = done.stderr.strip().splitlines()[-1:] if done.returncode else []
        completed = done.returncode == 0
    except subprocess.TimeoutExpired:
        error, completed = ["the grading process did not finish"], False
    data = stamp(json.loads(results.read_text()), planned.fingerprint if completed else None, " ".join(error))
    write_results(results, data)
    return score_row(submission.name, data)


def grade_many(assignment: Assignment, folder: Path, results_dir: Path, args: argparse.Namespace) -> int:
    submissions = sorted(d for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    shard = resolve_shard(args.shard, os.environ)
    planned = plan(assignment, select(submissions, shard), results_dir, settings_of(args), args.force)
    results_dir.mkdir(parents=True, exist_ok=True)
    workers = args.workers or max(1, (os.cpu_count() or 2) // 2)
    todo, skipped = [p for p in planned if not p.skip], [p for p in planned if p.skip]
    rows = [score_row(p.submission.name, read_results(p.results)) for p in skipped]
    what = f"{len(planned)} submissions" + (f" (shard {shard} of {folder})" if shard else "")
    with Progress() as progress, ThreadPoolExecutor(workers) as pool:
        task = progress.add_task(f"grading {what} ({len(skipped)} unchanged: skipped)", total=len(planned))
        progress.advance(task, len(skipped))
        futures = [pool.submit(grade_in_process, assignment, p, args) for p in todo]
        for future in as_completed(futures):
            rows.append(future.result())
            progress.advance(task)
    write_scores(results_dir / SCORES, rows)
    summary = f"{what}: {len(todo)} graded, {len(skipped)} unchanged since their last grade (skipped; --force)"
    results = {p.submission.name: read_results(p.results) for p in planned}
    print_analysis(analyse(results, results_dir), caption=summary)
    print(f"{summary}; scores in {results_dir / SCORES}")
    return 0
