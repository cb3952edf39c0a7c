"""Every graded case of this assignment, defined once, with the known mistakes of each problem.

The students' pytest run (tests/test_*.py) and the grader both read CASES. Each case's
fixture (its inputs, and the expected values from a float64 oracle built on torch's own
softmax and scaled_dot_product_attention) is made by `uv run cs-basics fixtures`. The
harness (`cs_basics.harness.cases`) prepares the arguments, computes the gradients, checks
every value and names the mistake in MISTAKES that a wrong answer reproduces.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from cs_basics.harness.cases import Case, CheckContext, Tensors, Tolerances, check_outputs, randn
from cs_basics.harness.compare import Tolerance
from cs_basics.harness.diagnosis import Mistake

SOFTMAX = "softmax"
ATTENTION = "scaled_dot_product_attention"

FLOAT32 = Tolerance(atol=1e-6, rtol=1e-5)
FLOAT32_GRAD = Tolerance(atol=1e-5, rtol=1e-4)
FLOAT64 = Tolerance(atol=1e-12, rtol=1e-10)
TOLERANCES = {torch.float32: (FLOAT32, FLOAT32_GRAD), torch.float64: (FLOAT64, FLOAT64)}
# Floors and fudge for half precision, as in PyTorch's own attention tests: the
# tolerance is the error of torch's SDPA in that dtype against the float64 oracle.
LOW_PRECISION_FLOOR = {torch.float16: Tolerance(1e-3, 1e-3), torch.bfloat16: Tolerance(1e-3, 1.6e-2)}
LOW_PRECISION_FUDGE = 4.0


# ---------------------------------------------------------------- inputs


def random_mask(seed: int, *shape: int) -> torch.Tensor:
    """A bool mask (True = attend) in which every query may attend to at least one key."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(*shape, generator=gen) > 0.5
    keep = torch.randint(shape[-1], (*shape[:-1], 1), generator=gen)
    return mask.scatter(-1, keep, True)


def causal_mask(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).tril()


def attention_inputs(
    seed: int, q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...], mask: torch.Tensor | None, grad: bool
) -> Tensors:
    inputs = {"Q": randn(seed, *q), "K": randn(seed + 1, *k), "V": randn(seed + 2, *v)}
    if mask is not None:
        inputs["mask"] = mask
    if grad:
        inputs["grad_out"] = randn(seed + 3, *q[:-1], v[-1])
    return inputs


def cs336_inputs(mask: bool, heads: int | None = None) -> Tensors:
    """The inputs of CS336 assignment 1's attention snapshots (its tests/conftest.py)."""
    torch.manual_seed(1)
    Q = torch.randn(4, 12, 64)
    torch.manual_seed(2)
    K = torch.randn(4, 16, 64)
    torch.manual_seed(3)
    V = torch.randn(4, 16, 64)
    torch.manual_seed(5)
    M = torch.randn(4, 12, 16) > 0.5
    inputs = {"Q": Q, "K": K, "V": V} | ({"mask": M} if mask else {})
    if heads:  # "(batch head) seq d -> batch head seq d"
        inputs = {name: t.reshape(t.shape[0] // heads, heads, *t.shape[1:]) for name, t in inputs.items()}
    return inputs


def integer_inputs(seed: int) -> Tensors:
    """Scores of magnitude ~1e4 that float32 computes exactly: integer Q and K, d_k = 16 (scale 1/4)."""
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randint(-100, 101, (2, 6, 16), generator=gen).float()
    K = torch.randint(-100, 101, (2, 8, 16), generator=gen).float()
    K[:, 5] = K[:, 2]  # tied keys split their weight exactly in half
    V = torch.randn(2, 8, 4, generator=gen)
    return {"Q": Q, "K": K, "V": V, "mask": random_mask(seed, 2, 6, 8)}


def weights_inputs(seed: int) -> Tensors:
    inputs = attention_inputs(seed, (2, 5, 8), (2, 7, 8), (2, 7, 7), random_mask(seed, 2, 5, 7), grad=False)
    inputs["V"] = torch.eye(7).expand(2, 7, 7).clone()
    return inputs


def all_false_inputs(seed: int) -> Tensors:
    mask = random_mask(seed, 2, 6, 5)
    mask[0, 1] = mask[0, 4] = mask[1, 2] = False
    return attention_inputs(seed, (2, 6, 8), (2, 5, 8), (2, 5, 4), mask, grad=True)


def noncontiguous(args: dict[str, Any]) -> dict[str, Any]:
    """The same values as strided views: transposed storage, a slice, every other element."""
    args["Q"] = args["Q"].mT.contiguous().mT
    args["K"] = torch.cat([args["K"], args["K"]], dim=-1)[..., : args["K"].shape[-1]]
    args["V"] = torch.stack([args["V"], args["V"]], dim=-1)[..., 0]
    args["mask"] = args["mask"].mT.contiguous().mT
    return args


def heads_transposed(args: dict[str, Any]) -> dict[str, Any]:
    """(batch, heads, seq, d) views of (batch, seq, heads, d) storage, as multi-head attention makes them."""
    for name in ("Q", "K", "V"):
        args[name] = args[name].transpose(1, 2).contiguous().transpose(1, 2)
    return args


# ---------------------------------------------------------------- oracles (float64, torch's own)


def attention_oracle(inputs: Tensors, dtype: torch.dtype = torch.float64, device: str = "cpu") -> Tensors:
    Q, K, V = (inputs[n].to(device, dtype).requires_grad_() for n in "QKV")
    mask = inputs.get("mask")
    out = F.scaled_dot_product_attention(Q, K, V, attn_mask=None if mask is None else mask.to(device))
    expected = {"out": out.detach()}
    if "grad_out" in inputs:
        out.backward(inputs["grad_out"].to(device, dtype))
        expected |= {f"grad.{n}": t.grad for n, t in zip("QKV", (Q, K, V), strict=True)}
    return expected


def softmax_oracle(inputs: Tensors, dim: int) -> Tensors:
    x = inputs["x"].double().requires_grad_()
    out = torch.softmax(x, dim=dim)
    expected = {"out": out.detach()}
    if "grad_out" in inputs:
        out.backward(inputs["grad_out"].double())
        expected["grad.x"] = x.grad
    return expected


def low_precision(ctx: CheckContext) -> Tolerances:
    """PyTorch's recipe: the error of its own SDPA in this dtype, with a floor and a fudge factor."""
    dtype, device = ctx.case.dtype, ctx.args["Q"].device
    reference = attention_oracle(ctx.inputs, dtype=dtype, device=device)["out"]
    high = ctx.expected["out"].to(reference.device)
    error = (reference.double() - high).abs()
    floor = LOW_PRECISION_FLOOR[dtype]
    rel = (error / high.abs()).nan_to_num(nan=floor.rtol, posinf=floor.rtol).max().item()
    atol = max(error.max().item(), floor.atol) * LOW_PRECISION_FUDGE
    tol = Tolerance(atol=atol, rtol=min(max(rel, floor.rtol) * LOW_PRECISION_FUDGE, 1.0))
    return tol, tol


# ---------------------------------------------------------------- the student's code, through the adapters


def call_attention(adapters: Any, args: dict[str, Any]) -> dict[str, Any]:
    return {"out": adapters.run_scaled_dot_product_attention(args["Q"], args["K"], args["V"], args.get("mask"))}


def call_softmax(adapters: Any, args: dict[str, Any]) -> dict[str, Any]:
    return {"out": adapters.run_softmax(args["x"], dim=args["dim"])}


# ---------------------------------------------------------------- checks beyond the values


def check_weights(ctx: CheckContext) -> None:
    """With V = identity the output is the attention weights themselves."""
    check_outputs(ctx)
    weights, mask = ctx.outputs["out"].detach().cpu(), ctx.args["mask"].cpu()
    if (weights[~mask] != 0).any():
        ctx.fail(f"{int((weights[~mask] != 0).sum())} masked (False) positions have nonzero weight")
    sums = weights.double().sum(-1)
    worst = (sums - 1).abs().max().item()
    if worst > 1e-6:
        ctx.fail(f"the weights of the attended (True) keys sum to 1 +- {worst:.2e}, not 1 +- 1e-6")


def check_all_false_rows(ctx: CheckContext) -> None:
    """Queries that may attend to nothing get exactly zero output and zero gradient, no NaN."""
    for name, value in ctx.outputs.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.isnan().any():
            message = f"{name} holds NaN: a query with an all-False mask row must give zeros, not 0/0"
            ctx.fail(message, diagnose=name if name in ctx.expected else None)
    check_outputs(ctx)
    empty = ~ctx.args["mask"].cpu().any(-1)  # (..., queries)
    for name in ("out", "grad.Q"):
        rows = ctx.outputs[name].detach().cpu()[empty]
        if (rows != 0).any():
            ctx.fail(f"{name}: rows of queries with an all-False mask must be exactly 0")


# ---------------------------------------------------------------- known mistakes (float64, on a case's inputs)
# Built on torch's own softmax and attention where they can be, which a student may not call:
# the mistakes ship with the tests (the students' pytest run names them too), never a solution.


def scores(Q, K, mask=None, *, scale=None, fill=-math.inf) -> torch.Tensor:
    """Q K^T times the scale (1/sqrt(d_k) unless given), filled with `fill` where the mask is False."""
    s = Q @ K.mT * (Q.shape[-1] ** -0.5 if scale is None else scale)  # (..., queries, keys)
    return s if mask is None else s.masked_fill(~mask, fill)


def sdpa(Q, K, V, mask=None, scale=None) -> torch.Tensor:
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, scale=scale)


def unshifted_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.exp(x) / torch.exp(x).sum(dim, keepdim=True)


def guarded(weights: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Zero weights for queries whose mask row is all False, as they must be: one mistake at a time."""
    return weights if mask is None else weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)


def attention_mistake(name: str, advice: str, wrong: Callable, **kw: Any) -> Mistake:
    return Mistake(name, advice, {"run_scaled_dot_product_attention": wrong}, **kw)


def softmax_mistake(name: str, advice: str, wrong: Callable, **kw: Any) -> Mistake:
    return Mistake(name, advice, {"run_softmax": wrong}, **kw)


# float32 arithmetic shows only on float64 cases, within float32's tolerance; where exp
# overflows (no max shift) depends on the dtype: those mistakes are computed in the case's dtype
IN_FLOAT32 = {"dtypes": (torch.float64,), "tolerance": (FLOAT32, FLOAT32_GRAD)}
MISTAKES = {
    SOFTMAX: (
        softmax_mistake(
            "no_max_shift",
            "exp overflowed to inf (or every term underflowed to 0) because the maximum was not subtracted "
            "first; subtract the maximum along `dim` (keepdim=True), which leaves the softmax unchanged",
            unshifted_softmax,
            in_case_dtype=True,
        ),
        softmax_mistake(
            "global_max",
            "you subtracted the maximum of the whole tensor, so slices far below it underflow to 0/0; "
            "subtract each slice's own maximum along `dim`",
            lambda x, dim: unshifted_softmax(x - x.max(), dim),
            in_case_dtype=True,
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
            lambda x, dim: torch.exp(x - x.amax(dim, keepdim=True)) / torch.exp(x - x.amax(dim, keepdim=True)).sum(),
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
        attention_mistake(
            "no_max_shift",
            "exp overflowed to inf because your softmax does not subtract the maximum first; subtract "
            "each row's maximum of the scores (keepdim=True), which leaves the softmax unchanged",
            lambda Q, K, V, mask=None: guarded(unshifted_softmax(scores(Q, K, mask), -1), mask) @ V,
            in_case_dtype=True,
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


# ---------------------------------------------------------------- the cases


def attention(
    test: str,
    param: str,
    seed: int,
    make: Callable[[int], Tensors],
    check: Callable[[CheckContext], None] = check_outputs,
    *,
    dtype: torch.dtype = torch.float32,
    view: Callable | None = None,
) -> Case:
    tolerance = low_precision if dtype in LOW_PRECISION_FLOOR else TOLERANCES
    return Case(
        ATTENTION, test, param, seed, make, attention_oracle, call_attention, tolerance, check,
        dtype=dtype, view=view, mistakes=MISTAKES[ATTENTION],
    )  # fmt: skip


def softmax(
    param: str, seed: int, dim: int, shift: float = 0.0, grad: bool = False, dtype: torch.dtype = torch.float32
) -> Case:
    def make(seed: int) -> Tensors:
        x = randn(seed, 4, 6, 10) * 3
        x[0] += shift
        x[1] -= shift
        return {"x": x} | ({"grad_out": randn(seed + 1, 4, 6, 10)} if grad else {})

    oracle = functools.partial(softmax_oracle, dim=dim)
    return Case(
        SOFTMAX, "test_softmax", param, seed, make, oracle, call_softmax, TOLERANCES,
        dtype=dtype, constants={"dim": dim}, mistakes=MISTAKES[SOFTMAX],
    )  # fmt: skip


def shapes(q, k, v, mask=None, grad=False):
    return lambda seed: attention_inputs(seed, q, k, v, mask(seed) if mask else None, grad)


SDPA_3D = "test_scaled_dot_product_attention"
SDPA_4D = "test_4d_scaled_dot_product_attention"
SDPA_MASK = "test_scaled_dot_product_attention_mask"

CASES: list[Case] = [
    softmax("last_dim", 10, dim=-1),
    softmax("dim_0", 11, dim=0),
    softmax("dim_1", 12, dim=1),
    softmax("inputs_near_1e4", 13, dim=-1, shift=1e4),
    softmax("grad", 14, dim=-1, grad=True),
    softmax("float64", 15, dim=-2, dtype=torch.float64),
    # 3D (batch, seq, d)
    attention(SDPA_3D, "mask", 0, lambda seed: cs336_inputs(mask=True)),
    attention(SDPA_3D, "no_mask", 0, lambda seed: cs336_inputs(mask=False)),
    attention(SDPA_3D, "causal_mask", 20, shapes((2, 10, 16), (2, 10, 16), (2, 10, 24), lambda s: causal_mask(10))),
    attention(SDPA_3D, "d_k_ne_d_v", 21, shapes((3, 5, 8), (3, 7, 8), (3, 7, 20), lambda s: random_mask(s, 3, 5, 7))),
    attention(SDPA_3D, "grad", 22, shapes((2, 6, 16), (2, 9, 16), (2, 9, 12), lambda s: random_mask(s, 2, 6, 9), True)),
    attention(SDPA_3D, "grad_no_mask", 23, shapes((2, 6, 16), (2, 9, 16), (2, 9, 12), grad=True)),
    attention(
        SDPA_3D,
        "noncontiguous",
        24,
        shapes((2, 7, 16), (2, 9, 16), (2, 9, 8), lambda s: random_mask(s, 2, 7, 9)),
        view=noncontiguous,
    ),
    attention(SDPA_3D, "scores_near_1e4", 25, integer_inputs),
    attention(
        SDPA_3D,
        "float64",
        26,
        shapes((2, 5, 8), (2, 6, 8), (2, 6, 4), lambda s: random_mask(s, 2, 5, 6), True),
        dtype=torch.float64,
    ),
    *(
        attention(
            SDPA_3D, name, seed, shapes((2, 5, 8), (2, 6, 8), (2, 6, 4), lambda s: random_mask(s, 2, 5, 6)), dtype=dtype
        )
        for name, seed, dtype in (("float16", 27, torch.float16), ("bfloat16", 28, torch.bfloat16))
    ),
    # 4D (batch, heads, seq, d)
    attention(SDPA_4D, "mask", 0, lambda seed: cs336_inputs(mask=True, heads=2)),
    attention(SDPA_4D, "no_mask", 0, lambda seed: cs336_inputs(mask=False, heads=2)),
    attention(
        SDPA_4D, "causal_mask", 40, shapes((2, 3, 8, 16), (2, 3, 8, 16), (2, 3, 8, 16), lambda s: causal_mask(8))
    ),
    attention(
        SDPA_4D,
        "padding_mask",
        41,
        shapes(
            (3, 2, 6, 8),
            (3, 2, 6, 8),
            (3, 2, 6, 8),
            lambda s: torch.arange(6) < torch.tensor([6, 4, 1])[:, None, None, None],
        ),
    ),
    attention(
        SDPA_4D,
        "grad",
        42,
        shapes((2, 2, 5, 8), (2, 2, 7, 8), (2, 2, 7, 6), lambda s: random_mask(s, 2, 2, 5, 7), True),
    ),
    attention(
        SDPA_4D,
        "heads_transposed",
        43,
        shapes((2, 4, 6, 8), (2, 4, 6, 8), (2, 4, 6, 8), lambda s: causal_mask(6)),
        view=heads_transposed,
    ),
    # boolean-mask behaviour
    attention(SDPA_MASK, "weights", 60, weights_inputs, check=check_weights),
    attention(
        SDPA_MASK,
        "padding_3d",
        61,
        shapes((3, 5, 8), (3, 7, 8), (3, 7, 4), lambda s: torch.arange(7) < torch.tensor([7, 3, 1])[:, None, None]),
    ),
    attention(
        SDPA_MASK,
        "broadcast_5d",
        62,
        shapes((2, 2, 3, 4, 8), (2, 2, 3, 6, 8), (2, 2, 3, 6, 4), lambda s: random_mask(s, 2, 1, 3, 4, 6), True),
    ),
    attention(SDPA_MASK, "all_false_rows", 63, all_false_inputs, check=check_all_false_rows),
]
