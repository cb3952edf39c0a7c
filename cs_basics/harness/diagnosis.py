"""Name the known mistake behind a wrong answer or a crash.

Most wrong answers come from a handful of known mistakes, and each leaves a signature: the
student's output equals what the formula gives with that mistake (tutoring systems have
diagnosed arithmetic bugs this way since BUGGY, Brown and Burton 1978). An assignment declares
its mistakes next to its cases, each a wrong implementation of one of its adapters. When a case
fails on its values, the checking side (the grader, or the students' pytest run: the same code)
runs each mistake of that case's problem on the case's stored inputs, in float64, and names the
mistake whose numbers the student's reproduce within the case's tolerance, on every output and
gradient it can compare. Crashes are named from the exception's type and message.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch

from cs_basics.harness.compare import Tolerance

if TYPE_CHECKING:
    from cs_basics.harness.cases import CheckContext

SWITCH = "CS_BASICS_DIAGNOSIS"  # "off": no diagnosis at all (to measure what it costs)
MAX_NAMED = 3  # when more known mistakes than this give the same numbers, naming them helps nobody


@dataclass(frozen=True)
class Mistake:
    name: str
    advice: str  # for the student: what they probably did, and what to do instead
    adapters: Mapping[str, Callable[..., Any]]  # the wrong implementation, by the adapter it stands in for
    dtypes: tuple[torch.dtype, ...] = ()  # only cases of these dtypes can show it (empty: every case)
    tolerance: tuple[Tolerance, Tolerance] | None = None  # (outputs, gradients) to match within, if not the case's
    in_case_dtype: bool = False  # computed in the case's dtype, not float64: where exp overflows depends on it


def marker(advice: str, name: str) -> str:
    """The line a failure message carries for a known mistake (the course report counts them)."""
    return f"This looks like: {advice} (known mistake: {name})"


def enabled() -> bool:
    return os.environ.get(SWITCH, "").lower() not in ("off", "0", "no", "false")


def diagnose(ctx: CheckContext, name: str) -> list[str]:
    """Lines naming the known mistakes that explain the wrong values of output `name`: one, or a few
    that give the same numbers here; nothing when none does or too many do."""
    if not enabled() or not comparable(ctx.outputs.get(name), ctx.expected[name]):
        return []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: waiting for a second thread costs more than it brings
    try:
        found = matching(ctx, name)
    except Exception:  # odd outputs (a complex tensor, say) get no diagnosis; the failure stands as it is
        return []
    finally:
        torch.set_num_threads(threads)
    if len(found) == 1:
        return ["  " + marker(found[0].advice, found[0].name)]
    if 1 < len(found) <= MAX_NAMED:
        return [
            f"  {len(found)} known mistakes give these same numbers here; it looks like one of them:",
            *("  " + marker(m.advice, m.name) for m in found),
        ]
    return []


def matching(ctx: CheckContext, name: str) -> list[Mistake]:
    """The mistakes of the case's problem whose numbers the student's reproduce, on `name` and on every
    other output both give."""
    if agrees(ctx.outputs[name], ctx.expected[name], ctx.tolerance(name)):
        return []  # right within the tolerance (the expected values hold no NaN): nothing to explain
    mistakes = [m for m in ctx.case.mistakes if not m.dtypes or ctx.case.dtype in m.dtypes]
    computed = {m.name: wrong_outputs(ctx, m, grad=name.startswith("grad.")) for m in mistakes}
    found = [m for m in mistakes if shows(ctx, m, computed[m.name], name)]
    # only now the gradients of the few left, to compare every output the student's code gave
    grads = not name.startswith("grad.") and any(k.startswith("grad.") for k in ctx.expected)
    return [m for m in found if agrees_everywhere(ctx, m, wrong_outputs(ctx, m, True) if grads else computed[m.name])]


def comparable(actual: object, expected: torch.Tensor) -> bool:
    """A tensor whose values can be read and set beside the expected ones (any dtype or device)."""
    return isinstance(actual, torch.Tensor) and not actual.is_meta and actual.shape == expected.shape


def wrong_outputs(ctx: CheckContext, mistake: Mistake, grad: bool) -> dict[str, Any]:
    """The mistake's outputs on the case's stored inputs, on the CPU in float64 (in the case's dtype if
    the mistake asks), with gradients if `grad`."""
    dtype = ctx.case.dtype if mistake.in_case_dtype else torch.float64
    args = ctx.case.prepare(ctx.inputs, torch.device("cpu"), dtype=dtype, layout=False)
    try:
        with torch.set_grad_enabled(grad):
            return ctx.case.call(SimpleNamespace(**mistake.adapters), args)
    except Exception:  # a mistake that cannot even run on this case explains nothing
        return {}


def shows(ctx: CheckContext, mistake: Mistake, wrong: dict[str, Any], name: str) -> bool:
    """The mistake's value of `name` differs from the expected one, and the student's agrees with it."""
    value, expected = wrong.get(name), ctx.expected[name]
    if not comparable(value, expected):
        return False
    visible = not agrees(value, expected, ctx.tolerance(name))
    return visible and agrees(ctx.outputs[name], value, tolerance(ctx, mistake, name))


def agrees_everywhere(ctx: CheckContext, mistake: Mistake, wrong: dict[str, Any]) -> bool:
    """The student's values agree with the mistake's on every output both give."""
    return all(
        agrees(ctx.outputs[k], wrong[k], tolerance(ctx, mistake, k))
        for k, expected in ctx.expected.items()
        if comparable(ctx.outputs.get(k), expected) and comparable(wrong.get(k), expected)
    )


def tolerance(ctx: CheckContext, mistake: Mistake, name: str) -> Tolerance:
    if mistake.tolerance is None:
        return ctx.tolerance(name)
    return mistake.tolerance[1] if name.startswith("grad.") else mistake.tolerance[0]


def agrees(actual: torch.Tensor, wrong: torch.Tensor, tol: Tolerance) -> bool:
    """|actual - wrong| <= atol + rtol |wrong| elementwise, where NaN agrees with NaN and inf with itself:
    a wrong answer's NaN and inf are part of its signature."""
    a = actual.detach().to("cpu", torch.float64)
    w = wrong.detach().to("cpu", torch.float64)
    close = (a == w) | ((a - w).abs() <= tol.atol + tol.rtol * w.abs()) | (a.isnan() & w.isnan())
    return bool(close.all())


# ---------------------------------------------------------------- crashes


@dataclass(frozen=True)
class Crash:
    name: str
    kind: str  # the exception's type name
    pattern: str  # a regular expression its message matches
    advice: str


CRASHES = (
    Crash(
        "mask_none",
        "TypeError",
        r"bad operand type for unary ~: 'NoneType'|invalid combination of arguments - got \(NoneType",
        "mask is optional and was None here (the unmasked cases pass mask=None); "
        "mask the scores only when `mask is not None`",
    ),
    Crash(
        "fill_overflows_float16",
        "RuntimeError",
        r"cannot be converted to type \S*Half without overflow",
        "a fill such as -1e9 does not fit in float16 (whose largest magnitude is 65504); "
        "fill with float('-inf') or torch.finfo(scores.dtype).min instead",
    ),
    Crash(
        "boolean_index_with_broadcast_mask",
        "IndexError",
        r"shape of the mask .* does not match the shape of the indexed tensor",
        "indexing with a boolean mask (scores[~mask] = ...) does not broadcast, so a (queries, keys) or "
        "(batch, 1, keys) mask fails; use scores.masked_fill(~mask, value) or torch.where, which broadcast",
    ),
    Crash(
        "view_on_non_contiguous",
        "RuntimeError",
        r"view size is not compatible with input tensor's size and stride",
        ".view needs contiguous memory, and inputs such as heads split by a transpose are not; "
        "use .reshape (or einops.rearrange), which copies only when it must",
    ),
    Crash(
        "in_place_on_input",
        "RuntimeError",
        r"a leaf Variable that requires grad is being used in an in-place operation",
        "an in-place operation (Q /= ..., masked_fill_, +=) changed an input that needs gradients; "
        "compute on new tensors (Q = Q / ..., masked_fill)",
    ),
    Crash(
        "in_place_on_saved_tensor",
        "RuntimeError",
        r"modified by an inplace operation",
        "an in-place operation (x -= ..., e /= ..., exp_()) overwrote a tensor that autograd saved for the "
        "backward pass; use the out-of-place form (x = x - ..., e = e / ...)",
    ),
    Crash(
        "bmm_on_more_than_3d",
        "RuntimeError",
        r"batch1 must be a 3D tensor",
        "torch.bmm takes 3D tensors only, and attention inputs may have any number of batch dims "
        "(4D heads, 5D); use @ (torch.matmul) or einsum, which broadcast over them",
    ),
)

RAISED = re.compile(r"your code raised (\w+): (.*)")  # the first line of the grader's message for a crash


def crash_hint(kind: str, message: str) -> str | None:
    """The known-mistake line for an exception of type `kind` with `message`, if it is a known crash."""
    if not enabled():
        return None
    crash = next((c for c in CRASHES if c.kind == kind and re.search(c.pattern, message)), None)
    return marker(crash.advice, crash.name) if crash else None


@contextmanager
def crashes_noted() -> Iterator[None]:
    """Around the student's code in the students' pytest run: a known crash gets its sentence as a
    note, which pytest prints under the traceback (the grader says it from the child's report)."""
    try:
        yield
    except Exception as err:
        hint = crash_hint(type(err).__name__, str(err))
        if hint and hint not in getattr(err, "__notes__", ()):
            err.add_note(hint)
        raise


def explain_crash(error: str) -> str:
    """The grader: the sentence after the first line of "your code raised <Type>: <message>\\n<traceback>"."""
    raised = RAISED.match(error)
    hint = raised and crash_hint(raised[1], raised[2])
    if not hint:
        return error
    first, _, rest = error.partition("\n")
    return f"{first}\n  {hint}\n{rest}"
