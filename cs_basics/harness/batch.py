"""Grade a folder of submissions: one grading process each, several at a time, plus a CSV.

Each submission gets its own `cs-basics grade` process (its own child, uid, limits and
results file), so one submission can neither slow nor touch another's grading beyond
sharing the machine. For a whole course the autograder bundle scales out instead:
Gradescope runs each submission in its own container.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from rich.progress import Progress

from cs_basics.harness.config import Assignment
from cs_basics.harness.results import write_atomic

SCORES = "scores.csv"


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


def grade_in_process(assignment: Assignment, submission: Path, results: Path, args: argparse.Namespace) -> dict:
    command = grade_command(assignment, submission, results, args)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.total_seconds + 300)
        error = done.stderr.strip().splitlines()[-1:] if done.returncode else []
    except subprocess.TimeoutExpired:
        error = ["the grading process did not finish"]
    data = json.loads(results.read_text())
    most = round(sum(t["max_score"] for t in data["tests"]), 3)
    return {"submission": submission.name, "score": data["score"], "max_score": most, "error": " ".join(error)}


def grade_many(assignment: Assignment, folder: Path, results_dir: Path, args: argparse.Namespace) -> int:
    submissions = sorted(d for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    results_dir.mkdir(parents=True, exist_ok=True)
    workers = args.workers or max(1, (os.cpu_count() or 2) // 2)
    rows = []
    with Progress() as progress, ThreadPoolExecutor(workers) as pool:
        task = progress.add_task(f"grading {len(submissions)} submissions", total=len(submissions))
        futures = [
            pool.submit(grade_in_process, assignment, s, results_dir / f"{s.name}.json", args) for s in submissions
        ]
        for future in as_completed(futures):
            rows.append(future.result())
            progress.advance(task)
    rows.sort(key=lambda r: r["submission"])
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=["submission", "score", "max_score", "error"])
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(results_dir / SCORES, text.getvalue())
    print(f"graded {len(rows)} submissions; scores in {results_dir / SCORES}")
    return 0
