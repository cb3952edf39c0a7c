"""Every graded case of this assignment, defined once.

The students' pytest run (tests/test_*.py) and the grader both read CASES. Each case's
fixture (its inputs, and the expected values from a float64 oracle built on torch's own
softmax and scaled_dot_product_attention) is made by `uv run cs-basics fixtures`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from cs_basics.harness.cases import Case, CheckContext, Tensors
from cs_basics.harness.compare import Tolerance
from cs_basics.harness.device import supports_float64

SOFTMAX = "softmax"
ATTENTION = "scaled_dot_product_attention"

FLOAT32 = Tolerance(atol=1e-6, rtol=1e-5)
FLOAT32_GRAD = Tolerance(atol=1e-5, rtol=1e-4)
FLOAT64 = Tolerance(atol=1e-12, rtol=1e-10)
# Floors and fudge for half precision, as in PyTorch's own attention tests: the
# tolerance is the error of torch's SDPA in that dtype against the float64 oracle.
LOW_PRECISION_FLOOR = {torch.float16: Tolerance(1e-3, 1e-3), torch.bfloat16: Tolerance(1e-3, 1.6e-2)}
LOW_PRECISION_FUDGE = 4.0


# ---------------------------------------------------------------- inputs


def randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


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


# ---------------------------------------------------------------- calling the student's code


def backward(out: Any, grad_out: torch.Tensor | None, leaves: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Gradients of the leaves for a fixed upstream gradient; none if the output is cut from them."""
    if grad_out is None or not isinstance(out, torch.Tensor) or not out.requires_grad:
        return {}
    if out.shape != grad_out.shape:
        return {}
    # the same vector-Jacobian product as out.backward(grad_out), whose shape check imports sympy (~1 s)
    (out * grad_out).sum().backward()
    return {f"grad.{name}": leaf.grad for name, leaf in leaves.items()}


def call_attention(adapters: Any, args: dict[str, Any]) -> dict[str, Any]:
    Q, K, V, mask = args["Q"], args["K"], args["V"], args.get("mask")
    out = adapters.run_scaled_dot_product_attention(Q, K, V, mask)
    outputs = {"out": out} | backward(out, args.get("grad_out"), {"Q": Q, "K": K, "V": V})
    return outputs | {f"after.{n}": args[n] for n in ("Q", "K", "V", "mask") if n in args}


def call_softmax(adapters: Any, args: dict[str, Any]) -> dict[str, Any]:
    out = adapters.run_softmax(args["x"], dim=args["dim"])
    return {"out": out, "after.x": args["x"]} | backward(out, args.get("grad_out"), {"x": args["x"]})


def prepare(
    inputs: Tensors, device: torch.device, *, dtype: torch.dtype = torch.float32, view: Callable | None = None
) -> dict[str, Any]:
    """Inputs as the student's code gets them: fresh copies on the device, in `dtype`, leaves that
    need grad. float64 goes to the CPU on devices without it (MPS)."""
    if dtype == torch.float64 and not supports_float64(device):
        device = torch.device("cpu")
    needs_grad = "grad_out" in inputs
    args: dict[str, Any] = {}
    for name, t in inputs.items():
        t = t.to(device, copy=True) if t.dtype == torch.bool else t.to(device, dtype, copy=True)
        if needs_grad and name != "grad_out" and t.is_floating_point():
            t.requires_grad_()
        args[name] = t
    return view(args) if view else args


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


# ---------------------------------------------------------------- checks


def check_unchanged(ctx: CheckContext) -> None:
    for name, original in ctx.args.items():
        after = ctx.outputs.get(f"after.{name}")
        if isinstance(original, torch.Tensor) and after is not None:
            same = after.shape == original.shape and torch.equal(after.detach().cpu(), original.detach().cpu())
            if not same:
                ctx.fail(f"the input {name} was modified in place; compute on new tensors instead")


def check_outputs(ctx: CheckContext, tol: Tolerance, grad_tol: Tolerance, first: str) -> None:
    """The output, then every gradient, against the oracle; then the inputs are untouched."""
    dtype, device = ctx.args[first].dtype, ctx.args[first].device
    ctx.close("out", tol, dtype=dtype, device=device)
    for name in ctx.expected:
        if not name.startswith("grad."):
            continue
        if ctx.outputs.get(name) is None:
            ctx.fail(
                f"no gradient reached {name.removeprefix('grad.')}: the output is cut from the "
                "autograd graph (.detach(), .data, torch.no_grad() or a trip through numpy?)"
            )
        ctx.close(name, grad_tol, dtype=dtype, device=device)
    check_unchanged(ctx)


def low_precision_tolerance(ctx: CheckContext, name: str) -> Tolerance:
    """PyTorch's recipe: the error of its own SDPA in this dtype, with a floor and a fudge factor."""
    dtype = ctx.args["Q"].dtype
    reference = attention_oracle(ctx.inputs, dtype=dtype, device=ctx.args["Q"].device)[name]
    high = ctx.expected[name].to(reference.device)
    error = (reference.double() - high).abs()
    floor = LOW_PRECISION_FLOOR[dtype]
    rel = (error / high.abs()).nan_to_num(nan=floor.rtol, posinf=floor.rtol).max().item()
    atol = max(error.max().item(), floor.atol) * LOW_PRECISION_FUDGE
    return Tolerance(atol=atol, rtol=min(max(rel, floor.rtol) * LOW_PRECISION_FUDGE, 1.0))


def check_attention(ctx: CheckContext) -> None:
    tol = FLOAT64 if ctx.args["Q"].dtype == torch.float64 else FLOAT32
    grad_tol = FLOAT64 if ctx.args["Q"].dtype == torch.float64 else FLOAT32_GRAD
    check_outputs(ctx, tol, grad_tol, "Q")


def check_low_precision(ctx: CheckContext) -> None:
    tol = low_precision_tolerance(ctx, "out")
    check_outputs(ctx, tol, tol, "Q")


def check_softmax(ctx: CheckContext) -> None:
    if ctx.args["x"].dtype == torch.float64:
        check_outputs(ctx, FLOAT64, FLOAT64, "x")
    else:
        check_outputs(ctx, FLOAT32, FLOAT32_GRAD, "x")


def check_weights(ctx: CheckContext) -> None:
    """With V = identity the output is the attention weights themselves."""
    check_attention(ctx)
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
            ctx.fail(f"{name} holds NaN: a query with an all-False mask row must give zeros, not 0/0")
    check_attention(ctx)
    empty = ~ctx.args["mask"].cpu().any(-1)  # (..., queries)
    for name in ("out", "grad.Q"):
        rows = ctx.outputs[name].detach().cpu()[empty]
        if (rows != 0).any():
            ctx.fail(f"{name}: rows of queries with an all-False mask must be exactly 0")


# ---------------------------------------------------------------- the cases


def attention(
    test: str, param: str, seed: int, make: Callable[[int], Tensors], check=check_attention, **prepare_kw: Any
) -> Case:
    return Case(
        problem=ATTENTION,
        test=test,
        param=param,
        seed=seed,
        make_inputs=make,
        oracle=attention_oracle,
        prepare=functools.partial(prepare, **prepare_kw),
        call=call_attention,
        check=check,
    )


def softmax(
    param: str, seed: int, dim: int, shift: float = 0.0, grad: bool = False, dtype: torch.dtype = torch.float32
) -> Case:
    def make(seed: int) -> Tensors:
        x = randn(seed, 4, 6, 10) * 3
        x[0] += shift
        x[1] -= shift
        return {"x": x} | ({"grad_out": randn(seed + 1, 4, 6, 10)} if grad else {})

    def with_dim(inputs: Tensors, device: torch.device) -> dict[str, Any]:
        return prepare(inputs, device, dtype=dtype) | {"dim": dim}

    return Case(
        problem=SOFTMAX,
        test="test_softmax",
        param=param,
        seed=seed,
        make_inputs=make,
        oracle=functools.partial(softmax_oracle, dim=dim),
        prepare=with_dim,
        call=call_softmax,
        check=check_softmax,
    )


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
            SDPA_3D,
            name,
            seed,
            shapes((2, 5, 8), (2, 6, 8), (2, 6, 4), lambda s: random_mask(s, 2, 5, 6)),
            check=check_low_precision,
            dtype=dtype,
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
    attention(SDPA_MASK, "weights", 60, lambda s: weights_inputs(s), check=check_weights),
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
    attention(SDPA_MASK, "all_false_rows", 63, lambda s: all_false_inputs(s), check=check_all_false_rows),
]


def weights_inputs(seed: int) -> Tensors:
    inputs = attention_inputs(seed, (2, 5, 8), (2, 7, 8), (2, 7, 7), random_mask(seed, 2, 5, 7), grad=False)
    inputs["V"] = torch.eye(7).expand(2, 7, 7).clone()
    return inputs


def all_false_inputs(seed: int) -> Tensors:
    mask = random_mask(seed, 2, 6, 5)
    mask[0, 1] = mask[0, 4] = mask[1, 2] = False
    return attention_inputs(seed, (2, 6, 8), (2, 5, 8), (2, 5, 4), mask, grad=True)
