"""Name the known mistake behind a wrong answer or a crash.

Most wrong answers come from a handful of known mistakes, and each leaves a signature: the
student's output equals what the formula gives with that mistake (tutoring systems have
diagnosed arithmetic bugs this way since BUGGY, Brown and Burton 1978). An assignment declares
its mistakes next to its cases, each a wrong implementation of one of its adapters. When a case
fails on its values, the checking side (the grader, or the students' pytest run: the same code)
runs each mistake of that case's problem on the case's stored inputs, in float64, and names the
mistake whose numbers the student's reproduce within the case's tolerance, on every output and
gradient it can compare. A mistake whose numbers are not pinned down by the values alone (float32
arithmetic fits anything within float32's rounding) is named only when the output also shows it
(`confirmed`); otherwise the message gives the evidence and the candidates, never one cause as fact.
Crashes are named from the exception's type and message and, where that is not enough, the case's
arguments and the student's line that raised; each crash also gets a sentence saying what the case
passed, in the contract's terms (the case's `contract`).
"""

from __future__ import annotations

import os
import re
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

import torch

from cs_basics.harness.compare import Tolerance


class Case(Protocol):
    """What a diagnosis reads of a case (cases.Case is one: the case model sits above this module)."""

    dtype: Any
    tolerance: Any
    mistakes: Any
    crashes: Any
    contract: Any

    def prepare(self, *args: Any, **kwargs: Any) -> Any: ...

    def call(self, *args: Any, **kwargs: Any) -> Any: ...


class CheckContext(Protocol):
    """What a diagnosis reads of a failing check (cases.CheckContext is one)."""

    case: Case
    inputs: Any
    outputs: Any
    expected: Any
    stored_mistakes: Any  # mistake name -> its outputs, as the fixture holds them (staff-only mistakes)

    def tolerance(self, name: str) -> Any: ...


GRAD_OUT = "grad_out"  # the input holding the upstream gradient (cases.py); the student's code never sees it
SWITCH = "CS_BASICS_DIAGNOSIS"  # "off": no diagnosis at all (to measure what it costs)
MAX_NAMED = 3  # when more known mistakes than this give the same numbers, naming them helps nobody


@dataclass(frozen=True)
class Mistake:
    name: str
    advice: str  # for the student: what they probably did, and what to do instead
    # the wrong implementation, by the adapter it stands in for; a "module:attribute" string is staff-only code
    # (hidden/, left out of the handout): its outputs are stored in each fixture, and the diagnosis reads them there
    adapters: Mapping[str, Callable[..., Any] | str]
    dtypes: tuple[torch.dtype, ...] = ()  # only cases of these dtypes can show it (empty: every case)
    # (outputs, gradients) to match within, or the dtype whose cases' tolerance to use; None: the case's own
    tolerance: tuple[Tolerance, Tolerance] | torch.dtype | None = None
    in_case_dtype: bool = False  # computed in the case's dtype, not float64: where exp overflows depends on it
    # what must show besides matching numbers, when they match other causes too; without it, the numbers suffice
    confirmed: Callable[[CheckContext, str], bool] | None = None
    # said instead of the name when the numbers match but `confirmed` does not hold: the evidence and the
    # candidates in plain words; "{error}" is the worst relative error
    candidates: str = ""
    # tells the stored outputs of staff-only mistakes of one name apart (an epsilon of 1e-6 or of 1e-8); no dots
    variant: str = ""

    @property
    def stored_name(self) -> str:
        """The name its outputs are stored under in a fixture (staff-only mistakes): `name`, or `name[variant]`."""
        return f"{self.name}[{self.variant}]" if self.variant else self.name


def marker(advice: str, name: str) -> str:
    """The line a failure message carries for a known mistake (the course report counts them)."""
    return f"This looks like: {advice} (known mistake: {name})"


SAID = ("This looks like: ", "Possible causes: ")  # how a diagnosis's lines start (and MAX_NAMED's heading's end)
SEVERAL = "known mistakes give these same numbers here"


def said(message: str) -> list[str]:
    """The diagnosis a failure's message holds: its lines that name a known mistake or give the possible causes
    (a grade's table shows them under the failure's first line)."""
    lines = [line.strip() for line in message.splitlines()[1:]]
    return [line for line in lines if line.startswith(SAID) or SEVERAL in line]


def enabled() -> bool:
    return os.environ.get(SWITCH, "").lower() not in ("off", "0", "no", "false")


def diagnose(ctx: CheckContext, name: str) -> list[str]:
    """Lines naming the known mistakes that explain the wrong values of output `name`: one, or a few
    that give the same numbers here; the candidates in plain words when the numbers fit a mistake
    but do not pin it down; nothing when none fits or too many do."""
    if not enabled() or not readable(ctx.outputs.get(name)) or name not in ctx.expected:
        return []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: waiting for a second thread costs more than it brings
    try:
        found = matching(ctx, name)
        shown = unique([m for m in found if m.confirmed is None or m.confirmed(ctx, name)])
    except Exception:  # odd outputs (a complex tensor, say) get no diagnosis; the failure stands as it is
        return []
    finally:
        torch.set_num_threads(threads)
    if len(shown) == 1:
        return ["  " + marker(shown[0].advice, shown[0].name)]
    if 1 < len(shown) <= MAX_NAMED:
        return [
            f"  {len(shown)} {SEVERAL}; it looks like one of them:",
            *("  " + marker(m.advice, m.name) for m in shown),
        ]
    if not shown and found:
        error = worst_relative_error(ctx.outputs[name], ctx.expected[name])
        return ["  " + m.candidates.format(error=f"{error:.1e}") for m in unique(found) if m.candidates]
    return []


def unique(mistakes: Sequence[Mistake]) -> list[Mistake]:
    """One of each name: a mistake may come in variants (an epsilon of 1e-6 or of 1e-8)."""
    return list({m.name: m for m in reversed(mistakes)}.values())[::-1]


def worst_relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    a, e = actual.detach().to("cpu", torch.float64), expected.detach().to("cpu", torch.float64)
    return float(((a - e).abs() / e.abs()).nan_to_num(0.0, 0.0, 0.0).max())


def matching(ctx: CheckContext, name: str) -> list[Mistake]:
    """The mistakes of the case's problem whose numbers the student's reproduce, on `name` and on every
    other output both give (a wrong shape included, when the mistake gives that same shape)."""
    actual, expected = ctx.outputs[name], ctx.expected[name]
    if actual.shape == expected.shape and agrees(actual, expected, ctx.tolerance(name)):
        return []  # right within the tolerance (the expected values hold no NaN): nothing to explain
    mistakes = [m for m in ctx.case.mistakes if not m.dtypes or ctx.case.dtype in m.dtypes]
    computed = [(m, wrong_outputs(ctx, m, grad=name.startswith("grad."))) for m in mistakes]
    found = [m for m, wrong in computed if shows(ctx, m, wrong, name)]
    # only now the gradients of the few left, to compare every output the student's code gave
    grads = not name.startswith("grad.") and any(k.startswith("grad.") for k in ctx.expected)
    outputs = dict((id(m), wrong) for m, wrong in computed)
    return [m for m in found if agrees_everywhere(ctx, m, wrong_outputs(ctx, m, True) if grads else outputs[id(m)])]


def readable(value: object) -> bool:
    """A tensor whose values can be read (any dtype or device but meta)."""
    return isinstance(value, torch.Tensor) and not value.is_meta


def wrong_outputs(ctx: CheckContext, mistake: Mistake, grad: bool) -> dict[str, Any]:
    """The mistake's outputs on the case's stored inputs, on the CPU in float64 (in the case's dtype if
    the mistake asks), with gradients if `grad`; a staff-only mistake's, as its fixture stores them."""
    if staff_only(mistake):
        return dict(ctx.stored_mistakes.get(mistake.stored_name, {}))
    try:
        return mistake_outputs(ctx.case, mistake, ctx.inputs, grad)
    except Exception:  # a mistake that cannot even run on this case explains nothing (check-cases says so)
        return {}


def mistake_outputs(case: Case, mistake: Mistake, inputs: Mapping[str, torch.Tensor], grad: bool) -> dict[str, Any]:
    """The mistake's outputs on the case's inputs, as the case runs (autograd on), with the gradients of an upstream
    gradient only if `grad` (without it the inputs need none: a backward pass of every mistake costs)."""
    dtype = case.dtype if mistake.in_case_dtype else torch.float64
    inputs = dict(inputs) if grad else {k: v for k, v in inputs.items() if k != GRAD_OUT}
    args = case.prepare(inputs, torch.device("cpu"), dtype=dtype, layout=False)
    with torch.enable_grad():
        return case.call(SimpleNamespace(**mistake.adapters), args)


def staff_only(mistake: Mistake) -> bool:
    """Whether the mistake's code stays with the staff (a "module:attribute" string), its outputs stored."""
    return any(isinstance(wrong, str) for wrong in mistake.adapters.values())


STORED = "mistake."  # fixture tensors "expected.mistake.<stored_name>.<output>": a staff-only mistake's outputs


def split_stored(expected: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A fixture's expected values, and the staff-only mistakes' outputs stored beside them (by `stored_name`)."""
    plain = {k: v for k, v in expected.items() if not k.startswith(STORED)}
    stored: dict[str, dict[str, Any]] = {}
    for key in expected.keys() - plain.keys():
        name, _, output = key.removeprefix(STORED).partition(".")
        stored.setdefault(name, {})[output] = expected[key]
    return plain, stored


def shows(ctx: CheckContext, mistake: Mistake, wrong: dict[str, Any], name: str) -> bool:
    """The mistake's value of `name` differs from the expected one, and the student's (of the same shape)
    agrees with it."""
    value, expected, actual = wrong.get(name), ctx.expected[name], ctx.outputs[name]
    if not readable(value) or value.shape != actual.shape:
        return False
    visible = value.shape != expected.shape or not agrees(value, expected, ctx.tolerance(name))
    return visible and agrees(actual, value, tolerance(ctx, mistake, name))


def agrees_everywhere(ctx: CheckContext, mistake: Mistake, wrong: dict[str, Any]) -> bool:
    """The student's values agree with the mistake's on every output both give with the same shape."""
    both = [k for k in ctx.expected if readable(ctx.outputs.get(k)) and readable(wrong.get(k))]
    return all(
        agrees(ctx.outputs[k], wrong[k], tolerance(ctx, mistake, k))
        for k in both
        if ctx.outputs[k].shape == wrong[k].shape
    )


def tolerance(ctx: CheckContext, mistake: Mistake, name: str) -> Tolerance:
    tol = mistake.tolerance
    if tol is None:
        return ctx.tolerance(name)
    if isinstance(tol, torch.dtype):  # as close as a case of that dtype asks (the case's own if it has none)
        by_dtype = ctx.case.tolerance
        tol = by_dtype.get(tol) if isinstance(by_dtype, Mapping) else None
        if tol is None:
            return ctx.tolerance(name)
    return tol[1] if name.startswith("grad.") else tol[0]


def rounded_to(dtype: torch.dtype) -> Callable[[CheckContext, str], bool]:
    """The output itself shows arithmetic in `dtype`: it has that dtype, or every value is one of its values."""

    def shown(ctx: CheckContext, name: str) -> bool:
        out = ctx.outputs[name].detach()
        if out.dtype == dtype:
            return True
        finite = out[out.isfinite()]
        return finite.numel() > 0 and bool((finite.to(dtype).to(out.dtype) == finite).all())

    return shown


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
    kind: str  # the exception's type name ("" for any)
    pattern: str  # a regular expression its message matches
    advice: str
    code: str = ""  # a regular expression one of the student's lines in the traceback matches: the code shows it
    shows_in: Callable[[dict[str, Any]], bool] | None = None  # the case's arguments under which it can happen


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

# the grader's message for a crash: "your code raised <Type>: <message>", then the folded traceback
RAISED = re.compile(r"your code raised (\w+): (.*?)(?:\n(Traceback.*))?\Z", re.DOTALL)
FOLDED = "frames of the harness and libraries folded"
MAX_FRAMES = 8  # of the student's, innermost kept


def crash_lines(case: Case | None, inputs: Mapping[str, torch.Tensor] | None, kind: str, message: str, trace: str):
    """What a crash's message adds under its first line: the known crash it is, if one is, and what the
    case passed in the contract's terms. One definition for the students' pytest run and the grader."""
    if not enabled():
        return []
    args: dict[str, Any] = {}
    if case is not None and inputs is not None:
        try:
            args = case.prepare(dict(inputs), torch.device("cpu"))
        except Exception:  # the stored inputs are the staff's; should they not load, the crash says less
            case = None
    # the student's source lines: under each "  File ..." line of the part above the folded frames
    yours = "\n".join(line for line in trace.partition(FOLDED)[0].splitlines() if line.startswith("    "))
    crashes = [*CRASHES, *(case.crashes if case is not None else ())]
    crash = next((c for c in crashes if raised_by(c, kind, message, yours, args)), None)
    lines = [marker(crash.advice, crash.name)] if crash else []
    if case is not None and case.contract is not None:
        lines += [f"This case passed {sentence}" for sentence in case.contract(args, f"{kind}: {message}")]
    return lines


def raised_by(crash: Crash, kind: str, message: str, yours: str, args: dict[str, Any]) -> bool:
    return (
        crash.kind in ("", kind)
        and re.search(crash.pattern, message) is not None
        and (not crash.code or re.search(crash.code, yours) is not None)
        and (crash.shows_in is None or (bool(args) and crash.shows_in(args)))
    )


def harness_or_library(filename: str, harness_files: Sequence[str] = ()) -> bool:
    """A frame that is not the student's: the harness, the course's test modules, Python, installed packages."""
    path = Path(filename)
    if filename.startswith("<") or not path.is_absolute() or filename in harness_files:
        return True
    parts = path.parts
    harness = any(parts[i : i + 2] == ("cs_basics", "harness") for i in range(len(parts)))
    installed = "site-packages" in parts or "dist-packages" in parts or any(map(path.is_relative_to, STDLIB))
    return harness or installed or path.parent.name in ("tests", "hidden")


STDLIB = {Path(os.__file__).parent, Path(os.__file__).resolve().parent}  # as named, and its real path (TORCH_DIRS)


def folded_traceback(
    err: BaseException, harness_files: Sequence[str] = (), root: Path | None = None, message: str | None = None
) -> str:
    """The traceback with the student's frames first and the rest (the harness's frames that called their
    code, the libraries their code called) folded into one line naming the innermost, then the error.
    `harness_files`: more files of the harness (the grader's child runs from a folder of its own);
    `root`: where the student's files are, shown relative to it; `message`: the error's line as already read
    (the grader's child reads a student's exception once: its __str__ may be huge or never return)."""
    frames = traceback.extract_tb(err.__traceback__)
    yours = [f for f in frames if not harness_or_library(f.filename, harness_files)][-MAX_FRAMES:]
    others = [f for f in frames if harness_or_library(f.filename, harness_files)]
    for frame in yours if root is not None else ():
        path = Path(frame.filename)
        frame.filename = str(path.relative_to(root)) if path.is_relative_to(root) else frame.filename
    lines = ["Traceback (your code's frames, innermost last):\n", *traceback.format_list(yours)]
    if others:
        inner = frames[-1]  # named when the error came from a library the student's code called
        below = f"; raised in {Path(inner.filename).name}:{inner.lineno} in {inner.name}" if inner in others else ""
        lines.append(f"  ({len(others)} {FOLDED}{below})\n")
    lines += [f"{message}\n"] if message is not None else traceback.format_exception_only(type(err), err)
    return "".join(lines)


@contextmanager
def crashes_noted(case: Case | None = None, inputs: Mapping[str, torch.Tensor] | None = None) -> Iterator[None]:
    """Around the student's code in the students' pytest run: a crash gets the grader's lines as notes,
    which pytest prints under the traceback."""
    __tracebackhide__ = True
    try:
        yield
    except Exception as err:
        message = str(err)
        for line in crash_lines(case, inputs, type(err).__name__, message, folded_traceback(err)):
            if line not in getattr(err, "__notes__", ()):
                err.add_note(line)
        raise


def explain_crash(error: str, case: Case | None = None, inputs: Mapping[str, torch.Tensor] | None = None) -> str:
    """The grader: the lines after the first of "your code raised <Type>: <message>\\n<traceback>"."""
    raised = RAISED.match(error)
    lines = raised and crash_lines(case, inputs, raised[1], raised[2], raised[3] or "")
    if not lines:
        return error
    first, _, rest = error.partition("\n")
    return "\n".join([first, *("  " + line for line in lines), rest])
