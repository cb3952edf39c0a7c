"""Graded cases as data: one definition serves the students' pytest run and the grader.

A case is split where trust changes hands:
- `make_inputs(seed)` and `oracle(inputs)` build its fixture (staff side, float64);
- `prepare(inputs, device)` turns the stored inputs into call arguments; it is pure,
  so the checking side can rebuild the arguments the student's code received;
- `call(adapters, args)` runs the student's code and returns plain tensors (the
  only step that touches student code, so the grader can run it in a child);
- `check(ctx)` compares those tensors with the expected ones and raises
  AssertionError with a message that says what to fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from cs_basics.harness.compare import Tolerance, assert_close
from cs_basics.harness.fixtures import FixtureStore

Tensors = dict[str, torch.Tensor]


@dataclass
class CheckContext:
    """What a check sees: the case, the stored tensors, the student's outputs, the device."""

    case: Case
    inputs: Tensors
    expected: Tensors
    args: dict[str, Any]
    outputs: Mapping[str, Any]
    device: torch.device

    @property
    def fix(self) -> str:
        return f"uv run pytest -k '{self.case.test} and {self.case.param}'"

    def close(
        self, name: str, tol: Tolerance, *, dtype: torch.dtype | None = None, device: torch.device | None = None
    ) -> None:
        """outputs[name] matches expected[name], with `dtype`, on `device` (default: the case's)."""
        assert_close(
            self.output(name),
            self.expected[name],
            tol,
            key=f"{self.case.id}: {name}",
            dtype=dtype,
            device=device or self.device,
            fix=self.fix,
        )

    def output(self, name: str) -> Any:
        if name not in self.outputs:
            raise AssertionError(f"{self.case.id}: no {name!r} was produced")
        return self.outputs[name]

    def fail(self, message: str) -> None:
        raise AssertionError(f"{self.case.id}: {message}\n  rerun: {self.fix}")


@dataclass(frozen=True)
class Case:
    problem: str
    test: str  # the pytest function that runs it, e.g. "test_scaled_dot_product_attention"
    param: str  # its parametrize id, e.g. "causal_mask"
    seed: int
    make_inputs: Callable[[int], Tensors]
    oracle: Callable[[Tensors], Tensors]
    prepare: Callable[[Tensors, torch.device], dict[str, Any]]
    call: Callable[[ModuleType, dict[str, Any]], dict[str, Any]]
    check: Callable[[CheckContext], None]
    weight: float = 1.0
    hidden: bool = False
    description: str = field(default="", compare=False)

    @property
    def id(self) -> str:
        """Unique across the assignment; also the fixture's file name."""
        return f"{self.test.removeprefix('test_')}-{self.param}"


def points_by_case(cases: Sequence[Case], problem_points: Mapping[str, float], places: int = 4) -> dict[str, float]:
    """Share each problem's points among its cases by weight, rounded to `places` decimals so that
    each problem's cases add up to exactly its points (the largest-remainder method)."""
    by_problem: dict[str, list[Case]] = {}
    for case in cases:
        by_problem.setdefault(case.problem, []).append(case)
    missing = set(by_problem) - set(problem_points)
    if missing:
        raise ValueError(f"cases name problems with no declared points: {sorted(missing)}")
    unit = 10**places
    points = {}
    for problem, members in by_problem.items():
        total_weight = sum(c.weight for c in members)
        exact = {c.id: problem_points[problem] * unit * c.weight / total_weight for c in members}
        units = {k: math.floor(v) for k, v in exact.items()}
        left = round(problem_points[problem] * unit) - sum(units.values())
        for k in sorted(exact, key=lambda k: units[k] - exact[k])[:left]:  # largest remainders first
            units[k] += 1
        points |= {k: u / unit for k, u in units.items()}
    return points


def run_call(case: Case, adapters: ModuleType, inputs: Tensors, device: torch.device) -> dict[str, Any]:
    """The student side: prepare the arguments and call the student's code."""
    args = case.prepare(inputs, device)
    return case.call(adapters, args)


def run_check(case: Case, inputs: Tensors, expected: Tensors, outputs: Mapping[str, Any], device: torch.device) -> None:
    """The checking side: rebuild the arguments and check the outputs against them."""
    args = case.prepare(inputs, device)
    case.check(CheckContext(case, inputs, expected, args, outputs, device))


def run_case(case: Case, adapters: ModuleType, store: FixtureStore, device: torch.device) -> None:
    """Both sides in one process: what the students' pytest run does."""
    inputs, expected = store.load(case.id)
    outputs = run_call(case, adapters, inputs, device)
    run_check(case, inputs, expected, outputs, device)
