"""Problems that are not "tensors in, a tensor out": how a problem's adapter is exercised, and its answers' words.

A problem's `kind` says how its adapter (the student's code), its reference (the float64 oracle) and each known
mistake are exercised, all three the same way, and names every answer they give:

- `Number`: the answer is a Python number (a learning rate), compared within the problem's tolerance; `over`
  sweeps one argument through the values an input tensor holds ("the learning rate at iteration 40");
- `InPlace`: the function changes its parameters' `.grad` in place and returns nothing (gradient clipping):
  each gradient after the call is an answer, each parameter's values and a frozen one's missing gradient must
  stay as they were ("the gradient of parameter 2");
- `Optimizer`: the adapter returns a class (an optimizer), built on the case's parameters with the case's
  constants as hyperparameters and stepped `steps` times with the case's gradients (or a loss's); the
  parameters after each step are the answers, and the optimizer's state is exercised by rebuilding it from
  `state_dict()` part-way ("parameter 2 after step 3");
- `Seeded`: the function draws at random from the global generators (a batch of windows of a token array):
  the same seed must give the same answer, each draw must hold what the problem's `properties` ask, and
  over many draws what is `counted` must follow the `distribution` ("the starting position 92").

Every answer crosses the grader's process boundary as a named tensor (`param2/step3`); `words` turns a name back
into the problem's own words for a failure message. The default kind (None) is the function of tensors:
`{"out": f(...)}` and the gradients of its inputs (cases.py).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from cs_basics.harness.cases import CheckContext, check_outputs
from cs_basics.harness.compare import Tolerance

EXACT = Tolerance(0.0, 0.0)
NONE = torch.empty(0)  # stands for a gradient that is None, where an answer must be a tensor


class Kind:
    """How a problem's adapter is exercised (the default is cases.py's function of tensors)."""

    warm: tuple[str, ...] = ()  # modules whose first import the grading server pays, never a case (zygote.py)
    dtype_checked = True  # the answers are tensors in the case's dtype (not so for numbers or counts)
    want = "a torch.Tensor"  # what an answer must be, in a message

    def exercise(self, function: Callable[..., Any], call: Any, args: dict[str, Any]) -> dict[str, Any]:
        """The answers of `function` (the adapter, the reference or a mistake) on the case's arguments, by name."""
        raise NotImplementedError

    def words(self, name: str) -> str:
        return name

    def tolerance(self, name: str, ctx: CheckContext) -> Tolerance | None:
        """An answer's own tolerance (None: the problem's)."""
        return None

    def check(self, ctx: CheckContext) -> None:
        check_outputs(ctx)

    def oracle(self, answers: dict[str, torch.Tensor], args: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The expected answers, from the reference's (as they are, but where the kind expects otherwise)."""
        return answers


def as_number(value: Any) -> Any:
    """A Python number (or a one-element tensor, or numpy's scalar) as a float64 tensor; anything else as it is."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Real):
        return torch.tensor(float(value), dtype=torch.float64)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        return value.detach().to("cpu", torch.float64).reshape(())
    return value


@dataclass(frozen=True)
class Number(Kind):
    """The answer is a number. `over`: the argument swept through the values of the case's input of that name (a
    1-D integer tensor), one call each; `says`: the answer in words, `{value}` standing for the swept value."""

    over: str | None = None
    says: str = "the answer"

    dtype_checked = False
    want = "a number (a Python float)"

    def exercise(self, function, call, args):
        if self.over is None:
            positional, keywords = call.values(args)
            return {"out": as_number(function(*positional, **keywords))}
        answers = {}
        for value in args[self.over].tolist():
            positional, keywords = call.values(args | {self.over: value})
            answers[f"{self.over}={value}"] = as_number(function(*positional, **keywords))
        return answers

    def words(self, name):
        return self.says.format(value=name.partition("=")[2])

    def check(self, ctx):
        """The answer, or one value after another: the first that is wrong is the one to fix."""
        for name in sorted(ctx.expected, key=lambda n: int(n.partition("=")[2] or 0)):
            ctx.close(name)


def parameter_inputs(inputs: Mapping[str, Any], prefix: str = "param") -> list[tuple[int, str]]:
    """The parameters among a case's inputs: `param0`, `param1`, ... in order (index, name)."""
    found = [
        (int(name[len(prefix) :]), name) for name in inputs if name[len(prefix) :].isdigit() and name.startswith(prefix)
    ]
    return sorted(found)


@dataclass(frozen=True)
class InPlace(Kind):
    """The function changes the `.grad` of the parameters passed as `argument` in place and returns nothing.

    The case's inputs `param0`, `param1`, ... are the parameters' values and `param0.grad`, ... their gradients; a
    parameter without one is frozen (requires_grad=False, grad None). The answers: each gradient after the call
    (`param0.grad`), each parameter's values (`param0`: exactly as they were), a frozen one's gradient (still
    none: an empty tensor stands for it)."""

    argument: str = "parameters"

    def exercise(self, function, call, args):
        parameters = []
        for _, name in parameter_inputs(args):
            grad = args.get(f"{name}.grad")
            parameter = torch.nn.Parameter(args[name].detach().clone(), requires_grad=grad is not None)
            parameter.grad = None if grad is None else grad.detach().clone()
            parameters.append(parameter)
        positional, keywords = call.values(args | {self.argument: parameters})
        function(*positional, **keywords)
        answers: dict[str, Any] = {}
        for index, parameter in enumerate(parameters):
            answers[f"param{index}"] = parameter.detach()
            answers[f"param{index}.grad"] = NONE.clone() if parameter.grad is None else parameter.grad
        return answers

    def words(self, name):
        index, _, grad = name.removeprefix("param").partition(".")
        return (
            f"the gradient of parameter {index}" if grad else f"parameter {index} (its values, which must not change)"
        )

    def check(self, ctx):
        """The gradients, a frozen parameter's none; then every parameter's values, exactly as they were."""
        inputs = parameter_inputs(ctx.inputs)
        for index, name in inputs:
            if f"{name}.grad" not in ctx.inputs and ctx.output(f"{name}.grad").numel():
                ctx.fail(
                    f"parameter {index} is frozen (requires_grad=False) and has no gradient; your code gave it one. "
                    "Leave parameters whose .grad is None as they are",
                    diagnose=f"{name}.grad",
                )
        for _, name in inputs:
            if f"{name}.grad" in ctx.inputs:
                ctx.close(f"{name}.grad")
        for index, name in inputs:
            after, before = ctx.output(name), ctx.expected[name]
            kept = isinstance(after, torch.Tensor) and after.shape == before.shape
            if not (kept and torch.equal(after.detach().to("cpu", torch.float64), before)):
                ctx.fail(
                    f"parameter {index}'s values changed; only the gradients (.grad) may change, in place",
                    diagnose=name,
                )


@dataclass(frozen=True)
class Optimizer(Kind):
    """The adapter returns an optimizer's class. Each case builds it on its parameters (inputs `param0`, ...) with
    its constants as keyword arguments (lr, weight_decay, ...), then takes `steps` steps: before step k each
    parameter gets the gradient `param0.grad/step{k}`, or, with `loss`, the gradients of `loss(parameters, args)`.
    With `resume_after=k`, after step k a new optimizer is built on the same parameters and given the old one's
    `state_dict()`: its state must carry on the steps. The answers: each parameter after each step."""

    steps: int = 1
    loss: Callable[[list[torch.Tensor], dict[str, Any]], torch.Tensor] | None = None
    resume_after: int | None = None

    warm = ("torch._dynamo",)  # an optimizer's first step imports it (torch.optim's _disable_dynamo): 20 s here

    def exercise(self, function, call, args):
        positional, keywords = call.values(args)
        optimizer_class = function(*positional, **keywords)
        inputs = parameter_inputs(args)
        parameters = [torch.nn.Parameter(args[name].detach().clone()) for _, name in inputs]
        used = {*call.arguments, *call.keywords}
        hyperparameters = {k: v for k, v in args.items() if not isinstance(v, torch.Tensor) and k not in used}
        optimizer = optimizer_class(parameters, **hyperparameters)
        answers: dict[str, Any] = {}
        for step in range(1, self.steps + 1):
            optimizer.zero_grad()
            if self.loss is None:
                for parameter, (_, name) in zip(parameters, inputs, strict=True):
                    parameter.grad = args[f"{name}.grad/step{step}"].detach().clone()
            else:
                with torch.enable_grad():
                    self.loss(parameters, args).backward()
            optimizer.step()
            answers |= {f"param{i}/step{step}": p.detach().clone() for i, p in enumerate(parameters)}
            if step == self.resume_after:
                state = optimizer.state_dict()
                optimizer = optimizer_class(parameters, **hyperparameters)
                optimizer.load_state_dict(state)
        return answers

    def words(self, name):
        parameter, _, step = name.partition("/")
        said = f"parameter {parameter.removeprefix('param')} after step {step.removeprefix('step')}"
        if self.resume_after is not None and int(step.removeprefix("step")) > self.resume_after:
            said += f" (the optimizer rebuilt from its state_dict() after step {self.resume_after})"
        return said

    def check(self, ctx):
        """Step by step, each parameter: the first step that goes wrong is the one to fix."""
        for name in sorted(ctx.expected, key=lambda n: (int(n.partition("/step")[2]), n)):
            ctx.close(name)


@contextlib.contextmanager
def seeded(seed: int):
    """torch's, numpy's and Python's global generators seeded with `seed`; each put back as it was after."""
    import numpy as np

    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    try:
        yield
    finally:
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])


@dataclass(frozen=True)
class Seeded(Kind):
    """The function draws from the global generators (torch's, numpy's, Python's), which each case seeds.

    - `returns`: the names of what one call returns (a tuple of them);
    - `properties`: {what must hold, in words: (args, one draw's values by name) -> the share of the draw that
      holds it}, 1 for a right answer;
    - `counted`: (args, one draw) -> integer values counted over `draws` draws, which must follow
      `distribution` (args -> each value's probability) within `sigmas` standard deviations; `value` says one
      of them in words (`{value}` stands for it);
    - `numpy`: the arguments passed as numpy arrays; `device`: the argument that gets the case's device.
    The answers: "same seed" (1 when a second call after the same seed gives the same draw), each property,
    and the counts (the last one counts the values outside the distribution's range)."""

    returns: tuple[str, ...] = ("out",)
    properties: Mapping[str, Callable[[dict[str, Any], dict[str, Any]], float]] = field(default_factory=dict)
    counted: Callable[[dict[str, Any], dict[str, Any]], Any] | None = None
    distribution: Callable[[dict[str, Any]], torch.Tensor] | None = None
    value: str = "the value {value}"
    draws: int = 100
    sigmas: float = 6.0
    numpy: tuple[str, ...] = ()
    device: str | None = "device"
    seed: int = 0

    dtype_checked = False
    SAME = "same seed"

    def draw(self, function, call, args) -> dict[str, Any]:
        positional, keywords = call.values(args)
        out = function(*positional, **keywords)
        values = out if len(self.returns) > 1 else (out,)
        if not isinstance(values, tuple | list) or len(values) != len(self.returns):
            got = type(out).__name__
            raise TypeError(f"{call.adapter} returned {got}; it returns {len(self.returns)}: {', '.join(self.returns)}")
        return dict(zip(self.returns, values, strict=True))

    def exercise(self, function, call, args):
        place = next((t.device for t in args.values() if isinstance(t, torch.Tensor)), torch.device("cpu"))
        args = dict(args)
        for name in self.numpy:
            args[name] = args[name].cpu().numpy()
        if self.device and self.device in (*call.arguments, *call.keywords):
            args[self.device] = str(place)
        with seeded(self.seed):
            first = self.draw(function, call, args)
        with seeded(self.seed):
            again = self.draw(function, call, args)
        same = all(_same(first[n], again[n]) for n in self.returns)
        answers: dict[str, Any] = {self.SAME: torch.tensor(float(same), dtype=torch.float64)}
        for words, holds in self.properties.items():
            answers[words] = torch.tensor(share(holds, args, first), dtype=torch.float64)
        if self.counted is not None and self.distribution is not None:
            bins = len(self.distribution(args))
            counts = torch.zeros(bins + 1, dtype=torch.float64)
            with seeded(self.seed + 1):
                for _ in range(self.draws):
                    values = torch.as_tensor(self.counted(args, self.draw(function, call, args))).flatten().long()
                    outside = (values < 0) | (values >= bins)
                    counts += torch.bincount(values.masked_fill(outside, bins), minlength=bins + 1).double()
            answers["counts"] = counts
        return answers

    def oracle(self, answers, args):
        """The counts a right answer expects are the distribution's (not the reference's own draws)."""
        if "counts" in answers and self.distribution is not None:
            total = float(answers["counts"].sum())
            expected = torch.as_tensor(self.distribution(args), dtype=torch.float64) * total
            answers["counts"] = torch.cat([expected, torch.zeros(1, dtype=torch.float64)])
        return answers

    def words(self, name):
        if name == self.SAME:
            return "the draw after the same seed again (it must be the same draw)"
        if name == "counts":
            return f"how often each value was drawn over {self.draws} draws"
        return name

    def tolerance(self, name, ctx):
        if name != "counts":
            return EXACT
        expected = ctx.expected["counts"]
        total = float(expected.sum())
        p = expected / total if total else expected
        return Tolerance(self.sigmas * math.sqrt(float((total * p * (1 - p)).max())) + 0.5, 0.0)

    def check(self, ctx):
        for name in [self.SAME, *self.properties]:
            if name in ctx.expected:
                ctx.close(name)
        if "counts" in ctx.expected:
            self.check_counts(ctx)

    def check_counts(self, ctx: CheckContext) -> None:
        """The value whose count is furthest from what the distribution expects, in the problem's words."""
        actual, expected, tol = ctx.output("counts"), ctx.expected["counts"], ctx.tolerance("counts")
        if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
            ctx.close("counts")
            return
        gap = (actual.detach().cpu().double() - expected).abs()
        worst = int(gap.argmax())
        if gap[worst] <= tol.atol:
            return
        bins = len(expected) - 1
        what = self.value.format(value=worst) if worst < bins else f"a value outside 0 to {bins - 1}"
        ctx.fail(
            f"{what} was drawn {int(actual[worst])} times in {int(expected.sum())} samples ({self.draws} draws); "
            f"a right answer draws it {float(expected[worst]):.0f} times, give or take {tol.atol:.0f}",
            diagnose="counts",
        )


def share(
    holds: Callable[[dict[str, Any], dict[str, Any]], float], args: dict[str, Any], draw: dict[str, Any]
) -> float:
    """The share of the draw that holds a property; 0 where the draw is too odd to ask (a wrong shape, no tensor)."""
    try:
        return float(holds(args, draw))
    except Exception:  # the course's property on the student's odd answer: it does not hold
        return 0.0


def _same(a: Any, b: Any) -> bool:
    """Whether two draws are the same: tensors or arrays of one shape and dtype, and equal."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a.cpu(), b.cpu()))
    try:
        import numpy as np

        return type(a) is type(b) and bool(np.array_equal(a, b))
    except Exception:  # values that cannot even be compared are no same draw
        return False
