"""The blocks of a Llama-style Transformer, each a function of tensors (CS336 assignment 1's adapters call them).

Write each from torch's primitives: the graded tests forbid torch's own RMSNorm and SiLU.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor


def rmsnorm(x: Float[Tensor, " ... d_model"], weight: Float[Tensor, " d_model"], eps: float) -> Float[Tensor, " ..."]:
    """x / sqrt(mean(x^2 over the last dim) + eps) * weight: the same shape and dtype as x."""
    # BEGIN SOLUTION
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    # END SOLUTION


def silu(x: Float[Tensor, " ..."]) -> Float[Tensor, " ..."]:
    """x * sigmoid(x), elementwise."""
    # BEGIN SOLUTION
    return x * torch.sigmoid(x)
    # END SOLUTION


def swiglu(
    x: Float[Tensor, " ... d_model"],
    w1: Float[Tensor, " d_ff d_model"],
    w2: Float[Tensor, " d_model d_ff"],
    w3: Float[Tensor, " d_ff d_model"],
) -> Float[Tensor, " ... d_model"]:
    """W2 (SiLU(W1 x) * W3 x): the feed-forward network of Llama, on the last dim of x."""
    # BEGIN SOLUTION
    return (silu(x @ w1.mT) * (x @ w3.mT)) @ w2.mT
    # END SOLUTION


def rope(x: Float[Tensor, " ... seq d_k"], positions: Int[Tensor, " ... seq"], theta: float) -> Float[Tensor, " ..."]:
    """Rotate each pair (x[2k], x[2k+1]) of x by the angle position * theta^(-2k/d_k) (RoPE, Su et al. 2021).

    `positions` holds integers: each token's position in its sequence, broadcasting against x's leading dims."""
    # BEGIN SOLUTION
    d_k = x.shape[-1]
    inverse_frequencies = theta ** (-torch.arange(0, d_k, 2, device=x.device, dtype=torch.float32) / d_k)
    angles = positions[..., None].to(torch.float32) * inverse_frequencies  # (..., seq, d_k / 2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
    # END SOLUTION
