"""The known mistakes of this assignment: what a wrong answer or a crash most likely came from.

Each mistake is a wrong implementation of one adapter, computed in float64 on a failing case's own
inputs; when the student's numbers reproduce it, the failure message names it (`This looks like:`).
Built on torch's own softmax and attention where they can be, which a student may not call: those
ship with the tests (the students' pytest run names them too), never a solution. Those that compute a
softmax from scratch (the stability family, the epsilon, a sum over everything) would be a working
softmax for a student to read: their code is the staff's, hidden/answers.py (`staff`), left out of the
handout; their outputs are stored in the fixtures, and the students' run names them from there. The
crashes here need the case's arguments or the student's line to be named; `contract` says what a
case passed when the student's code raised on it. `tests/cases.py` attaches them to its cases.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from cs_basics.harness.diagnosis import Crash, Mistake, rounded_to

SOFTMAX = "softmax"
ATTENTION = "scaled_dot_product_attention"
LOW_PRECISION = (torch.float16, torch.bfloat16)


def scores(Q, K, mask=None, *, scale=None, fill=-math.inf) -> torch.Tensor:
    """Q K^T times the scale (1/sqrt(d_k) unless given), filled with `fill` where the mask is False."""
    s = Q @ K.mT * (Q.shape[-1] ** -0.5 if scale is None else scale)  # (..., queries, keys)
    return s if mask is None else s.masked_fill(~mask, fill)


def sdpa(Q, K, V, mask=None, scale=None) -> torch.Tensor:
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, scale=scale)


def guarded(weights: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Zero weights for queries whose mask row is all False, as they must be: one mistake at a time."""
    return weights if mask is None else weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)


def with_softmax(softmax: Callable[[torch.Tensor, int], torch.Tensor], nan_to_zero=False, reshape_mask=None):
    """Attention built on `softmax` (over the last dim), its NaN replaced by zeros if `nan_to_zero`, the mask
    reshaped by `reshape_mask` if given."""

    def attention(Q, K, V, mask=None):
        if mask is not None and reshape_mask is not None:
            mask = reshape_mask(mask)
        weights = softmax(scores(Q, K, mask), -1)
        return guarded(weights.nan_to_num(0.0) if nan_to_zero else weights, mask) @ V

    return attention


def causal(Q: torch.Tensor, K: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    """What a student takes a missing mask for: query i attends to keys 0..i+diagonal (torch.tril of ones)."""
    return torch.ones(Q.shape[-2], K.shape[-2], dtype=torch.bool, device=Q.device).tril(diagonal)


def none_as_causal(diagonal: Callable[[torch.Tensor, torch.Tensor], int]) -> Callable[..., torch.Tensor]:
    """Attention that masks causally where no mask was given (the diagonal aligned by `diagonal(Q, K)`)."""

    def attention(Q, K, V, mask=None):
        mask = causal(Q, K, diagonal(Q, K)) if mask is None else mask
        return guarded(torch.softmax(scores(Q, K, mask), -1), mask) @ V

    return attention


def zero_scores_masked(Q, K, V, mask=None):
    """Attention that takes every score of exactly 0 for a masked one (the mask multiplied in, then the zeros
    filled)."""
    s = scores(Q, K)
    if mask is not None:
        s = s.masked_fill(~mask | (s == 0), -math.inf)
    return guarded(torch.softmax(s, -1), mask) @ V


def staff(attribute: str) -> str:
    """A mistake that computes a softmax from scratch: its code is the staff's (hidden/answers.py, left out of the
    handout), its outputs stored in the fixtures, which the diagnosis reads."""
    return f"hidden.answers:{attribute}"


def attention_mistake(name: str, advice: str, wrong: Callable | str, **kw: Any) -> Mistake:
    return Mistake(name, advice, {"run_scaled_dot_product_attention": wrong}, **kw)


def softmax_mistake(name: str, advice: str, wrong: Callable | str, **kw: Any) -> Mistake:
    return Mistake(name, advice, {"run_softmax": wrong}, **kw)


# ---------------------------------------------------------------- mistakes of several variants or loose numbers

# float32 arithmetic shows only on float64 cases, within float32's tolerance. Numbers that close fit other
# causes too (an epsilon added to a sum, a float32 constant), so the name needs the output to show float32
# (its dtype, or every value a float32 one); else the message gives the evidence and both candidates.
IN_FLOAT32 = {
    "dtypes": (torch.float64,),
    "tolerance": torch.float32,
    "confirmed": rounded_to(torch.float32),
    "candidates": (
        "Possible causes: the float64 result is off by up to {error} relative, the size that float32 "
        "arithmetic gives (a .float(), or a tensor or constant made without dtype=...) or a small constant "
        "added somewhere (an epsilon in a denominator, say); keep the input's dtype throughout and add nothing"
    ),
}
# the ones students write, 1e-5 ... 1e-10 (as hidden/answers.py names them); each gives its own numbers
EPSILONS = ("1e_5", "1e_6", "1e_7", "1e_8", "1e_9", "1e_10")
EPSILON_ADVICE = (
    "the softmax divides by the sum plus a small epsilon, which shifts every weight by epsilon / sum "
    "(in float64 that is far outside the tolerance); the sum is at least 1 once the maximum is subtracted, "
    "so divide by the sum alone"
)
# where exp overflows (no max shift, one max for everything, the mean subtracted) depends on the dtype:
# those mistakes are computed in the case's dtype
STABILITY = {"in_case_dtype": True}


STABILITY_FAMILY = (
    (
        "no_max_shift",
        "exp overflowed to inf because your softmax does not subtract the maximum first; subtract "
        "each row's maximum of the scores (keepdim=True), which leaves the softmax unchanged",
    ),
    (
        "global_max",
        "your softmax subtracts the maximum of all the scores, not each row's, so rows far below it "
        "underflow to 0/0; subtract each row's own maximum (amax(-1, keepdim=True))",
    ),
    (
        "mean_shift",
        "your softmax subtracts the mean, not the maximum: a masked score of -inf makes the mean -inf "
        "(NaN everywhere), and a row of scores spread more than ~88 overflows exp; subtract each row's "
        "maximum",
    ),
)
MISTAKES = {
    SOFTMAX: (
        softmax_mistake(
            "no_max_shift",
            "exp overflowed to inf (or every term underflowed to 0) because the maximum was not subtracted "
            "first; subtract the maximum along `dim` (keepdim=True), which leaves the softmax unchanged",
            staff("unshifted_softmax"),
            **STABILITY,
        ),
        softmax_mistake(
            "global_max",
            "you subtracted the maximum of the whole tensor, so slices far below it underflow to 0/0; "
            "subtract each slice's own maximum along `dim`",
            staff("global_max_softmax"),
            **STABILITY,
        ),
        softmax_mistake(
            "mean_shift",
            "you subtracted the mean, not the maximum: a slice whose values spread more than ~88 (float32) "
            "still overflows exp to inf; subtract the maximum along `dim` (keepdim=True)",
            staff("mean_shift_softmax"),
            **STABILITY,
        ),
        # an epsilon of 1e-10 shifts the weights by at most 1e-10 relative, within float64's tolerance: no case
        # shows it (`cs-basics check-cases` says so)
        *(
            softmax_mistake("epsilon_in_denominator", EPSILON_ADVICE, staff(f"softmax_epsilon_{eps}"), variant=eps)
            for eps in EPSILONS[:-1]
        ),
        softmax_mistake(
            "ignores_dim",
            "the softmax is taken over the last dim whatever `dim` says; pass `dim` to every reduction "
            "(with keepdim=True)",
            lambda x, dim: torch.softmax(x, -1),
        ),
        softmax_mistake(
            "sum_over_everything",
            "you divided by the sum over the whole tensor, not by the sum along `dim` (keepdim=True)",
            staff("sum_over_everything"),
        ),
        softmax_mistake(
            "float32_arithmetic",
            "your float64 result is only as accurate as float32 arithmetic: something inside computes in "
            "float32 (a .float(), or a tensor made without dtype=x.dtype); keep the input's dtype throughout",
            lambda x, dim: torch.softmax(x.float(), dim).double(),
            **IN_FLOAT32,
        ),
    ),
    ATTENTION: (
        attention_mistake(
            "no_scale",
            "the scores are not divided by sqrt(d_k); compute Q K^T / sqrt(d_k), d_k = Q.shape[-1]",
            lambda Q, K, V, mask=None: sdpa(Q, K, V, mask, scale=1.0),
        ),
        attention_mistake(
            "scale_by_d_k",
            "the scores are divided by d_k, not by its square root; divide by math.sqrt(d_k)",
            lambda Q, K, V, mask=None: sdpa(Q, K, V, mask, scale=1 / Q.shape[-1]),
        ),
        attention_mistake(
            "scale_by_d_v",
            "the scores are divided by sqrt(d_v), V's last dim; the scale is 1 / sqrt(d_k), d_k = Q.shape[-1]",
            lambda Q, K, V, mask=None: sdpa(Q, K, V, mask, scale=V.shape[-1] ** -0.5),
        ),
        attention_mistake(
            "scale_by_sequence_length",
            "the scores are divided by the square root of the number of keys (a shape[-2] where shape[-1] was "
            "meant); the scale is 1 / sqrt(d_k), d_k = Q.shape[-1]",
            lambda Q, K, V, mask=None: sdpa(Q, K, V, mask, scale=K.shape[-2] ** -0.5),
        ),
        attention_mistake(
            "mask_flipped",
            "the mask's polarity is flipped: True means this query MAY attend to this key, so fill the "
            "scores where the mask is False (masked_fill(~mask, -inf))",
            lambda Q, K, V, mask=None: sdpa(Q, K, V, None if mask is None else ~mask),
        ),
        attention_mistake(
            "mask_ignored",
            "the mask made no difference: fill the scores where it is False with -inf before the softmax "
            "(masked_fill returns a new tensor: keep its result)",
            lambda Q, K, V, mask=None: sdpa(Q, K, V),
        ),
        *(
            attention_mistake(
                "mask_none_as_causal",
                "no mask was given here (mask=None), and your code masked the scores causally anyway: without a "
                "mask every query attends to every key; mask the scores only when `mask is not None`, with the "
                "mask given",
                none_as_causal(diagonal),
            )
            # torch.tril of ones(queries, keys), or aligned at the last query and key (diagonal keys - queries)
            for diagonal in (lambda Q, K: 0, lambda Q, K: K.shape[-2] - Q.shape[-2])
        ),
        attention_mistake(
            "zero_scores_masked",
            "scores that are exactly 0 were taken for masked ones (the mask multiplied into the scores, then "
            "every 0 filled with -inf?): a key may score exactly 0 (here a key of all zeros) and still be attended; "
            "fill where the mask is False: scores.masked_fill(~mask, -inf)",
            zero_scores_masked,
        ),
        attention_mistake(
            "mask_after_softmax",
            "the mask was applied after the softmax, so the weights left no longer sum to 1; fill the scores "
            "with -inf before the softmax instead",
            lambda Q, K, V, mask=None: torch.softmax(scores(Q, K), -1) * (1 if mask is None else mask) @ V,
        ),
        attention_mistake(
            "mask_multiplied_into_scores",
            "the scores were multiplied by the mask, which makes masked scores 0, not -inf, so masked keys "
            "still get weight; use scores.masked_fill(~mask, -inf)",
            lambda Q, K, V, mask=None: torch.softmax(scores(Q, K) * (1 if mask is None else mask), -1) @ V,
        ),
        attention_mistake(
            "softmax_over_queries",
            "the softmax normalizes over the queries (dim -2); each query's weights over the keys must "
            "sum to 1: softmax over the last dim",
            lambda Q, K, V, mask=None: guarded(torch.softmax(scores(Q, K, mask), -2), mask) @ V,
        ),
        attention_mistake(
            "scale_after_softmax",
            "the weights were divided by sqrt(d_k) after the softmax; divide the scores before it",
            lambda Q, K, V, mask=None: sdpa(Q, K, V, mask, scale=1.0) / math.sqrt(Q.shape[-1]),
        ),
        attention_mistake(
            "all_false_rows_mean_of_v",
            "a query whose mask row is all False got the mean of V: a finite fill (-1e9, finfo.min) makes "
            "its weights uniform; give such rows zero weights",
            lambda Q, K, V, mask=None: torch.softmax(scores(Q, K, mask, fill=-1e9), -1) @ V,
        ),
        attention_mistake(
            "all_false_rows_nan",
            "a query whose mask row is all False got NaN: with a -inf fill its softmax is 0/0; give such "
            "rows zero weights",
            lambda Q, K, V, mask=None: torch.softmax(scores(Q, K, mask), -1) @ V,
        ),
        attention_mistake(
            "nan_to_num_output",
            "the output is right, but NaN flows back through the gradients: replacing NaN in the output "
            "(nan_to_num) leaves the 0/0 of all-False rows in the graph; zero those rows' weights instead",
            lambda Q, K, V, mask=None: (torch.softmax(scores(Q, K, mask), -1) @ V).nan_to_num(0.0),
        ),
        # each with the NaN of its 0/0 rows left, or replaced by zeros (nan_to_num, as many students do)
        *(
            attention_mistake(
                name, advice, staff(f"attention_{name}_{variant}".rstrip("_")), variant=variant, **STABILITY
            )
            for name, advice in STABILITY_FAMILY
            for variant in ("", "nan_to_num")
        ),
        *(
            attention_mistake("epsilon_in_denominator", EPSILON_ADVICE, staff(f"attention_epsilon_{eps}"), variant=eps)
            for eps in EPSILONS
        ),
        *(
            attention_mistake(
                "mask_shape_assumed",
                "the mask was reshaped for one shape it may have (an unsqueeze for a head dim, say), so a mask "
                "that already broadcasts gets an extra dim and the output a wrong shape; the contract allows any "
                "mask that broadcasts against (..., queries, keys): use it as it comes",
                with_softmax(torch.softmax, reshape_mask=reshape_mask),
            )
            for reshape_mask in (lambda m: m.unsqueeze(1), lambda m: m[:, None, None])
        ),
        attention_mistake(
            "float32_arithmetic",
            "your float64 result is only as accurate as float32 arithmetic: something inside computes in "
            "float32 (a .float(), or a tensor made without dtype=Q.dtype); keep Q's dtype throughout",
            lambda Q, K, V, mask=None: sdpa(Q.float(), K.float(), V.float(), mask).double(),
            **IN_FLOAT32,
        ),
    ),
}


# ---------------------------------------------------------------- crashes named from the case and the student's line


def scores_shape(args: dict[str, Any]) -> tuple[int, ...]:
    """(..., queries, keys): the shape the mask must broadcast to."""
    Q, K = args["Q"], args["K"]
    batch = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2])
    return (*batch, Q.shape[-2], K.shape[-2])


def broadcast_mask(args: dict[str, Any]) -> bool:
    """The case's mask is not the scores' own shape but broadcasts to it."""
    mask = args.get("mask")
    return mask is not None and tuple(mask.shape) != scores_shape(args)


CRASHES = (
    Crash(
        "mask_none",
        "",
        r"NoneType|got \(bool",  # ~None, None.unsqueeze, where(None, ...), masked_fill(None == 0, ...)
        "mask is optional and was None here (the unmasked cases pass mask=None); "
        "mask the scores only when `mask is not None`",
        shows_in=lambda args: "Q" in args and args.get("mask") is None,
    ),
    Crash(
        "transpose_3d_only",
        "RuntimeError",
        r"must match the size|cannot be multiplied|Expected size for first two dimensions|shape mismatch",
        "K.transpose(1, 2) swaps the last two dims of 3D inputs only: on 4D (batch, heads, keys, d_k) it swaps "
        "heads and keys; use K.transpose(-2, -1) (or K.mT), which works for any number of batch dims",
        code=r"\.transpose\(\s*(1\s*,\s*2|2\s*,\s*1)\s*\)|\.permute\(\s*0\s*,\s*2\s*,\s*1\s*\)",
        shows_in=lambda args: "Q" in args and args["Q"].dim() > 3,
    ),
    Crash(
        "mask_shape_asserted",
        "AssertionError",
        "",  # a bare `assert` says nothing: the student's line does
        "your own assert wants the mask in the scores' full shape, and this mask only broadcasts to it; the "
        "contract allows any mask that broadcasts against (..., queries, keys): drop the assert (masked_fill and "
        "torch.where broadcast the mask for you) or check with torch.broadcast_shapes",
        code=r"(?im)^\s*assert\b[^#\n]*\bmask\b[^#\n]*\b(shape|size|dim|ndim)\b",  # the statement, not a comment
        shows_in=broadcast_mask,
    ),
    Crash(
        "mask_shape_assumed",
        "",
        r"(?i)mask|shape|size",
        "your code expects the mask in one shape, and this one only broadcasts to the scores' shape; the "
        "contract allows any mask that broadcasts against (..., queries, keys): masked_fill and torch.where "
        "broadcast it for you",
        code=r"(?i)mask",
        shows_in=broadcast_mask,
    ),
)


# ---------------------------------------------------------------- what a case passed, in the contract's terms


def shape(t: torch.Tensor) -> str:
    return str(tuple(t.shape))


def attention_contract(args: dict[str, Any], error: str) -> list[str]:
    """Sentences on what an attention case passed, those the error speaks of first; every case gets one."""
    Q, K, V, mask = args["Q"], args["K"], args["V"], args.get("mask")
    dtype = str(Q.dtype).removeprefix("torch.")
    facts: list[tuple[str, str]] = []  # (what in an error's text makes it relevant, the sentence)
    if mask is None:
        facts.append((r"NoneType|mask", "mask=None: the contract makes the mask optional"))
    if Q.dtype in LOW_PRECISION and re.search(r"overflow", error):
        facts.append((r"", f"{dtype} inputs: -1e9 does not fit in {dtype} (use -inf or torch.finfo(Q.dtype).min)"))
    elif Q.dtype in LOW_PRECISION:
        facts.append((
            r"(?i)half|bfloat|scalar type|dtype|float",
            f"{dtype} inputs: something promoted the weights to float32 (a float32 mask, constant or .float()), "
            f"and a matmul with V, still {dtype}, refused them: the contract keeps Q's dtype throughout",
        ))  # fmt: skip
    if broadcast_mask(args):
        facts.append((
            r"(?i)mask|shape|size|dim|broadcast|index|view|expand",
            f"a mask of shape {shape(mask)}, which broadcasts to the scores' {scores_shape(args)}: the contract "
            "allows any mask that broadcasts",
        ))  # fmt: skip
    if mask is not None and not bool(mask.any(-1).all()):
        facts.append((
            r"(?i)^AssertionError|attend|nan|empty|all",
            f"a mask in which {int((~mask.any(-1)).sum())} queries may attend to no key: the contract allows "
            "all-False rows and gives those queries zero outputs and gradients",
        ))  # fmt: skip
    if Q.dim() != 3:
        facts.append((
            r"(?i)shape|size|dim|must match|multiplied|view|3D",
            f"{Q.dim()}D inputs (Q of shape {shape(Q)}): the contract allows any number of leading batch dims",
        ))  # fmt: skip
    if not all(t.is_contiguous() for t in (Q, K, V)):
        facts.append((
            r"(?i)view|stride|contiguous",
            "Q, K, V as strided views (not contiguous, as heads split by a transpose are): the contract allows "
            "any layout",
        ))  # fmt: skip
    if Q.requires_grad:
        facts.append((
            r"(?i)in-?place|leaf|grad",
            "Q, K, V that require gradients: the contract leaves the inputs unchanged and lets gradients flow to "
            "them",
        ))  # fmt: skip
    if K.shape[-1] != V.shape[-1] or Q.shape[-2] != K.shape[-2]:
        facts.append((
            r"(?i)cannot be multiplied|mat1|mat2|d_k|d_v|queries|keys",
            f"Q {shape(Q)}, K {shape(K)}, V {shape(V)}: the contract allows queries != keys and d_k != d_v",
        ))  # fmt: skip
    plain = f"Q {shape(Q)}, K {shape(K)}, V {shape(V)} in {dtype}, mask {'None' if mask is None else shape(mask)}"
    return chosen(facts, error, plain + ": shapes and a dtype the contract allows")


def softmax_contract(args: dict[str, Any], error: str) -> list[str]:
    x, dim = args["x"], args["dim"]
    dtype = str(x.dtype).removeprefix("torch.")
    facts = [(r"(?i)dim|shape|size|index", f"dim={dim} of a {shape(x)} input: the contract allows any dim")]
    if x.abs().max() > 1e3:
        facts.append((r"(?i)inf|nan|overflow", "inputs as large as +-1e4: the contract asks for exact results there"))
    if x.requires_grad:
        facts.append((r"(?i)in-?place|leaf|grad", "an input that requires gradients: the contract lets them flow"))
    return chosen(facts, error, f"a {shape(x)} input in {dtype}, dim={dim}: the contract allows these")


def chosen(facts: list[tuple[str, str]], error: str, plain: str) -> list[str]:
    """The sentences whose words the error uses; all of them if it uses none; the plain one if there are none."""
    relevant = [sentence for pattern, sentence in facts if re.search(pattern, error)]
    return relevant or [sentence for _, sentence in facts] or [plain]
