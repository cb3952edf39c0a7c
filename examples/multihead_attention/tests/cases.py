"""Every graded case of the multi-head self-attention assignment, with its known mistakes. The float64 oracle,
torch's own `multi_head_attention_forward`, shares no code with the student's package or with `cs_basics`,
whose harness prepares the arguments, calls the adapter, checks and diagnoses."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from cs_basics.harness.cases import Case, CheckContext, Tensors, check_outputs, randn
from cs_basics.harness.compare import Tolerance
from cs_basics.harness.diagnosis import Mistake

PROBLEM = "multihead_self_attention"
MHA, CAUSAL = "test_multihead_self_attention", "test_multihead_self_attention_causal"
WEIGHTS = ("q_proj_weight", "k_proj_weight", "v_proj_weight", "o_proj_weight")
FLOAT32 = (Tolerance(atol=1e-5, rtol=1e-4), Tolerance(atol=1e-4, rtol=1e-3))  # weight gradients sum over batch, seq
TOLERANCES = {torch.float32: FLOAT32, torch.float64: (Tolerance(atol=1e-12, rtol=1e-10),) * 2}


def mha_inputs(seed: int, shape: tuple[int, ...], grad: bool = False, perturb: bool = False) -> Tensors:
    """in_features of `shape` (..., seq, d_model), square projections scaled like nn.Linear's init."""
    d_model = shape[-1]
    inputs = {"in_features": randn(seed, *shape)}
    inputs |= {name: randn(seed + i, d_model, d_model) / d_model**0.5 for i, name in enumerate(WEIGHTS, start=1)}
    inputs |= {"grad_out": randn(seed + 5, *shape)} if grad else {}
    if perturb:  # the same sequence with its last token changed: no earlier output may move
        inputs["perturbed"] = inputs["in_features"].clone()
        inputs["perturbed"][..., -1, :] = randn(seed + 6, *shape[:-2], d_model) * 3
    return inputs


def torch_mha(x: torch.Tensor, weights, num_heads: int, attend: str | None = "past") -> torch.Tensor:
    """torch's multi-head attention, no biases, any leading dims; attending to the "past", "future" or all (None)."""
    lead, (seq, d_model) = x.shape[:-2], x.shape[-2:]
    xb = x.reshape(-1, seq, d_model).transpose(0, 1)  # (seq, batch, d_model), torch's layout
    allowed = torch.ones(seq, seq, dtype=torch.bool)
    blocked = None if attend is None else ~(allowed.tril() if attend == "past" else allowed.triu())  # torch's polarity
    wq, wk, wv, wo = weights  # (d_model, d_model) each
    out, _ = F.multi_head_attention_forward(
        xb, xb, xb, d_model, num_heads,
        in_proj_weight=None, in_proj_bias=None, bias_k=None, bias_v=None, add_zero_attn=False,
        dropout_p=0.0, out_proj_weight=wo, out_proj_bias=None, training=False, need_weights=False,
        attn_mask=blocked, use_separate_proj_weight=True, q_proj_weight=wq, k_proj_weight=wk, v_proj_weight=wv,
    )  # fmt: skip
    return out.transpose(0, 1).reshape(*lead, seq, wo.shape[0])


def mha_oracle(inputs: Tensors, num_heads: int) -> Tensors:
    leaves = {name: inputs[name].double().requires_grad_() for name in ("in_features", *WEIGHTS)}
    out = torch_mha(leaves["in_features"], [leaves[w] for w in WEIGHTS], num_heads)
    expected = {"out": out.detach()}
    if "grad_out" in inputs:
        out.backward(inputs["grad_out"].double())
        expected |= {f"grad.{name}": leaf.grad for name, leaf in leaves.items()}
    if "perturbed" in inputs:
        with torch.no_grad():
            expected["out.perturbed"] = torch_mha(inputs["perturbed"].double(), [leaves[w] for w in WEIGHTS], num_heads)
    return expected


def call_mha(adapters, args: dict) -> dict:
    run = functools.partial(adapters.run_multihead_self_attention, args["d_model"], args["num_heads"])
    weights = [args[w] for w in WEIGHTS]
    with torch.no_grad():  # no gradient flows from the perturbed sequence
        perturbed = {"out.perturbed": run(*weights, args["perturbed"])} if "perturbed" in args else {}
    return {"out": run(*weights, args["in_features"])} | perturbed


def check_causal(ctx: CheckContext) -> None:
    """Changing the last token must leave every earlier position's output as it was."""
    out, perturbed = ctx.output("out"), ctx.output("out.perturbed")
    if isinstance(out, torch.Tensor) and isinstance(perturbed, torch.Tensor) and out.shape == perturbed.shape:
        moved = (out.detach() - perturbed)[..., :-1, :].abs().amax(dim=-1) > ctx.tolerance("out").atol  # (..., seq-1)
        if moved.any():
            ctx.fail(
                f"changing only the last token moved the output at position {int(moved.nonzero()[0, -1])}: a query "
                "must attend only to itself and earlier positions (a causal mask, True on and below the diagonal)",
                diagnose="out",
            )
    check_outputs(ctx)


def mistake(name: str, advice: str, attend: str | None = "past", interleaved: bool = False) -> Mistake:
    def wrong(d_model, num_heads, wq, wk, wv, wo, x):  # heads split '(d heads)': the right split of permuted rows
        order = torch.arange(d_model).view(-1, num_heads).T.flatten() if interleaved else torch.arange(d_model)
        return torch_mha(x, (wq[order], wk[order], wv[order], wo[:, order]), num_heads, attend)

    return Mistake(name, advice, {"run_multihead_self_attention": wrong})


MISTAKES = (
    mistake("no_causal_mask", "every position attends to the whole sequence; pass a causal mask (torch.tril)", None),
    mistake("causal_mask_flipped", "each position attends to the ones after it: use torch.tril, not triu", "future"),
    mistake("heads_interleaved", "the heads were split '(d heads)', interleaved; split '(heads d)'", interleaved=True),
)


def mha(param: str, seed: int, shape: tuple[int, ...], heads: int, *, grad=False, perturb=False, dtype=torch.float32):
    make = functools.partial(mha_inputs, shape=shape, grad=grad, perturb=perturb)
    return Case(
        PROBLEM, CAUSAL if perturb else MHA, param, seed, make, functools.partial(mha_oracle, num_heads=heads),
        call_mha, TOLERANCES, check_causal if perturb else check_outputs, dtype,
        {"d_model": shape[-1], "num_heads": heads}, ("in_features", *WEIGHTS), mistakes=MISTAKES,
    )  # fmt: skip


CASES: list[Case] = [
    mha("cs336_shape", 0, (4, 12, 64), 4),  # CS336's sizes: batch 4, seq 12, d_model 64, 4 heads
    mha("one_head", 1, (2, 6, 16), 1),
    mha("head_dim_1", 2, (2, 5, 8), 8),  # as many heads as d_model: the head split order shows
    mha("two_batch_dims", 3, (2, 3, 7, 16), 4),
    mha("unbatched", 4, (9, 16), 2),
    mha("seq_len_1", 5, (3, 1, 16), 4),
    mha("grad", 6, (2, 6, 16), 4, grad=True),
    mha("float64", 7, (2, 5, 16), 2, grad=True, dtype=torch.float64),
    mha("last_token_changed", 8, (2, 7, 16), 4, perturb=True),
]
