"""Grade one submission: stage it, run its code in a child, check every case here, score.

The grading process never imports student code: it reads the submission's files (to stage
them and to apply the from-scratch rule to their syntax trees), hands the child only each
case's inputs, and compares what comes back with expected values the child cannot read.
"""

from __future__ import annotations

import importlib.util
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file

from cs_basics.harness.cases import Case, run_check
from cs_basics.harness.config import Assignment
from cs_basics.harness.diagnosis import explain_crash
from cs_basics.harness.fromscratch import HELD, TOOLING, FromScratch, excluded_code, runtime_breach
from cs_basics.harness.fromscratch import student_files as student_files  # the handout's import
from cs_basics.harness.record import recording
from cs_basics.harness.sandbox import CaseRun, Limits, StaffError, Worker, python_paths, run_cases

SUBMISSION_BYTES_LIMIT = 64 << 20
PACKAGE = Path(__file__).resolve().parents[1]  # the grader's own cs_basics


class GradingError(Exception):
    """Grading cannot be trusted (altered fixtures, a broken course set-up): the staff must act."""


@dataclass
class TestResult:
    case: Case
    max_score: float
    passed: bool
    output: str
    seconds: float = 0.0

    @property
    def score(self) -> float:
        return self.max_score if self.passed else 0.0


@dataclass
class Grade:
    tests: list[TestResult]
    execution_time: float
    output: str = ""
    notes: list[str] = field(default_factory=list)
    sandbox: dict = field(default_factory=dict)  # which sandbox graded it (Worker.summary)
    held: list[str] = field(default_factory=list)  # problems held for the staff's review (code that reaches in)

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tests)

    @property
    def max_score(self) -> float:
        return sum(t.max_score for t in self.tests)


def copy_regular(src: Path, dst: Path, budget: list[int]) -> None:
    """Copy files and folders only: links, FIFOs and devices in a submission are skipped."""
    if src.is_symlink():
        return
    if src.is_dir():
        dst.mkdir(parents=True, exist_ok=True)
        for child in src.iterdir():
            if child.name != "__pycache__":
                copy_regular(child, dst / child.name, budget)
    elif src.is_file():
        budget[0] -= src.stat().st_size
        if budget[0] < 0:
            raise ValueError(f"the submission is larger than {SUBMISSION_BYTES_LIMIT >> 20} MiB")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)


def module_package(assignment: Assignment, module: str) -> Path:
    return assignment.root / module.split(".")[0]


def student_source(assignment: Assignment, submission: Path, rel: str) -> Path:
    """Where a student-code path comes from: the submission; when grading one's own checkout of a
    downstream assignment, a package it does not hold (the student's cs_basics) is the installed one."""
    path = submission / rel
    if path.exists() or submission.resolve() != assignment.root.resolve():
        return path
    spec = importlib.util.find_spec(Path(rel).parts[0])
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]).parent / rel if locations else path


def stage(assignment: Assignment, submission: Path, code: Path) -> None:
    """The submission's student code, the staff's code and the grader's own tooling over it,
    and the course's test modules."""
    budget = [SUBMISSION_BYTES_LIMIT]
    for rel in assignment.student_code:
        copy_regular(student_source(assignment, submission, rel), code / rel, budget)
    overlays = [(assignment.root / rel, code / rel) for rel in assignment.staff_code]
    overlays += [(PACKAGE.parent / rel, code / rel) for rel in TOOLING]
    for source, target in overlays:
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
        copy_regular(source, target, [1 << 40])
    for module in [*case_modules(assignment), assignment.adapters_module]:
        package = module_package(assignment, module)
        for source in package.rglob("*.py"):  # code only: never a fixture
            target = code / source.relative_to(assignment.root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)


def case_modules(assignment: Assignment) -> list[str]:
    modules = [assignment.table.get("cases", "tests.cases")]
    if assignment.hidden_dir is not None:
        modules.append(f"{assignment.hidden_dir.name}.cases")
    return modules


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
        "limits": {"memory_mb": limits.memory_mb, "file_mb": limits.file_mb, "processes": limits.processes},
        "python": python_paths(),
        "hide": [str(assignment.root), *worker.hide],
        "repo": str(assignment.root),
        "adapters": assignment.adapters_module,
        "case_modules": case_modules(assignment),
        "student_packages": sorted({Path(p).parts[0].removesuffix(".py") for p in assignment.student_code}),
        "device": str(device),
        "rule": {
            "forbidden_ops": {name: list(p.forbidden_ops) for name, p in assignment.problems.items()},
            "student_code": [*assignment.student_code, assignment.adapters_module.replace(".", "/") + ".py"],
            "excluded": excluded_code(assignment),
            "record": recording(),
        },
    }


def run_submission(assignment: Assignment, submission: Path, cases: list[Case], device: torch.device, worker: Worker):
    """Stage, scan and run; return (the child's runs by case id, the static breaches by problem, the child's
    output, notes)."""
    notes = [worker.describe(), *[n for n in [protect_hidden(assignment, worker)] if n]]
    folder = worker.new_job_dir()
    try:
        stage(assignment, submission, folder / "code")
        rule = FromScratch(assignment, folder / "code", frozenset(worker.limits.released))
        found = {name: rule.static_breach(name) for name in assignment.problems}
        to_run = [c for c in cases if not found.get(c.problem)]
        for case in to_run:
            save_file(assignment.store_for(case).load(case.id)[0], str(folder / "inputs" / f"{case.id}.safetensors"))
        worker.hand_over(folder)
    except BaseException:
        worker.clean_up(folder)
        raise
    job = job_settings(assignment, folder, device, worker) | {"problems": {c.id: c.problem for c in to_run}}
    try:
        runs, log = run_cases(worker, job, [c.id for c in to_run], {c.id: c.problem for c in to_run})
    except StaffError as err:
        raise GradingError(str(err)) from None
    return runs, found, log, notes


def verdict(assignment: Assignment, case: Case, run: CaseRun, device: torch.device) -> tuple[bool, str]:
    if run.error is not None:
        return False, explain_crash(run.error)
    inputs, expected = assignment.store_for(case).load(case.id)
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
    if worker is None:
        try:
            with Worker(sandbox, limits) as own:
                return grade(assignment, submission, device, worker=own)
        except StaffError as err:
            raise GradingError(str(err)) from None
    runs, found, log, notes = run_submission(assignment, submission, cases, device, worker)
    for case in cases:  # a problem breaks the rule when one of its own cases ran what it forbids
        run = runs.get(case.id)
        if not found.get(case.problem) and run is not None and run.record is not None:
            found[case.problem] = runtime_breach(case.problem, case.id, run.record, run.error)
    tests = []
    for case in cases:
        breach = found.get(case.problem)
        if breach:
            tests.append(TestResult(case, assignment.points[case.id], False, breach))
            continue
        run = runs[case.id]
        passed, message = verdict(assignment, case, run, device)
        tests.append(TestResult(case, assignment.points[case.id], passed, message, run.seconds))
    held = [p for p, message in found.items() if message and HELD in message]
    return Grade(tests, time.monotonic() - start, output=log, notes=notes, sandbox=worker.summary(), held=held)
