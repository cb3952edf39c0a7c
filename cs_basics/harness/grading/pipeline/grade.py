"""Grade one submission: stage it, run its code in a child, check every case here, score.

The grading process never imports student code: it reads the submission's files (to stage
them and to apply the from-scratch rule to their syntax trees), hands the child only each
case's inputs, and compares what comes back with expected values the child cannot read.
Hidden cases' inputs are handed over only after every public case ran (runs.run_cases), and
nothing a hidden case printed, raised or computed reaches an entry students see (writers/results.py).
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from cs_basics.harness.cases import Case, run_check
from cs_basics.harness.config import Assignment, ConfigError
from cs_basics.harness.diagnosis import explain_crash
from cs_basics.harness.grading.pipeline.runs import CaseRun, run_cases
from cs_basics.harness.grading.pipeline.staging import PACKAGE as PACKAGE  # regrade's import
from cs_basics.harness.grading.pipeline.staging import Overlay, case_modules
from cs_basics.harness.grading.pipeline.staging import module_package as module_package  # regrade's import
from cs_basics.harness.grading.pipeline.staging import stage as stage  # the tests' import
from cs_basics.harness.grading.pipeline.staging import take as take  # regrade's import
from cs_basics.harness.grading.sandbox.bubblewrap import python_paths
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.stopping import StaffError
from cs_basics.harness.grading.sandbox.worker import Worker, named_libraries
from cs_basics.harness.portable import scan_notes
from cs_basics.harness.rule.fromscratch import HELD, FromScratch, excluded_code, is_held, runtime_breach
from cs_basics.harness.rule.fromscratch import student_files as student_files  # the handout's import
from cs_basics.harness.rule.glue import GLUE
from cs_basics.harness.rule.record import recording
from cs_basics.harness.rule.scanprocess import Scanner
from cs_basics.harness.rule.syntax import Unreadable
from cs_basics.harness.rule.tooling import TOOLING_PACKAGES
from cs_basics.harness.text import printable

HIDDEN_BREACH = (  # a public case's entry, when a hidden case broke the rule: that case's entry says how
    "0 points for {problem}: it must be written from scratch, but a hidden case ran what the rule forbids; "
    "that case's entry says which operator and where, once its results are shown"
)
HIDDEN_HOLD = (  # ... when library code computed part of a hidden case's answer (rule/library.py)
    f"0 points for {{problem}} for now, {HELD}: a hidden case ran library code that computed part of its answer; "
    "that case's entry says which function and where, once its results are shown"
)


class GradingError(Exception):
    """Grading cannot be trusted (altered fixtures, a broken course set-up): the staff must act."""


class Ungradable(Exception):
    """The submission's code cannot be graded at all (a file over the size limit, code too deep to read):
    every problem gets 0 with this message. A verdict, not the staff's concern."""

    def __init__(self, why: str, notes: list[str]):
        super().__init__(f"your code could not be graded: {why}")
        self.notes = notes


@dataclass
class TestResult:
    case: Case
    max_score: float
    passed: bool
    output: str
    seconds: float = 0.0
    printed: str = ""  # a hidden case's: what the code printed while it ran (for the staff's API, in no file)

    def __post_init__(self):  # what the submission printed and raised enters the grade made safe for every reader
        self.output, self.printed = printable(self.output), printable(self.printed)

    @property
    def message(self) -> str:
        """The entry's text: the verdict, and where a hidden case printed something, that it is kept from every
        reader. What the code printed while a hidden case ran could hold the hidden inputs, or any file the job
        could read; an entry students see once grades are published must not carry it."""
        if not self.printed.strip():
            return self.output
        return f"{self.output}\n\n{PRINTED_KEPT}"

    @property
    def score(self) -> float:
        return self.max_score if self.passed else 0.0


PRINTED_KEPT = (
    "What the code printed while this hidden case ran is kept from every file: it could hold the hidden inputs."
)


@dataclass
class Grade:
    tests: list[TestResult]
    execution_time: float
    output: str = ""
    notes: list[str] = field(default_factory=list)
    sandbox: dict = field(default_factory=dict)  # which sandbox graded it (Worker.summary)
    hidden_visibility: str = "after_published"  # the course's visibility of hidden cases' entries
    held: list[str] = field(default_factory=list)  # problems held for the staff's review (code that reaches in)

    def __post_init__(self):  # what the code printed, and notes that name the submission's files
        self.output, self.notes = printable(self.output), [printable(note) for note in self.notes]

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tests)

    @property
    def max_score(self) -> float:
        return sum(t.max_score for t in self.tests)


def overlay_for(assignment: Assignment, worker: Worker) -> Overlay:
    """The course's overlay, made at the first job of the worker (or of the batch, whose workers share it): linked
    into each job's code only where this worker's jobs run as a uid of their own (see Overlay)."""
    link = worker.uid is not None
    made = worker.overlays.get(assignment.root, lambda folder: Overlay.make(assignment, folder, link=link))
    return made if made.link == link or not made.link else dataclasses.replace(made, link=False)


def protect_hidden(assignment: Assignment, worker: Worker) -> str | None:
    """Without namespaces the job's uid sees the repository: as root, make the hidden folder unreadable to
    it (git keeps no folder modes). With them, the job's view of the machine has no repository at all."""
    folder = assignment.hidden_dir
    if folder is None or worker.uid is None or worker.isolated or not folder.stat().st_mode & 0o077:
        return None
    folder.chmod(0o700)
    return f"made {folder} private (mode 700) so the submission cannot read the hidden expected values"


def job_settings(assignment: Assignment, folder: Path, device: torch.device, worker: Worker) -> dict:
    """What the server and the child need to run a submission's cases: all of it inside the job's folder."""
    limits = worker.limits
    return {
        "dir": str(folder),
        "uid": worker.uid,
        "namespaces": worker.isolated,
        "landlock": worker.landlock,
        "cgroup_kills_all": worker.cgroup_kills_all(),
        "limits": {
            "memory_mb": limits.memory_mb,
            "file_mb": limits.file_mb,
            "tmp_mb": limits.tmp_mb,
            "processes": limits.processes,
            "threads": limits.threads,
        },
        "python": python_paths(),
        "hide": [str(assignment.root), *worker.hide],
        "repo": str(assignment.root),
        "adapters": assignment.adapters_module,
        "case_modules": case_modules(assignment, hidden=False),
        "grader_packages": TOOLING_PACKAGES,
        "student_packages": sorted({Path(p).parts[0].removesuffix(".py") for p in assignment.student_code}),
        "device": str(device),
        "rule": {
            "forbidden_ops": {name: list(p.forbidden_ops) for name, p in assignment.problems.items()},
            "student_code": [*assignment.student_code, assignment.adapters_module.replace(".", "/") + ".py"],
            "excluded": excluded_code(assignment),
            "record": recording(),
            "glue": [*GLUE, *assignment.library_glue],
        },
    }


def run_submission(assignment: Assignment, submission: Path, cases: list[Case], device: torch.device, worker: Worker):
    """Stage, scan and run; return (the child's runs by case id, the static breaches by problem, the child's
    output, notes)."""
    notes = [
        worker.describe(),
        *worker.skipped(),
        *worker.limits.notes,
        *scan_notes(),
        *[n for n in [protect_hidden(assignment, worker)] if n],
    ]
    folder = worker.new_job_dir()
    try:
        taken = stage(assignment, submission, folder / "code", overlay_for(assignment, worker))
        notes += taken.notes
        if taken.refused:
            raise Ungradable(taken.refused, notes)
        released = frozenset(worker.limits.released)
        found = static_breaches(assignment, folder / "code", notes, released, worker.scanner)
        to_run = [c for c in cases if not found.get(c.problem)]
        hidden = [c for c in to_run if c.hidden]
        worker.hand_over(folder)
        warm = named_libraries(student_files(assignment, folder / "code"))
    except BaseException:
        worker.clean_up(folder)
        raise
    seconds = {c.id: assignment.case_seconds(c) for c in to_run}
    job = job_settings(assignment, folder, device, worker) | {
        "problems": {c.id: c.problem for c in to_run},
        "warm": worker.warm([*assignment.warm, *warm]),  # paid by the server before it forks, never by a case
        "case_seconds": {case: s for case, s in seconds.items() if s is not None},
    }
    by_id = {c.id: c for c in to_run}
    try:
        runs, log = run_cases(
            worker,
            job,
            [c.id for c in to_run],
            {c.id: c.problem for c in to_run},
            hidden={c.id for c in hidden},
            hand_over_hidden=lambda: stage_hidden(assignment, submission, worker),
            write_inputs=lambda ids, into: write_inputs(assignment, [by_id[i] for i in ids], into),
        )
    except StaffError as err:
        raise GradingError(str(err)) from None
    return runs, found, log, notes


def stage_hidden(assignment: Assignment, submission: Path, worker: Worker) -> dict:
    """The hidden phase's own job folder, made once no process of the public phase is left: the submission's
    code staged again (nothing the public phase ran can have left anything there), the hidden cases' code laid
    over it (the public phase's code has none). Returns the job settings the hidden phase changes."""
    folder = worker.new_job_dir()
    overlay = overlay_for(assignment, worker)
    stage(assignment, submission, folder / "code", overlay)
    overlay.lay_over(folder / "code", hidden=True)
    worker.hand_over(folder)
    return {"dir": str(folder), "case_modules": case_modules(assignment, hidden=True)}


def static_breaches(
    assignment: Assignment,
    code: Path,
    notes: list[str],
    released: frozenset[str] = frozenset(),
    scanner: Scanner | None = None,
) -> dict[str, str | None]:
    """Each problem's breach of the rule found by reading the staged code (in a bounded process: a fork of
    the worker's warm `scanner` where it has one), or its hold for the staff's review unless `released`."""
    rule = FromScratch(assignment, code, released, scanner)
    try:
        return {name: rule.static_breach(name) for name in assignment.problems}
    except Unreadable as err:
        raise Ungradable(str(err), notes) from None
    except RuntimeError as err:  # the scan itself failed: a grader bug the staff must see
        raise GradingError(str(err)) from None


def ungraded(assignment: Assignment, cases: list[Case], refused: Ungradable, start: float, worker: Worker) -> Grade:
    tests = [TestResult(case, assignment.points[case.id], False, str(refused)) for case in cases]
    return Grade(tests, time.monotonic() - start, notes=[*refused.notes, str(refused)], sandbox=worker.summary())


def write_inputs(assignment: Assignment, cases: list[Case], folder: Path) -> None:
    """The cases' inputs into the job's folder, readable by the job's uid (which may not write there); each file
    made new, never through a link a job left (O_EXCL)."""
    for case in cases:
        path = folder / "inputs" / f"{case.id}.safetensors"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(assignment.store_for(case).inputs_file(case.id))
        path.chmod(0o644)


def verdict(assignment: Assignment, case: Case, run: CaseRun, device: torch.device) -> tuple[bool, str]:
    inputs, expected = assignment.store_for(case).load(case.id)
    if run.error is not None:
        return False, explain_crash(run.error, case, inputs)
    try:
        run_check(case, inputs, expected, run.outputs or {}, device)
    except AssertionError as err:
        return False, str(err)
    except Exception as err:  # an output so odd that the check itself could not read it
        return False, f"{case.id}: your output could not be checked ({type(err).__name__}: {err})"
    return True, "passed"


def check_course(assignment: Assignment) -> list[Case]:
    """The course's cases, each fixture loaded and verified, before any student code runs."""
    problems = assignment.fixture_problems()
    if problems:
        raise GradingError("the course's fixtures fail their checks:\n" + "\n".join(problems))
    if assignment.table.get("hidden") and assignment.hidden_dir is None:
        raise GradingError(f"[tool.cs-basics] names hidden cases, but {assignment.root} has no hidden folder")
    try:
        assignment.hidden_visibility  # noqa: B018 (checked now, before any student code runs)
    except ConfigError as err:
        raise GradingError(str(err)) from None
    for case in assignment.cases:
        assignment.store_for(case).load(case.id)
    return assignment.cases


def grade(
    assignment: Assignment,
    submission: Path,
    device: torch.device,
    limits: Limits | None = None,
    worker: Worker | None = None,
    sandbox: str | None = None,
) -> Grade:
    """Grade one submission, in `worker` (a batch reuses one) or in a worker of its own."""
    start = time.monotonic()
    cases = check_course(assignment)
    if worker is not None:
        worker.warm(assignment.warm)  # imported by the server while this process stages and scans
    if worker is None:
        try:
            with Worker(sandbox, limits) as own:
                return grade(assignment, submission, device, worker=own)
        except StaffError as err:
            raise GradingError(str(err)) from None
    try:
        runs, found, log, notes = run_submission(assignment, submission, cases, device, worker)
    except Ungradable as refused:
        return ungraded(assignment, cases, refused, start, worker)
    breached_in: dict[str, Case] = {}  # problem -> the case whose run broke the rule
    for case in cases:  # a problem breaks the rule when one of its own cases ran what it forbids
        run = runs.get(case.id)
        if not found.get(case.problem) and run is not None and run.record is not None:
            released = frozenset(worker.limits.released)
            found[case.problem] = runtime_breach(case.problem, case.id, run.record, run.error, released)
            breached_in[case.problem] = case
    tests = []
    for case in cases:
        breach = found.get(case.problem)
        if breach:
            where = breached_in.get(case.problem)
            if where is not None and where.hidden and not case.hidden:
                breach = (HIDDEN_HOLD if is_held(breach) else HIDDEN_BREACH).format(problem=case.problem)
            tests.append(TestResult(case, assignment.points[case.id], False, breach))
            continue
        run = runs[case.id]
        passed, message = verdict(assignment, case, run, device)
        tests.append(TestResult(case, assignment.points[case.id], passed, message, run.seconds, run.printed))
    held = [p for p, message in found.items() if is_held(message)]
    return Grade(
        tests,
        time.monotonic() - start,
        output=log,
        notes=notes,
        sandbox=worker.summary(),
        hidden_visibility=assignment.hidden_visibility,
        held=held,
    )
