"""Every graded case of this assignment, defined once; the known mistakes are in tests/mistakes.py.

The students' pytest run (tests/test_*.py) and the grader both read CASES. Each case's
fixture (its inputs, and the expected values from a float64 oracle built on torch's own
softmax and scaled_dot_product_attention) is made by `uv run cs-basics fixtures`. The
harness (`cs_basics.harness.cases`) prepares the arguments, computes the gradients, checks
every value and names the mistake (tests/mistakes.py) that a wrong answer reproduces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from cs_basics.harness.cases import Case, CheckContext, Tensors, Tolerances, check_outputs, randn
from cs_basics.harness.compare import Tolerance
from cs_basics.harness.problem import Problem
from tests.mistakes import ATTENTION, CRASHES, MISTAKES, SOFTMAX, attention_contract, softmax_contract

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


def offset_inputs(seed: int) -> Tensors:
    """Rows of scores offset by up to ~1e4 but spread less than 88 within a row, computed exactly in float32:
    no maximum subtracted overflows each row, one maximum for all leaves only the top row, the mean works."""
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randint(-100, 101, (2, 6, 16), generator=gen).float()
    K = torch.randint(-100, 101, (1, 1, 16), generator=gen).float().expand(2, 8, 16).clone()
    K[..., :2] += torch.randint(-1, 2, (2, 8, 2), generator=gen).float()  # keys differ in two dims only
    return {"Q": Q, "K": K, "V": torch.randn(2, 8, 4, generator=gen)}


def weights_inputs(seed: int) -> Tensors:
    inputs = attention_inputs(seed, (2, 5, 8), (2, 7, 8), (2, 7, 7), random_mask(seed, 2, 5, 7), grad=False)
    inputs["V"] = torch.eye(7).expand(2, 7, 7).clone()
    return inputs


def all_false_inputs(seed: int) -> Tensors:
    mask = random_mask(seed, 2, 6, 5)
    mask[0, 1] = mask[0, 4] = mask[1, 2] = False
    return attention_inputs(seed, (2, 6, 8), (2, 5, 8), (2, 5, 4), mask, grad=True)


def zero_score_inputs(seed: int) -> Tensors:
    """Keys of all zeros (padding left unmasked) score exactly 0, and every query may attend to one of them: a 0
    score is attended like any other. Each query also sees key 0, which is not zero."""
    mask = random_mask(seed, 2, 5, 6)
    mask[..., 0] = mask[..., 3] = True
    inputs = attention_inputs(seed, (2, 5, 8), (2, 6, 8), (2, 6, 4), mask, grad=False)
    inputs["K"][:, 3] = 0.0
    inputs["K"][1, 5] = 0.0
    return inputs


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


# ---------------------------------------------------------------- tolerances beyond the fixed ones


def low_precision(ctx: CheckContext) -> Tolerances:
    """PyTorch's recipe: the error of its own SDPA in this dtype, with a floor and a fudge factor."""
    dtype, device = ctx.case.dtype, ctx.args["Q"].device
    Q, K, V = (ctx.inputs[n].to(device, dtype) for n in "QKV")
    mask = ctx.inputs.get("mask")
    reference = F.scaled_dot_product_attention(Q, K, V, attn_mask=None if mask is None else mask.to(device))
    high = ctx.expected["out"].to(reference.device)
    error = (reference.double() - high).abs()
    floor = LOW_PRECISION_FLOOR[dtype]
    rel = (error / high.abs()).nan_to_num(nan=floor.rtol, posinf=floor.rtol).max().item()
    atol = max(error.max().item(), floor.atol) * LOW_PRECISION_FUDGE
    tol = Tolerance(atol=atol, rtol=min(max(rel, floor.rtol) * LOW_PRECISION_FUDGE, 1.0))
    return tol, tol


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


# ---------------------------------------------------------------- the problems: float64 oracles on torch's own

SOFTMAX_PROBLEM = Problem(
    SOFTMAX,
    calls={"run_softmax(x, dim=dim)": torch.softmax},
    tolerances=TOLERANCES,
    mistakes=MISTAKES[SOFTMAX],
    contract=softmax_contract,
)
ATTENTION_PROBLEM = Problem(
    ATTENTION,
    calls={
        "run_scaled_dot_product_attention(Q, K, V, mask)": lambda Q, K, V, mask: F.scaled_dot_product_attention(
            Q, K, V, attn_mask=mask
        )
    },
    tolerances=TOLERANCES,
    mistakes=MISTAKES[ATTENTION],
    crashes=CRASHES,
    contract=attention_contract,
)


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
    tolerance = low_precision if dtype in LOW_PRECISION_FLOOR else None
    return ATTENTION_PROBLEM.case(test, param, seed, make, check=check, dtype=dtype, view=view, tolerance=tolerance)


def softmax(
    param: str,
    seed: int,
    dim: int,
    shift: float = 0.0,
    grad: bool = False,
    dtype: torch.dtype = torch.float32,
    spread: float = 1.0,
) -> Case:
    """Values of scale 3; the first slice shifted up by `shift`, the second down, the third spread wider."""

    def make(seed: int) -> Tensors:
        x = randn(seed, 4, 6, 10) * 3
        x[0] += shift
        x[1] -= shift
        x[2] *= spread
        return {"x": x} | ({"grad_out": randn(seed + 1, 4, 6, 10)} if grad else {})

    return SOFTMAX_PROBLEM.case("test_softmax", param, seed, make, dtype=dtype, dim=dim)


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
    # no max subtracted, one max for the whole tensor, the mean subtracted: each breaks other slices here
    softmax("wide_rows", 16, dim=-1, shift=1e4, spread=300),
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
    attention(SDPA_3D, "scores_offset_1e4", 29, offset_inputs),
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
    attention(SDPA_MASK, "zero_scores", 64, zero_score_inputs),
]
