"""The from-scratch rule, defined once for the grader and for the students' pytest run.

A problem breaks the rule when
- one of its own graded cases runs an ATen operator the problem forbids (`forbidden_ops`; the
  run-time record of record.py, which sees the operator whatever Python name reached it), or
  switches that record off; or
- a forbidden library name (`forbidden`) sits in code the problem's function reaches (scan.py).
Breaking it gives 0 for that problem only: a softmax written from scratch keeps its point when
the attention beside it calls a built-in.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from cs_basics.harness.config import Assignment, GradedProblem
from cs_basics.harness.rule.allowed import ALLOWED
from cs_basics.harness.rule.constructs import Construct
from cs_basics.harness.rule.evidence import combined
from cs_basics.harness.rule.glue import GLUE
from cs_basics.harness.rule.library import LibraryCalls
from cs_basics.harness.rule.record import UNAVAILABLE, Watch, forbids, recording
from cs_basics.harness.rule.scanprocess import Scanner, scan_bounded, scan_result, start_scan
from cs_basics.harness.rule.sightings import Computed, Record, StudentFrames
from cs_basics.harness.rule.syntax import Use
from cs_basics.harness.rule.tooling import TOOLING, student_predicate


def excluded_code(assignment: Assignment) -> list[str]:
    return [*assignment.staff_code, *TOOLING]


def student_files(assignment: Assignment, code: Path) -> list[Path]:
    """The submission's own Python files under `code` (the staff's code and the tooling excluded)."""
    is_student = student_predicate(assignment.student_code, excluded_code(assignment))
    found = []
    for rel in assignment.student_code:
        top = code / rel
        for path in [top] if top.is_file() else sorted(top.rglob("*.py")):
            if path.is_file() and not path.is_symlink() and is_student(path.relative_to(code)):
                found.append(path)
    return found


def describe_op(op: str) -> str:
    """What a student knows an operator as."""
    if op.startswith("cs_basics.study"):
        return "the course's study kernel (cs_basics/study), which is no answer: the grader runs its own copy"
    if "log_softmax" in op:
        return "torch's log-softmax (torch.log_softmax, F.log_softmax, Tensor.log_softmax, nn.LogSoftmax)"
    if "softmax" in op:
        return "torch's softmax (torch.softmax, F.softmax, Tensor.softmax, nn.Softmax, einx.softmax)"
    if "attention" in op or "sdp" in op:
        return "torch's scaled_dot_product_attention or one of its kernels"
    return "a built-in the problem forbids"


def refused_operator(error: str | None) -> str | None:
    """The operator that torch's dispatcher refused in a case's error (the kernel standing in for a forbidden
    operator raises ForbiddenOperator naming it), else None."""
    found = re.search(rf"ForbiddenOperator: ([\w.:]+) {UNAVAILABLE}", error or "")
    return found.group(1) if found else None


def runtime_breach(
    problem: str, case_id: str, record: Record, error: str | None = None, released: frozenset[str] = frozenset()
) -> str | None:
    """The message for a case whose run broke the rule, or held its problem, else None. `error` is what the case
    raised: a forbidden operator refused by the dispatcher is a breach even when the record of the case says
    nothing. Library code that computed on the student's behalf holds the problem unless `released`."""
    lead = f"0 points for {problem}: it must be written from scratch, but while computing case {case_id}"
    if record.processes:
        return RuleMessage(
            f"{lead} your code {record.processes[0].removeprefix('your code ')}; graded code must compute in its own "
            "process, so starting one breaks the rule",
            held=False,
        )
    if record.tampering:
        return RuleMessage(f"{lead} your code {record.tampering[0]}; that breaks the rule too", held=False)
    refused = refused_operator(error)
    if not record.sightings and refused:
        said = f"{lead} it called {refused}, which is {describe_op(refused)} (torch refused it: it is not there)"
        return RuleMessage(said, held=False)
    if not record.sightings:
        return (
            None
            if problem in released
            else library_hold(problem, case_id, record.library) or cut_off_hold(problem, case_id, record.cut_off)
        )
    lines = [f"{lead} it ran these operators:"]
    for s in record.sightings:
        where = f"called from {s.where}" if s.where else "called by no line of your code (in the backward pass?)"
        lines.append(f"  {s.op}, which is {describe_op(s.op)}; {where}")
    return RuleMessage("\n".join(lines), held=False)


HELD = "held for the staff's review"  # in every message of a held problem


class RuleMessage(str):
    """The rule's message for a problem, typed: `held` where the problem waits for the staff's review (0 points for
    now; the staff may release it), not held where the code broke the rule (0 points). Callers ask `.held`, never
    the text; it is a str, so every writer takes it as it is."""

    held: bool

    def __new__(cls, text: str, held: bool) -> RuleMessage:
        message = super().__new__(cls, text)
        message.held = held
        return message

    def __getnewargs__(self) -> tuple[str, bool]:  # pickle and copy keep the verdict
        return str(self), self.held


def is_held(message: str | None) -> bool:
    """Whether a rule's message holds its problem for review (False for None and for plain text)."""
    return bool(getattr(message, "held", False))


def hold_message(problem: str, found: list[Construct]) -> str | None:
    if not found:
        return None
    listed = "; ".join(str(c) for c in found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
    return RuleMessage(
        f"0 points for {problem} for now, {HELD}: it must be written from scratch, and the code it runs uses "
        f"{listed}. Graded code may not reach into the interpreter (module registries, frames, the garbage "
        "collector, dunder attributes, names built at run time on objects not its own): those are how code forges "
        "what the grader is told. The staff will read the code and may release the problem",
        held=True,
    )


def library_hold(problem: str, case_id: str, computed: list[Computed]) -> str | None:
    """The hold for library code (no glue: glue.py) that ran operators on the student's behalf."""
    if not computed:
        return None
    named = "; ".join(f"computed by {c.function}, called from {c.where or 'no line of yours'}" for c in computed[:3])
    more = f"; and {len(computed) - 3} more" if len(computed) > 3 else ""
    return RuleMessage(
        f"0 points for {problem} for now, {HELD}: it must be written from scratch, but while computing case "
        f"{case_id} it ran library arithmetic the course has not listed: {named}{more}. Graded code may call "
        "library functions that compute nothing on its behalf (Tensor methods, torch.einsum, einops, F.pad, "
        "nn.Module calls, ...); any other library function that runs operators for it is held until the staff "
        "read the code. The staff may release the problem, or list a function that computes nothing for it as "
        "glue (`library_glue` in [tool.cs-basics] of pyproject.toml)",
        held=True,
    )


def cut_off_hold(problem: str, case_id: str, cut_off: list[str]) -> str | None:
    """The hold for a case whose evidence did not all reach the grader (evidence.py): it cannot know what ran."""
    if not cut_off:
        return None
    return RuleMessage(
        f"0 points for {problem} for now, {HELD}: it must be written from scratch, but while computing case "
        f"{case_id} {cut_off[0]}: the grader did not receive everything the process running your code sent it "
        "about what the case ran (the descriptor it writes to was closed or pointed elsewhere, or the process "
        "ended while writing). The staff may release the problem",
        held=True,
    )


def static_breach(problem: str, uses: list[Use]) -> str | None:
    if not uses:
        return None
    names = "; ".join(str(u) for u in uses)
    return RuleMessage(
        f"0 points for {problem}: it must be written from scratch, but the code it runs uses {names} "
        "(found by reading the code it reaches, before any case ran)",
        held=False,
    )


@dataclass
class FromScratch:
    """The rule for one copy of the code: the student's files under `code`, the course's adapters."""

    assignment: Assignment
    code: Path  # the folder holding the student's packages and the adapters module

    @cached_property
    def frames(self) -> StudentFrames:
        adapters = self.assignment.adapters_module.replace(".", "/") + ".py"
        is_student = student_predicate([*self.assignment.student_code, adapters], excluded_code(self.assignment))
        return StudentFrames(self.code, is_student)

    released: frozenset[str] = frozenset()  # problems the staff read and released from a hold
    scanner: Scanner | None = field(default=None, repr=False, compare=False)  # a grading worker's warm scan process
    # what importing the student's code ran (pytest's collection: pytest_plugin.py), held against every problem
    imported: list[Record] = field(default_factory=list, repr=False, compare=False)
    _reading: tuple[threading.Thread, dict] | None = field(default=None, init=False, repr=False, compare=False)

    def read_in_background(self) -> None:
        """Start the scan's process now, in the caller's thread (before any case runs: no case's record sees
        it start), and wait for it in a thread of ours, so that it reads while the caller goes on (pytest
        sets up); `scanned` waits for it."""
        if self._reading is None and "scanned" not in self.__dict__:
            answer: dict = {}
            try:
                started = start_scan(self._job())
            except OSError:  # `scanned` tries again, and says why where it is needed
                return

            def read() -> None:
                try:
                    answer["found"] = scan_result(*started)
                except BaseException as err:  # raised again by `scanned`, in the caller's thread
                    answer["error"] = err

            thread = threading.Thread(target=read, name="cs-basics scan", daemon=True)
            thread.start()
            self._reading = (thread, answer)

    @cached_property
    def scanned(self) -> dict[str, tuple[list[Use], list[Construct]]]:
        """Each problem's forbidden names in the code its adapters reach, and the constructs that reach into
        the interpreter in the code that runs for it (scan.scan, in a bounded process). Raises Unreadable
        when the code cannot be read within the scan's bounds."""
        if self._reading is None:
            return self._scan()
        thread, answer = self._reading
        thread.join()
        self._reading = None
        if "error" in answer:
            raise answer["error"]
        return answer["found"]

    def _scan(self) -> dict[str, tuple[list[Use], list[Construct]]]:
        return scan_bounded(self._job(), scanner=self.scanner)

    def _job(self) -> dict:
        return {
            "code": str(self.code),
            "files": [str(f) for f in student_files(self.assignment, self.code)],
            "adapters": self.assignment.adapters_module,
            "adapters_path": str(self.code / (self.assignment.adapters_module.replace(".", "/") + ".py")),
            "problems": {name: [list(p.adapters), list(p.forbidden)] for name, p in self.assignment.problems.items()},
            "allowed": [*ALLOWED, *self.assignment.allowed],
            # the student's packages as modules: a downstream course's previous assignment (its `cs_basics`) is the
            # student's own, wherever it is installed, though its files are not this course's to scan
            "packages": [rel.removesuffix(".py").replace("/", ".") for rel in self.assignment.student_code],
        }

    @property
    def static(self) -> dict[str, list[Use]]:
        return {name: uses for name, (uses, _) in self.scanned.items()}

    @property
    def held(self) -> dict[str, list[Construct]]:
        return {name: found for name, (_, found) in self.scanned.items()}

    def problem(self, name: str) -> GradedProblem:
        return self.assignment.problems[name]

    @cached_property
    def library(self) -> LibraryCalls:
        """Which library functions may run operators for the student's code: the harness's glue and the course's."""
        return LibraryCalls(self.frames, (*GLUE, *self.assignment.library_glue))

    def watch(self, problem: str) -> Watch:
        """The record of one case in pytest, with the problem's forbidden operators replaced while it runs."""
        rule = self.problem(problem).forbidden_ops
        return Watch(rule, self.frames, enabled=recording(), remove=recording(), library=self.library)

    def import_watch(self) -> Watch:
        """The record of an import of the student's code in pytest, with every problem's forbidden operators
        replaced while it runs (the grader's child watches its import with its problems' own)."""
        patterns = sorted({op for problem in self.assignment.problems.values() for op in problem.forbidden_ops})
        return Watch(patterns, self.frames, remove=True, library=self.library, importing=True)

    def runtime_breach(self, problem: str, case_id: str, record: Record, error: str | None = None) -> str | None:
        """As the grader: what the case ran, then what the imports ran that counts against the problem (its
        own forbidden operators, and all the rest), as the grader charges its import to every case."""
        forbidden = self.problem(problem).forbidden_ops
        for imported in self.imported:
            record = combined(record, imported, lambda op: forbids(forbidden, op))
        return runtime_breach(problem, case_id, record, error, self.released)

    def static_breach(self, problem: str) -> str | None:
        """Forbidden names first (0 points, for good), then constructs that hold the problem unless released."""
        breach = static_breach(problem, self.static.get(problem, []))
        if breach or problem in self.released:
            return breach
        return hold_message(problem, self.held.get(problem, []))
