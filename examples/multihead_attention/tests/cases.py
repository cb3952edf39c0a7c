"""Every graded case of the multi-head self-attention assignment, defined once.

The students' pytest run (tests/test_*.py) and the grader both read CASES. Each case's
fixture (its inputs, and the expected values from a float64 oracle, torch's own
`multi_head_attention_forward` with a causal mask) is made by `uv run cs-basics fixtures`.
The oracle shares no code with the student's package or with `cs_basics`.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from cs_basics.harness.cases import Case, CheckContext, Tensors
from cs_basics.harness.compare import Tolerance
from cs_basics.harness.device import supports_float64

PROBLEM = "multihead_self_attention"
MHA = "test_multihead_self_attention"
CAUSAL = "test_multihead_self_attention_causal"

WEIGHTS = ("q_proj_weight", "k_proj_weight", "v_proj_weight", "o_proj_weight")
LEAVES = ("in_features", *WEIGHTS)
FLOAT32 = Tolerance(atol=1e-5, rtol=1e-4)  # three matmuls and a softmax in float32
FLOAT32_GRAD = Tolerance(atol=1e-4, rtol=1e-3)  # weight gradients sum over batch and sequence
FLOAT64 = Tolerance(atol=1e-12, rtol=1e-10)


# ---------------------------------------------------------------- inputs


def randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def mha_inputs(seed: int, shape: tuple[int, ...], grad: bool = False, perturb: bool = False) -> Tensors:
    """in_features of `shape` (..., seq, d_model), square projections scaled like nn.Linear's init."""
    d_model = shape[-1]
    inputs = {"in_features": randn(seed, *shape)}
    for i, name in enumerate(WEIGHTS, start=1):
        inputs[name] = randn(seed + i, d_model, d_model) / d_model**0.5
    if grad:
        inputs["grad_out"] = randn(seed + 5, *shape)
    if perturb:  # the same sequence with its last token changed: no earlier output may move
        perturbed = inputs["in_features"].clone()
        perturbed[..., -1, :] = randn(seed + 6, *shape[:-2], d_model) * 3
        inputs["perturbed"] = perturbed
    return inputs


# ---------------------------------------------------------------- oracle (float64, torch's own)


def torch_mha(x: torch.Tensor, weights: list[torch.Tensor], num_heads: int) -> torch.Tensor:
    """torch.nn.functional.multi_head_attention_forward, causal, no biases, over any leading dims."""
    lead, (seq, d_model) = x.shape[:-2], x.shape[-2:]
    xb = x.reshape(-1, seq, d_model).transpose(0, 1)  # (seq, batch, d_model), torch's layout
    future = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # torch's convention: True = may NOT attend
    wq, wk, wv, wo = weights
    out, _ = F.multi_head_attention_forward(
        xb, xb, xb, d_model, num_heads,
        in_proj_weight=None, in_proj_bias=None, bias_k=None, bias_v=None, add_zero_attn=False,
        dropout_p=0.0, out_proj_weight=wo, out_proj_bias=None, training=False, need_weights=False,
        attn_mask=future, use_separate_proj_weight=True, q_proj_weight=wq, k_proj_weight=wk, v_proj_weight=wv,
    )  # fmt: skip
    return out.transpose(0, 1).reshape(*lead, seq, wo.shape[0])


def mha_oracle(inputs: Tensors, num_heads: int) -> Tensors:
    leaves = {name: inputs[name].double().requires_grad_() for name in LEAVES}
    out = torch_mha(leaves["in_features"], [leaves[w] for w in WEIGHTS], num_heads)
    expected = {"out": out.detach()}
    if "grad_out" in inputs:
        out.backward(inputs["grad_out"].double())
        expected |= {f"grad.{name}": leaf.grad for name, leaf in leaves.items()}
    if "perturbed" in inputs:
        with torch.no_grad():
            expected["out.perturbed"] = torch_mha(inputs["perturbed"].double(), [leaves[w] for w in WEIGHTS], num_heads)
    return expected


# ---------------------------------------------------------------- calling the student's code


def prepare(
    inputs: Tensors, device: torch.device, *, num_heads: int, dtype: torch.dtype = torch.float32
) -> dict[str, Any]:
    """Fresh copies on the device in `dtype`, leaves that need grad when there is an upstream
    gradient; float64 goes to the CPU on devices without it (MPS)."""
    if dtype == torch.float64 and not supports_float64(device):
        device = torch.device("cpu")
    args: dict[str, Any] = {name: t.to(device, dtype, copy=True) for name, t in inputs.items()}
    if "grad_out" in inputs:
        for name in LEAVES:
            args[name].requires_grad_()
    return args | {"d_model": inputs["o_proj_weight"].shape[0], "num_heads": num_heads}


def run(adapters: Any, args: dict[str, Any], in_features: torch.Tensor) -> Any:
    return adapters.run_multihead_self_attention(
        args["d_model"], args["num_heads"], *(args[w] for w in WEIGHTS), in_features
    )


def call_mha(adapters: Any, args: dict[str, Any]) -> dict[str, Any]:
    out = run(adapters, args, args["in_features"])
    outputs: dict[str, Any] = {"out": out}
    grad_out = args.get("grad_out")
    if grad_out is not None and isinstance(out, torch.Tensor) and out.requires_grad and out.shape == grad_out.shape:
        # the same vector-Jacobian product as out.backward(grad_out), whose shape check imports sympy (~1 s)
        (out * grad_out).sum().backward()
        outputs |= {f"grad.{name}": args[name].grad for name in LEAVES}
    if "perturbed" in args:
        with torch.no_grad():
            outputs["out.perturbed"] = run(adapters, args, args["perturbed"])
    return outputs | {f"after.{name}": args[name] for name in LEAVES}


# ---------------------------------------------------------------- checks


def check_mha(ctx: CheckContext) -> None:
    """The output, then every gradient and the perturbed output, against the oracle; inputs untouched."""
    x = ctx.args["in_features"]
    tol, grad_tol = (FLOAT64, FLOAT64) if x.dtype == torch.float64 else (FLOAT32, FLOAT32_GRAD)
    ctx.close("out", tol, dtype=x.dtype, device=x.device)
    for name in ctx.expected:
        if name.startswith("grad."):
            if ctx.outputs.get(name) is None:
                ctx.fail(
                    f"no gradient reached {name.removeprefix('grad.')}: the output is cut from the "
                    "autograd graph (.detach(), .data, torch.no_grad() or a trip through numpy?)"
                )
            ctx.close(name, grad_tol, dtype=x.dtype, device=x.device)
        elif name != "out":
            ctx.close(name, tol, dtype=x.dtype, device=x.device)
    for name in LEAVES:
        after, original = ctx.outputs.get(f"after.{name}"), ctx.args[name]
        if after is not None and not torch.equal(after.detach().cpu(), original.detach().cpu()):
            ctx.fail(f"the input {name} was modified in place; compute on new tensors instead")


def check_causal(ctx: CheckContext) -> None:
    """Changing the last token must leave every earlier position's output as it was."""
    out, perturbed = ctx.output("out"), ctx.output("out.perturbed")
    if isinstance(out, torch.Tensor) and isinstance(perturbed, torch.Tensor) and out.shape == perturbed.shape:
        moved = (out.detach()[..., :-1, :] - perturbed[..., :-1, :]).abs().amax(dim=-1)  # (..., seq - 1)
        if (moved > FLOAT32.atol).any():
            first = int((moved > FLOAT32.atol).nonzero()[0, -1])
            ctx.fail(
                f"changing only the last token moved the output at position {first} by up to "
                f"{moved.max().item():.3e}: a query must attend only to itself and earlier positions "
                "(a causal mask, True on and below the diagonal)"
            )
    check_mha(ctx)


# ---------------------------------------------------------------- the cases


def mha(
    param: str,
    seed: int,
    shape: tuple[int, ...],
    num_heads: int,
    *,
    test: str = MHA,
    grad: bool = False,
    perturb: bool = False,
    dtype: torch.dtype = torch.float32,
    check=check_mha,
) -> Case:
    return Case(
        problem=PROBLEM,
        test=test,
        param=param,
        seed=seed,
        make_inputs=functools.partial(mha_inputs, shape=shape, grad=grad, perturb=perturb),
        oracle=functools.partial(mha_oracle, num_heads=num_heads),
        prepare=functools.partial(prepare, num_heads=num_heads, dtype=dtype),
        call=call_mha,
        check=check,
    )


CASES: list[Case] = [
    mha("cs336_shape", 0, (4, 12, 64), 4),  # CS336's sizes: batch 4, seq 12, d_model 64, 4 heads
    mha("one_head", 1, (2, 6, 16), 1),
    mha("head_dim_1", 2, (2, 5, 8), 8),  # as many heads as d_model: the head split order shows
    mha("two_batch_dims", 3, (2, 3, 7, 16), 4),
    mha("unbatched", 4, (9, 16), 2),
    mha("seq_len_1", 5, (3, 1, 16), 4),
    mha("grad", 6, (2, 6, 16), 4, grad=True),
    mha("float64", 7, (2, 5, 16), 2, grad=True, dtype=torch.float64),
    mha("last_token_changed", 8, (2, 7, 16), 4, test=CAUSAL, perturb=True, check=check_causal),
]
