"""Grade a folder of submissions in one grading process, several at a time, plus a CSV.

Each of `--workers` threads keeps one grading server (which imports torch once) and a uid of its
own, and grades one submission after another in it: each submission still gets its own child
process, namespaces and limits, and nothing of the one before it is left when it starts. For a
course too large for one machine, `--shard I/N` grades a slice and `cs-basics merge` joins them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import threading
from pathlib import Path
from threading import Lock

import torch
from rich.markup import escape
from rich.progress import Progress

from cs_basics.harness.config import Assignment
from cs_basics.harness.course.regrade import Planned, plan, settings_of, stamp
from cs_basics.harness.course.report import (
    SCORES,
    analyse,
    print_analysis,
    read_or_none,
    score_row,
    warm_figures,
    write_scores,
)
from cs_basics.harness.course.shards import resolve_shard, select, submission_folders
from cs_basics.harness.device import choose_device
from cs_basics.harness.grading.command import grade_safely, stopping_on_signals
from cs_basics.harness.grading.pipeline.upload import NotGradable, laid_out, written_files
from cs_basics.harness.grading.sandbox.folderlock import held_work_folder
from cs_basics.harness.grading.sandbox.litter import remove_tree
from cs_basics.harness.grading.sandbox.stopping import STOP, StaffError
from cs_basics.harness.grading.sandbox.worker import Overlays, Worker
from cs_basics.harness.grading.settings import GradeSettings
from cs_basics.harness.grading.writers.results import printable, write_results


def has_student_code(assignment: Assignment, folder: Path, uploaded: list[Path] | None = None) -> bool:
    """The student code laid out as in the course, or uploaded bare (a file the student writes, by its name,
    as Gradescope's export of a course's submissions holds them)."""
    uploaded = written_files(assignment) if uploaded is None else uploaded
    return any((folder / rel).exists() for rel in assignment.student_code) or any(
        (folder / rel.name).is_file() for rel in uploaded
    )


def is_batch(assignment: Assignment, folder: Path) -> bool:
    """A folder of submissions: no student code of its own, but subfolders that have some."""
    uploaded = written_files(assignment)
    if not folder.is_dir() or has_student_code(assignment, folder, uploaded):
        return False
    return any(sub.is_dir() and has_student_code(assignment, sub, uploaded) for sub in folder.iterdir())


def grade_planned(assignment: Assignment, planned: Planned, device: torch.device, worker: Worker) -> dict:
    """Grade one submission of the batch; its results file carries the fingerprint once grading completed."""
    try:
        with laid_out(assignment, planned.submission) as folder:  # bare uploads, as one submission's are
            result = grade_safely(assignment, folder, planned.results, device, worker.limits, worker=worker)
    except NotGradable as err:
        result = f"not gradable: {err}"
    except StaffError as err:  # the grading server failed under it: its file says so, not a bare placeholder 0
        not_graded(planned, f"not graded: {err}")
        raise
    error = result if isinstance(result, str) else "grading was stopped" if STOP.is_set() else ""
    data = stamp(read_or_none(planned.results) or {}, None if error else planned.fingerprint, error)
    write_results(planned.results, data)
    return score_row(planned.submission.name, data)


def not_graded(planned: Planned, why: str) -> dict:
    data = stamp(read_or_none(planned.results) or {"score": 0.0, "tests": []}, None, why)
    write_results(planned.results, data)
    return score_row(planned.submission.name, data)


def grade_many(
    assignment: Assignment, folder: Path, results_dir: Path, settings: GradeSettings, started: Worker | None = None
) -> int:
    """Grade a folder of submissions with `settings.workers` workers; `started`, one already started, is the first."""
    problems = assignment.fixture_problems()
    if problems:  # every grade would stop on it: the staff must act first
        print("cs-basics grade: the course's fixtures fail their checks:\n" + "\n".join(problems), file=sys.stderr)
        return 2
    submissions = submission_folders(folder)
    shard = resolve_shard(settings.shard, os.environ)
    planned = plan(assignment, select(submissions, shard), results_dir, settings_of(settings), settings.force)
    results_dir.mkdir(parents=True, exist_ok=True)
    workers = settings.default_workers()
    todo, skipped = [p for p in planned if not p.skip], [p for p in planned if p.skip]
    rows = [score_row(p.submission.name, read_or_none(p.results) or {}) for p in skipped]
    what = f"{len(planned)} submissions" + (f" (shard {shard} of {folder})" if shard else "")
    limits = dataclasses.replace(settings.limits(workers), threads=max(1, len(os.sched_getaffinity(0)) // workers))
    device, queue, lock, failures, warming = choose_device(settings.device), list(todo), Lock(), [], Lock()
    # the course's overlays, made once for all workers, in a work folder of the batch's own (locked, as a worker's)
    overlays_root, overlays_lock = held_work_folder(remove_tree)
    overlays = Overlays(overlays_root)
    figures = shard is None or shard.count == 1  # a slice's figures are drawn by `cs-basics merge`, of the course whole
    own = contextlib.ExitStack()  # the batch's first worker, where it is made here (not `started`)

    def take() -> Planned | None:
        with lock:
            return queue.pop(0) if queue and not STOP.is_set() and not failures else None

    def work(first: Worker, own_worker: bool) -> None:
        """Grade submissions until none is left: in the batch's `first` worker (closed once every other is done),
        or in a worker of its own beside it, whose server is a copy of the first's template (Worker.share)."""
        try:
            with (
                Worker(settings.sandbox, limits, beside=first)
                if own_worker
                else contextlib.nullcontext(first) as worker
            ):
                worker.limits = limits  # a started worker's too: its job's share of the cores
                worker.hide.append(str(folder))  # no submission sees the others
                worker.overlays = overlays
                while (planned := take()) is not None:
                    rows.append(grade_planned(assignment, planned, device, worker))
                    progress.advance(task)
        except (StaffError, ValueError) as err:  # no grading server: nothing can be graded fairly
            failures.append(str(err))
        if figures and warming.acquire(blocking=False) and not failures and not STOP.is_set():
            with contextlib.suppress(Exception):  # the analysis at the end says what failed, in its own words
                warm_figures()  # the first worker out of submissions, while the others grade their last ones

    try:
        with stopping_on_signals() as came, Progress() as progress:
            doing = escape(printable(f"grading {what} ({len(skipped)} unchanged: skipped)"))
            task = progress.add_task(doing, total=len(planned))
            progress.advance(task, len(skipped))
            first = started
            if todo and first is None:
                try:
                    first = own.enter_context(Worker(settings.sandbox, limits).start())
                except (StaffError, ValueError) as err:  # no grading server: nothing can be graded fairly
                    failures.append(str(err))
            if first is not None:
                first.share()  # every worker's server a copy of the first's: one import of torch a batch
            count = min(workers, len(todo)) if first is not None else 0
            threads = [threading.Thread(target=work, args=(first, i > 0)) for i in range(count)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        own.close()  # the first worker, when it was made here: once every other is done
        remove_tree(overlays.root)  # once every worker is done with it
        if overlays_lock is not None:
            os.close(overlays_lock)
    why = f"not graded: {failures[0]}" if failures else "not graded: grading was stopped"
    rows += [not_graded(p, why) for p in queue]
    write_scores(results_dir / SCORES, rows)
    summary = f"{what}: {len(todo)} graded, {len(skipped)} unchanged since their last grade (skipped; --force)"
    read = {p.submission.name: read_or_none(p.results) for p in planned}  # one student's file stops no analysis
    results = {name: data for name, data in read.items() if data is not None}
    print_analysis(analyse(results, results_dir, figures), caption=summary)
    print(printable(f"{summary}; scores in {results_dir / SCORES}"))
    held = sorted(f"{r['submission']} ({r['held']})" for r in rows if r.get("held"))
    if held:  # zero until the staff read the code and grade it again with --release PROBLEM
        print(printable(f"held for the staff's review (scores.csv's `held` column): {', '.join(held)}"))
    if failures:
        print(printable(f"cs-basics grade: {failures[0]}"), file=sys.stderr)
        return 2
    return 128 + (came[0] if came else signal.SIGTERM) if STOP.is_set() else 0
