"""Where the tests meet your code: each adapter calls one function of your packages.

The graded tests call only these functions. If your functions live elsewhere or take
other arguments, change the one line in each body, not the signature.
"""

from __future__ import annotations

from cs_basics.nn import functional
from jaxtyping import Bool, Float
from torch import Tensor

from cs_basics_mha import attention


def run_scaled_dot_product_attention(
    Q: Float[Tensor, " ... queries d_k"],
    K: Float[Tensor, " ... keys d_k"],
    V: Float[Tensor, " ... values d_v"],
    mask: Bool[Tensor, " ... queries keys"] | None = None,
) -> Float[Tensor, " ... queries d_v"]:
    """softmax(Q K^T / sqrt(d_k)) V: your attention from the previous assignment (graded there)."""
    return functional.scaled_dot_product_attention(Q, K, V, mask)


def run_multihead_self_attention(
    d_model: int,
    num_heads: int,
    q_proj_weight: Float[Tensor, " d_k d_in"],
    k_proj_weight: Float[Tensor, " d_k d_in"],
    v_proj_weight: Float[Tensor, " d_v d_in"],
    o_proj_weight: Float[Tensor, " d_model d_v"],
    in_features: Float[Tensor, " ... sequence_length d_in"],
) -> Float[Tensor, " ... sequence_length d_out"]:
    """Causal multi-head self-attention without RoPE (Vaswani et al., 2017, section 3.2.2).

    Args:
        d_model (int): dimensionality of the input and output features.
        num_heads (int): number of heads; it divides d_k and d_v.
        q_proj_weight (Float[Tensor, "d_k d_in"]): the Q projections of all heads, stacked by
            head: rows [i * d_k / num_heads, (i + 1) * d_k / num_heads) belong to head i.
        k_proj_weight (Float[Tensor, "d_k d_in"]): the K projections, stacked the same way.
        v_proj_weight (Float[Tensor, "d_v d_in"]): the V projections, stacked the same way.
        o_proj_weight (Float[Tensor, "d_model d_v"]): the output projection of the concatenated heads.
        in_features (Float[Tensor, "... sequence_length d_in"]): any number of leading batch dims
            (none included). Position i attends to positions 0..i.

    Returns:
        Float[Tensor, "... sequence_length d_out"]: the output, with the input's dtype and device;
        the inputs are left unchanged and gradients flow to the input and all four weights.
    """
    return attention.multihead_self_attention(
        d_model, num_heads, q_proj_weight, k_proj_weight, v_proj_weight, o_proj_weight, in_features
    )
