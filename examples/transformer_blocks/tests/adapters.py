"""Where the tests meet your code: each adapter calls one function of your package (CS336's signatures).

The graded tests call only these functions. If your functions live elsewhere or take
other arguments, change the one line in each body, not the signature.
"""

from __future__ import annotations

from jaxtyping import Float, Int
from torch import Tensor

from cs_basics_blocks import layers


def run_rmsnorm(
    d_model: int, eps: float, weights: Float[Tensor, " d_model"], in_features: Float[Tensor, " ... d_model"]
) -> Float[Tensor, " ... d_model"]:
    """RMSNorm of `in_features` over its last dim (of size d_model), scaled by `weights`."""
    return layers.rmsnorm(in_features, weights, eps)


def run_silu(in_features: Float[Tensor, " ..."]) -> Float[Tensor, " ..."]:
    """SiLU, elementwise."""
    return layers.silu(in_features)


def run_swiglu(
    d_model: int,
    d_ff: int,
    w1_weight: Float[Tensor, " d_ff d_model"],
    w2_weight: Float[Tensor, " d_model d_ff"],
    w3_weight: Float[Tensor, " d_ff d_model"],
    in_features: Float[Tensor, " ... d_model"],
) -> Float[Tensor, " ... d_model"]:
    """The SwiGLU feed-forward network: W2 (SiLU(W1 x) * W3 x)."""
    return layers.swiglu(in_features, w1_weight, w2_weight, w3_weight)


def run_rope(
    d_k: int,
    theta: float,
    max_seq_len: int,
    in_query_or_key: Float[Tensor, " ... seq d_k"],
    token_positions: Int[Tensor, " ... seq"],
) -> Float[Tensor, " ... seq d_k"]:
    """RoPE: rotate the query or key at each token's position (an integer tensor)."""
    return layers.rope(in_query_or_key, token_positions, theta)
