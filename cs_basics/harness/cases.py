"""Graded cases as data: one definition serves the students' pytest run and the grader.

A case is split where trust changes hands:
- `make_inputs(seed)` and `oracle(inputs)` build its fixture (staff side, float64);
- `prepare(inputs, device)` turns the stored inputs into call arguments (fresh copies in the
  case's dtype, laid out by its `view`, leaves that need gradients); it is pure, so the
  checking side can rebuild the arguments the student's code received;
- `call(adapters, args)` runs the student's code: the assignment's `adapter_call`, then the
  vector-Jacobian product that gives the gradients (the only step that touches student code,
  so the grader can run it in a child);
- `check(ctx)` compares those tensors with the expected ones and raises AssertionError with a
  message that says what to fix, naming the known mistake whose numbers the student's
  reproduce, if one does (`cs_basics.harness.diagnosis`).

An assignment declares only what is its own: inputs, oracles, adapter calls, tolerances and mistakes. A problem
that is no function of tensors (a number, gradients changed in place, an optimizer's class, seeded draws) gives
its cases a `kind` (kinds.py): the adapter call and the oracle exercise the code as it says, and its answers are
named tensors like any output, whose names it turns into the problem's words for messages.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from cs_basics.harness import diagnosis
from cs_basics.harness.compare import Tolerance, mismatch
from cs_basics.harness.device import supports_float64
from cs_basics.harness.fixtures import FixtureStore

if TYPE_CHECKING:
    from cs_basics.harness.diagnosis import Crash, Mistake

Tensors = dict[str, torch.Tensor]
Tolerances = tuple[Tolerance, Tolerance]  # (outputs, gradients)
GRAD_OUT = diagnosis.GRAD_OUT  # the input holding the upstream gradient; the student's code never sees it


def randn(seed: int, *shape: int) -> torch.Tensor:
    """Standard normal values from a generator of their own: the same for a seed on any machine."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def placed(device: torch.device, dtype: torch.dtype) -> torch.device:
    """Where arguments of `dtype` go: float64 falls back to the CPU on devices without it (MPS)."""
    return torch.device("cpu") if dtype == torch.float64 and not supports_float64(device) else device


@dataclass
class CheckContext:
    """What a check sees: the case, the stored tensors, the student's outputs, the device."""

    case: Case
    inputs: Tensors
    expected: Tensors
    args: dict[str, Any]
    outputs: Mapping[str, Any]
    device: torch.device
    stored_mistakes: Mapping[str, Tensors] = field(default_factory=dict)  # staff-only mistakes' outputs, by name

    @property
    def fix(self) -> str:
        return rerun_line(self.case)

    @cached_property
    def tolerances(self) -> Tolerances:
        return tolerances_of(self.case, self)

    def tolerance(self, name: str) -> Tolerance:
        own = self.case.kind.tolerance(name, self) if self.case.kind is not None else None
        return own or (self.tolerances[1] if name.startswith("grad.") else self.tolerances[0])

    def close(self, name: str) -> None:
        """outputs[name] matches expected[name] within its tolerance, in the case's dtype, on its device (tensors of
        a kind whose answers are no tensors of the case's dtype, numbers say: in float64, on the CPU)."""
        key = f"{self.case.id}: {self.case.words(name)}"
        kind = self.case.kind
        typed = kind is None or kind.dtype_checked
        dtype, device = (self.case.dtype, placed(self.device, self.case.dtype)) if typed else (None, None)
        want = kind.want if kind is not None else "a torch.Tensor"
        message = mismatch(
            self.output(name), self.expected[name], self.tolerance(name), key=key, dtype=dtype, device=device, want=want
        )
        if message is not None:
            self.report(message, diagnose=name)

    def output(self, name: str) -> Any:
        if name not in self.outputs:
            raise AssertionError(f"{self.case.id}: {self.case.words(name)} was not produced")
        return self.outputs[name]

    def fail(self, message: str, *, diagnose: str | None = None) -> NoReturn:
        """Fail the case; `diagnose` names the output whose wrong values a known mistake may explain."""
        self.report(f"{self.case.id}: {message}", diagnose=diagnose)

    def report(self, message: str, *, diagnose: str | None = None) -> NoReturn:
        lines = [message, *(diagnosis.diagnose(self, diagnose) if diagnose else []), f"  {self.fix}"]
        raise AssertionError("\n".join(lines))


def tolerances_of(case: Case, ctx: CheckContext) -> Tolerances:
    """The case's (outputs, gradients) tolerances: one Tolerance for both, by the case's dtype, or worked out
    from the check's context (half precision's)."""
    tolerance = case.tolerance
    if tolerance is None:
        raise ValueError(f"{case.id}: its problem declares no tolerances")
    if isinstance(tolerance, Tolerance):
        return tolerance, tolerance
    return tolerance(ctx) if callable(tolerance) else tolerance[case.dtype]


def rerun_line(case: Case) -> str:
    """The last line of a failure: the command that runs the case alone, or, for a hidden case (whose test is not in
    the student's copy), what the student can run instead."""
    if case.hidden:
        return "a hidden case: it is not in your copy; `uv run pytest` runs the public cases of the same contract"
    return f"rerun: uv run pytest -k '{case.test} and {case.param}'"


def check_unchanged(ctx: CheckContext) -> None:
    for name, original in ctx.args.items():
        after = ctx.outputs.get(f"after.{name}")
        if isinstance(original, torch.Tensor) and after is not None:
            same = after.shape == original.shape and torch.equal(after.detach().cpu(), original.detach().cpu())
            if not same:
                ctx.fail(f"the input {name} was modified in place; compute on new tensors instead")


def check_outputs(ctx: CheckContext) -> None:
    """The output, then every other expected value (gradients, further outputs); then the inputs are untouched."""
    for name in sorted(ctx.expected, key=lambda n: n != "out"):
        if name.startswith("grad.") and ctx.outputs.get(name) is None:
            ctx.fail(
                f"no gradient reached {name.removeprefix('grad.')}: the output is cut from the "
                "autograd graph (.detach(), .data, torch.no_grad() or a trip through numpy?)"
            )
        ctx.close(name)
    check_unchanged(ctx)


def gradients(out: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Each leaf's gradient for the upstream gradient `grad_out`; none if the output is cut from them."""
    __tracebackhide__ = True
    grad_out = args.get(GRAD_OUT)
    if grad_out is None or not isinstance(out, torch.Tensor) or not out.requires_grad or out.shape != grad_out.shape:
        return {}
    leaves = {name: t for name, t in args.items() if isinstance(t, torch.Tensor) and t.requires_grad}
    # the same vector-Jacobian product as out.backward(grad_out), whose shape check imports sympy (~1 s)
    (out * grad_out).sum().backward()
    return {f"grad.{name}": leaf.grad for name, leaf in leaves.items()}


@dataclass(frozen=True)
class Case:
    problem: str
    test: str  # the pytest function that runs it, e.g. "test_scaled_dot_product_attention"
    param: str  # its parametrize id, e.g. "causal_mask"
    seed: int
    make_inputs: Callable[[int], Tensors]
    oracle: Callable[[Tensors], Tensors]
    adapter_call: Callable[[ModuleType, dict[str, Any]], dict[str, Any]]  # the student's outputs by name: "out", ...
    # by the case's dtype, one for every dtype, or worked out on the device
    tolerance: Mapping[torch.dtype, Tolerances] | Tolerance | Callable[[CheckContext], Tolerances]
    check: Callable[[CheckContext], None] = check_outputs
    dtype: torch.dtype = torch.float32
    constants: Mapping[str, Any] = field(default_factory=dict, compare=False)  # arguments that are no tensor
    leaves: tuple[str, ...] | None = None  # the inputs that get gradients (default: every floating-point one)
    view: Callable[[dict[str, Any]], dict[str, Any]] | None = None  # lays the arguments out as strided views
    mistakes: Sequence[Mistake] = field(default=(), compare=False, repr=False)  # of this case's problem
    crashes: Sequence[Crash] = field(default=(), compare=False, repr=False)  # its own, beyond diagnosis.CRASHES
    # what the case passed, in the contract's terms, as sentences for a crash ("Type: message") on these arguments
    contract: Callable[[dict[str, Any], str], list[str]] | None = field(default=None, compare=False, repr=False)
    weight: float = 1.0
    hidden: bool = False
    description: str = field(default="", compare=False)
    declaration: Any = field(default=None, compare=False, repr=False)  # the problem.Problem that made it, if one did
    kind: Any = field(default=None, compare=False, repr=False)  # how its adapter is exercised (kinds.py); None: f(x)

    @property
    def id(self) -> str:
        """Unique across the assignment; also the fixture's file name."""
        return f"{self.test.removeprefix('test_')}-{self.param}"

    def words(self, name: str) -> str:
        """An answer's name in the problem's words ("parameter 2 after step 3"), for messages."""
        return self.kind.words(name) if self.kind is not None else name

    def prepare(
        self, inputs: Tensors, device: torch.device, *, dtype: torch.dtype | None = None, layout: bool = True
    ) -> dict[str, Any]:
        """The arguments the student's code gets: fresh copies on the device, the floating-point ones in the
        case's dtype (masks stay bool, positions integers), laid out by `view`, the leaves needing gradients
        when there is an upstream gradient."""
        dtype = dtype or self.dtype
        device = placed(device, dtype)
        args: dict[str, Any] = {
            name: t.to(device, dtype, copy=True) if t.is_floating_point() else t.to(device, copy=True)
            for name, t in inputs.items()
        }
        if layout and self.view is not None:
            args = self.view(args)
        if GRAD_OUT in args:
            default = [name for name, t in args.items() if t.is_floating_point() and name != GRAD_OUT]
            for name in self.leaves if self.leaves is not None else default:
                args[name].requires_grad_()
        return args | dict(self.constants)

    def call(self, adapters: ModuleType, args: dict[str, Any]) -> dict[str, Any]:
        """Run the student's code: the adapter call, the gradients of "out", and the inputs as they are after."""
        __tracebackhide__ = True  # pytest shows the student's frames, not the harness's
        outputs = dict(self.adapter_call(adapters, args))
        outputs |= gradients(outputs.get("out"), args)
        return outputs | {f"after.{n}": t for n, t in args.items() if isinstance(t, torch.Tensor) and n != GRAD_OUT}


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
    __tracebackhide__ = True
    args = case.prepare(inputs, device)
    return case.call(adapters, args)


def run_check(case: Case, inputs: Tensors, expected: Tensors, outputs: Mapping[str, Any], device: torch.device) -> None:
    """The checking side: rebuild the arguments and check the outputs against them (and the staff-only
    mistakes' outputs, stored beside the expected ones, for the diagnosis)."""
    args = case.prepare(inputs, device)
    expected, stored = diagnosis.split_stored(expected)
    case.check(CheckContext(case, inputs, expected, args, outputs, device, stored))


def run_case(case: Case, adapters: ModuleType, store: FixtureStore, device: torch.device) -> None:
    """Both sides in one process: what the students' pytest run does."""
    inputs, expected = store.load(case.id)
    with diagnosis.crashes_noted(case, inputs):
        outputs = run_call(case, adapters, inputs, device)
    run_check(case, inputs, expected, outputs, device)
