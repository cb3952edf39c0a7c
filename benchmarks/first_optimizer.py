"""Benchmark: what the first optimizer a grading builds costs a student's case (issue 43).

torch.optim's first step (or any `torch.optim.Optimizer.__init__`) imports torch._dynamo, about as long to import
as torch itself. The grading server imports it before it forks a job where the course needs it (`Assignment.warm`:
the `Optimizer` kind's `warm`, or `warm` in [tool.cs-basics]). This grades the reference of
examples/training_utilities twice, each in a fresh worker (a fresh grading server): "before", with the warm-up
switched off (the case that builds the first optimizer imports torch._dynamo itself), and "after", as graded;
and prints each AdamW case's seconds in the grader (TestResult.seconds: from its start to its result) and the
whole grading's. Every case's limit is raised to 600 s for both, so that "before" is measured, not stopped.
Usage: uv run python benchmarks/first_optimizer.py
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from cs_basics.harness.config import Assignment
from cs_basics.harness.grading.pipeline.grade import grade
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.worker import Worker

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "training_utilities"


class Measured(Assignment):
    """The example with every case's limit at 600 s: measured, never stopped."""

    def case_seconds(self, case) -> float:
        return 600.0


class Cold(Measured):
    """...and no warm-up: the first optimizer's case imports torch._dynamo itself."""

    @property
    def warm(self) -> list[str]:
        return []


def graded(course: type[Assignment]) -> tuple[float, dict[str, float], float]:
    """(the whole grading's seconds, each AdamW case's, the score) in a fresh worker (a fresh grading server)."""
    assignment = course.find(EXAMPLE)
    with Worker(None, Limits(case_seconds=600.0, total_seconds=1200.0)) as worker:
        start = time.monotonic()
        result = grade(assignment, EXAMPLE, torch.device("cpu"), worker=worker)
        seconds = time.monotonic() - start
    adamw = {t.case.id: t.seconds for t in result.tests if t.case.problem == "adamw"}
    return seconds, adamw, result.score


def main() -> None:
    for label, course in (("before (no warm-up)", Cold), ("after (the server warms up)", Measured)):
        seconds, adamw, score = graded(course)
        print(f"{label}: grading {seconds:.1f} s, score {score:g}")
        for case, case_seconds in adamw.items():
            print(f"  {case}: {case_seconds:.2f} s")


if __name__ == "__main__":
    main()
