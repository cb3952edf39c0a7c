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

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from cs_basics.harness.config import Assignment, Problem
from cs_basics.harness.record import Record, StudentFrames, Watch, recording, student_predicate
from cs_basics.harness.scan import Module, Program, Use, entry_points

# cs_basics's tooling, not the student's: the grader stages its own copy over the submission's and
# never scans it, in this assignment and in any later one that grades the student's cs_basics
TOOLING = ("cs_basics/harness", "cs_basics/study", "cs_basics/cli.py")


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


def runtime_breach(problem: str, case_id: str, record: Record) -> str | None:
    """The message for a case whose run broke the rule, else None."""
    lead = f"0 points for {problem}: it must be written from scratch, but while computing case {case_id}"
    if record.tampering:
        return f"{lead} your code {record.tampering[0]}; that breaks the rule too"
    if not record.sightings:
        return None
    lines = [f"{lead} it ran these operators:"]
    for s in record.sightings:
        where = f"called from {s.where}" if s.where else "called by no line of your code (in the backward pass?)"
        lines.append(f"  {s.op}, which is {describe_op(s.op)}; {where}")
    return "\n".join(lines)


def static_breach(problem: str, uses: list[Use]) -> str | None:
    if not uses:
        return None
    names = "; ".join(str(u) for u in uses)
    return (
        f"0 points for {problem}: it must be written from scratch, but the code it runs uses {names} "
        "(found by reading the code it reaches, before any case ran)"
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

    @cached_property
    def static(self) -> dict[str, list[Use]]:
        """Each problem's forbidden names in the code its adapter reaches."""
        program = Program.parse(self.code, student_files(self.assignment, self.code))
        adapters_path = self.code / (self.assignment.adapters_module.replace(".", "/") + ".py")
        try:
            adapters = Module(self.assignment.adapters_module, adapters_path.name, adapters_path.read_text())
        except (OSError, SyntaxError, ValueError):
            return {}
        return {
            name: program.uses(program.reachable(entry_points(adapters, program, p.adapter)), p.forbidden)
            for name, p in self.assignment.problems.items()
        }

    def problem(self, name: str) -> Problem:
        return self.assignment.problems[name]

    def watch(self, problem: str) -> Watch:
        return Watch(self.problem(problem).forbidden_ops, self.frames, enabled=recording())

    def static_breach(self, problem: str) -> str | None:
        return static_breach(problem, self.static.get(problem, []))
