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
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from cs_basics.harness.config import Assignment, Problem
from cs_basics.harness.record import UNAVAILABLE, Record, StudentFrames, Watch, recording, student_predicate
from cs_basics.harness.scan import Construct, Module, Program, Use, constructs, entry_points

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


def runtime_breach(problem: str, case_id: str, record: Record, error: str | None = None) -> str | None:
    """The message for a case whose run broke the rule, else None. `error` is what the case raised: a forbidden
    operator refused by the dispatcher is a breach even when the record of the case says nothing."""
    lead = f"0 points for {problem}: it must be written from scratch, but while computing case {case_id}"
    if record.processes:
        return (
            f"{lead} your code {record.processes[0].removeprefix('your code ')}; graded code must compute in its own "
            "process, so starting one breaks the rule"
        )
    if record.tampering:
        return f"{lead} your code {record.tampering[0]}; that breaks the rule too"
    refused = refused_operator(error)
    if not record.sightings and refused:
        return f"{lead} it called {refused}, which is {describe_op(refused)} (torch refused it: it is not there)"
    if not record.sightings:
        return None
    lines = [f"{lead} it ran these operators:"]
    for s in record.sightings:
        where = f"called from {s.where}" if s.where else "called by no line of your code (in the backward pass?)"
        lines.append(f"  {s.op}, which is {describe_op(s.op)}; {where}")
    return "\n".join(lines)


HELD = "held for the staff's review"  # in every message of a held problem


def hold_message(problem: str, found: list[Construct]) -> str | None:
    if not found:
        return None
    listed = "; ".join(str(c) for c in found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
    return (
        f"0 points for {problem} for now, {HELD}: it must be written from scratch, and the code it runs uses "
        f"{listed}. Graded code may not reach into the interpreter (module registries, frames, the garbage "
        "collector, dunder attributes, names built at run time): those are how code forges what the grader "
        "is told. The staff will read the code and may release the problem"
    )


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

    released: frozenset[str] = frozenset()  # problems the staff read and released from a hold

    @cached_property
    def program(self) -> Program:
        return Program.parse(self.code, student_files(self.assignment, self.code))

    @cached_property
    def adapters(self) -> Module | None:
        path = self.code / (self.assignment.adapters_module.replace(".", "/") + ".py")
        try:
            return Module(self.assignment.adapters_module, path.name, path.read_text())
        except (OSError, SyntaxError, ValueError):
            return None

    @cached_property
    def entries(self) -> dict[str, list[tuple[str, str]]]:
        """Each problem's entry points: the student definitions its adapter names."""
        if self.adapters is None:
            return {}
        return {
            name: entry_points(self.adapters, self.program, p.adapter) for name, p in self.assignment.problems.items()
        }

    @cached_property
    def static(self) -> dict[str, list[Use]]:
        """Each problem's forbidden names in the code its adapter reaches."""
        program = self.program
        return {
            name: program.uses(program.reachable(self.entries[name]), self.problem(name).forbidden)
            for name in self.entries
        }

    @cached_property
    def held(self) -> dict[str, list[Construct]]:
        """Each problem's constructs that reach into the interpreter, in all the code that runs for it."""
        program = self.program
        found = {}
        imported = list(self.adapters.aliases.values()) if self.adapters else []  # run for every problem
        for name, entries in self.entries.items():
            runs = program.runs(entries, imported)
            found[name] = [c for m, nodes in runs.items() for c in constructs(program.modules[m], program, nodes)]
        return found

    def problem(self, name: str) -> Problem:
        return self.assignment.problems[name]

    def watch(self, problem: str) -> Watch:
        """The record of one case in pytest, with the problem's forbidden operators replaced while it runs."""
        return Watch(self.problem(problem).forbidden_ops, self.frames, enabled=recording(), remove=recording())

    def static_breach(self, problem: str) -> str | None:
        """Forbidden names first (0 points, for good), then constructs that hold the problem unless released."""
        breach = static_breach(problem, self.static.get(problem, []))
        if breach or problem in self.released:
            return breach
        return hold_message(problem, self.held.get(problem, []))
