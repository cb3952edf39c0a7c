"""A problem declared in one place: its points, adapter calls, reference, tolerances, rule and known mistakes.

    SOFTMAX = Problem(
        "softmax",
        points=1,
        calls={"run_softmax(x, dim)": torch.softmax},   # the adapter call, and the reference it stands for
        tolerances={torch.float32: (FLOAT32, FLOAT32_GRAD), torch.float64: (FLOAT64, FLOAT64)},
        forbidden=["torch.softmax"], forbidden_ops=["aten._softmax"],
        mistakes=(Mistake("no_max_shift", "subtract the maximum first", {"run_softmax": unshifted}),),
    )
    CASES = [SOFTMAX.case("test_softmax", "last_dim", 10, lambda seed: {"x": randn(seed, 4, 10)}, dim=-1)]

What every assignment would otherwise write again, the declaration derives:
- the adapter call: `"run_softmax(x, dim)"` calls the adapter `run_softmax` with the case's arguments named `x`
  and `dim`, in that order (an argument a case lacks is passed as None: an optional mask); its result is "out";
- the float64 oracle with gradients: the reference, given the same arguments in float64 (integer and boolean
  inputs as they are), makes "out"; with an upstream gradient (`grad_out`) each floating-point input gets
  "grad.<name>";
- the case: its tolerances, mistakes, crashes and contract are the problem's; its inputs keep their dtypes
  (integers stay integers, booleans booleans), the floating-point ones cast to the case's dtype.

A problem that is no function of tensors declares its `kind` (kinds.py: `Number`, `InPlace`, `Optimizer`,
`Seeded`): its adapter, its reference and its mistakes are then exercised as the kind says, each answer a named
tensor ("param2/step3") that messages say in the problem's words ("parameter 2 after step 3"). `case_seconds`
gives its cases a time limit of their own in the grader.

A reference may be a "module:attribute" string: it is imported only when fixtures are made, so that a staff-only
module (hidden/, left out of the handout) can hold an oracle that is more than a call the rule forbids.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from cs_basics.harness.cases import GRAD_OUT, Case, CheckContext, Tensors, Tolerances, check_outputs
from cs_basics.harness.compare import Tolerance
from cs_basics.harness.diagnosis import Crash, Mistake
from cs_basics.harness.kinds import Kind, Seeded

Reference = Callable[..., torch.Tensor] | str  # a function, or "module:attribute" imported when fixtures are made


@dataclass(frozen=True)
class AdapterCall:
    """One adapter call of a problem: the adapter's name and the case arguments it takes, in order."""

    adapter: str
    arguments: tuple[str, ...]
    keywords: tuple[str, ...] = ()  # passed as name=value

    @classmethod
    def parse(cls, text: str) -> AdapterCall:
        """`"run_softmax(x, dim)"` or `"run_softmax(x, dim=dim)"`: names only, as the adapter line reads."""
        try:
            call = ast.parse(text, mode="eval").body
        except SyntaxError as err:
            raise ValueError(f"adapter call {text!r} is not a call such as 'run_softmax(x, dim)'") from err
        names_only = isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
        names_only = names_only and all(isinstance(a, ast.Name) for a in call.args)
        names_only = names_only and all(k.arg and isinstance(k.value, ast.Name) for k in call.keywords)
        if not names_only:
            raise ValueError(f"adapter call {text!r}: name the adapter and its arguments only, e.g. 'run_silu(x)'")
        mismatched = [k.arg for k in call.keywords if k.arg != k.value.id]
        if mismatched:
            raise ValueError(f"adapter call {text!r}: a keyword argument is passed as name=name ({mismatched})")
        return cls(call.func.id, tuple(a.id for a in call.args), tuple(k.arg for k in call.keywords))

    def values(self, args: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        return [args.get(n) for n in self.arguments], {n: args.get(n) for n in self.keywords}

    def __call__(self, adapters: Any, args: dict[str, Any]) -> dict[str, Any]:
        """The student's output through the adapter (the case's `adapter_call`)."""
        __tracebackhide__ = True
        positional, keywords = self.values(args)
        return {"out": getattr(adapters, self.adapter)(*positional, **keywords)}


@dataclass(frozen=True)
class KindCall:
    """The adapter call of a problem of another kind (kinds.py): the adapter, exercised as the kind says."""

    call: AdapterCall
    kind: Kind

    @property
    def adapter(self) -> str:
        return self.call.adapter

    def __call__(self, adapters: Any, args: dict[str, Any]) -> dict[str, Any]:
        __tracebackhide__ = True
        return self.kind.exercise(getattr(adapters, self.call.adapter), self.call, args)


def resolve(reference: Reference) -> Callable[..., Any]:
    if callable(reference):
        return reference
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Oracle:
    """The float64 oracle of one adapter call: the reference on float64 copies, with gradients."""

    call: AdapterCall
    reference: Reference
    leaves: tuple[str, ...] | None = None  # the inputs that get gradients (default: every floating-point one)
    constants: Mapping[str, Any] = field(default_factory=dict)
    kind: Kind | None = None  # how the reference is exercised (kinds.py), as the adapter is

    def __call__(self, inputs: Tensors) -> Tensors:
        args: dict[str, Any] = {n: t.double() if t.is_floating_point() else t for n, t in inputs.items()}
        if self.kind is not None:
            args |= dict(self.constants)
            answers = self.kind.exercise(resolve(self.reference), self.call, args)
            wrong = [n for n, v in answers.items() if not isinstance(v, torch.Tensor)]
            if wrong:
                raise TypeError(f"the reference of {self.call.adapter} gave no {self.kind.want} for {wrong}")
            return self.kind.oracle({n: v.detach() for n, v in answers.items()}, args)
        grad_out = args.pop(GRAD_OUT, None)
        floats = [n for n, t in args.items() if t.is_floating_point()]
        leaves = [n for n in (self.leaves if self.leaves is not None else floats) if n in args]
        if grad_out is not None:
            for name in leaves:
                args[name] = args[name].detach().requires_grad_()
        positional, keywords = self.call.values(args | dict(self.constants))
        out = resolve(self.reference)(*positional, **keywords)
        expected = {"out": out.detach()}
        if grad_out is not None:
            out.backward(grad_out)
            expected |= {f"grad.{name}": args[name].grad for name in leaves}
        return expected


@dataclass(frozen=True)
class Problem:
    """A problem as its staff declare it: what grading takes from pyproject.toml's [tool.cs-basics.problems.NAME]
    (points, forbidden, forbidden_ops; either place, not both) and everything its cases share."""

    name: str
    calls: Mapping[str, Reference]  # "run_x(a, b)" -> the reference it stands for; the first is the default
    # by the case's dtype (outputs, gradients); one Tolerance for all; or worked out on the device
    tolerances: Mapping[torch.dtype, Tolerances] | Tolerance | Callable[[CheckContext], Tolerances] | None = None
    points: float | None = None
    forbidden: Sequence[str] = ()  # beyond the course's
    forbidden_ops: Sequence[str] = ()
    mistakes: Sequence[Mistake] = ()
    crashes: Sequence[Crash] = ()
    contract: Callable[[dict[str, Any], str], list[str]] | None = None
    kind: Kind | None = None  # how its adapters are exercised (kinds.py: Number, InPlace, Optimizer, Seeded)
    case_seconds: float | None = None  # each case's time limit in the grader (default: the course's)

    def __post_init__(self) -> None:
        if not self.calls:
            raise ValueError(f"problem {self.name}: declare at least one adapter call")
        if self.tolerances is None and not isinstance(self.kind, Seeded):
            raise ValueError(f"problem {self.name}: declare its tolerances")
        object.__setattr__(self, "parsed", {AdapterCall.parse(text): ref for text, ref in self.calls.items()})

    @property
    def adapters(self) -> tuple[str, ...]:
        """Every adapter the problem's cases call: each is checked the same way in pytest and in grading."""
        return tuple(call.adapter for call in self.parsed)

    def adapter_call(self, adapter: str | None = None) -> tuple[AdapterCall, Reference]:
        for call, reference in self.parsed.items():
            if adapter in (None, call.adapter):
                return call, reference
        raise ValueError(f"problem {self.name} declares no call of {adapter!r}; its calls: {list(self.calls)}")

    def case(
        self,
        test: str,
        param: str,
        seed: int,
        make_inputs: Callable[[int], Tensors],
        *,
        adapter: str | None = None,
        dtype: torch.dtype = torch.float32,
        check: Callable[[CheckContext], None] | None = None,
        tolerance: Mapping[torch.dtype, Tolerances] | Tolerance | Callable[[CheckContext], Tolerances] | None = None,
        oracle: Callable[[Tensors], Tensors] | None = None,
        leaves: tuple[str, ...] | None = None,
        view: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        weight: float = 1.0,
        description: str = "",
        kind: Kind | None = None,
        **constants: Any,
    ) -> Case:
        """One graded case of this problem; `constants` are the arguments that are no tensor (dim=-1); `kind`: how
        this case exercises the adapter, instead of the problem's (more steps, a loss, a resumed optimizer)."""
        call, reference = self.adapter_call(adapter)
        kind = kind or self.kind
        return Case(
            self.name, test, param, seed, make_inputs,
            oracle or Oracle(call, reference, leaves, constants, kind), call if kind is None else KindCall(call, kind),
            tolerance or self.tolerances, check or (check_outputs if kind is None else kind.check),
            dtype=dtype, constants=constants, leaves=leaves, view=view, mistakes=tuple(self.mistakes),
            crashes=tuple(self.crashes), contract=self.contract, weight=weight, description=description,
            declaration=self, kind=kind,
        )  # fmt: skip
