"""Causal multi-head self-attention, built on the previous assignment's attention.

This is the file students write. Everything between `# BEGIN SOLUTION` and
`# END SOLUTION` is cut from the student handout and replaced by a stub.
"""

from __future__ import annotations

import torch
from cs_basics.nn.functional import scaled_dot_product_attention
from einops import einsum, rearrange
from jaxtyping import Float
from torch import Tensor


def multihead_self_attention(
    d_model: int,
    num_heads: int,
    q_proj_weight: Float[Tensor, " d_k d_in"],
    k_proj_weight: Float[Tensor, " d_k d_in"],
    v_proj_weight: Float[Tensor, " d_v d_in"],
    o_proj_weight: Float[Tensor, " d_model d_v"],
    in_features: Float[Tensor, " ... sequence_length d_in"],
) -> Float[Tensor, " ... sequence_length d_model"]:
    """Causal multi-head self-attention (Vaswani et al., 2017, section 3.2.2), without RoPE.

    The projections for all heads are one matrix multiply each: `in_features @ q_proj_weight.T`
    gives (..., seq, d_k), whose last dim splits into `num_heads` heads of d_k / num_heads,
    head i being rows [i * d_k / num_heads, (i + 1) * d_k / num_heads) of `q_proj_weight`.
    Each head runs your `cs_basics.nn.functional.scaled_dot_product_attention` with a causal
    mask (position i attends to positions 0..i); the heads are concatenated in order and
    projected by `o_proj_weight`.

    Returns:
        (..., seq, d_model), with the input's dtype and device. The inputs are not modified.
    """
    # BEGIN SOLUTION
    if q_proj_weight.shape[0] % num_heads or v_proj_weight.shape[0] % num_heads:
        raise ValueError(
            f"num_heads={num_heads} must divide the projection sizes, got q {tuple(q_proj_weight.shape)}, "
            f"v {tuple(v_proj_weight.shape)}"
        )
    Q, K, V = (
        rearrange(
            einsum(in_features, w, "... seq d_in, d_out d_in -> ... seq d_out"),
            "... seq (heads d) -> ... heads seq d",
            heads=num_heads,
        )
        for w in (q_proj_weight, k_proj_weight, v_proj_weight)
    )
    seq = in_features.shape[-2]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=in_features.device).tril()
    heads = scaled_dot_product_attention(Q, K, V, causal)  # (..., heads, seq, d_v / heads)
    concat = rearrange(heads, "... heads seq d -> ... seq (heads d)")
    return einsum(concat, o_proj_weight, "... seq d_v, d_model d_v -> ... seq d_model")
    # END SOLUTION
