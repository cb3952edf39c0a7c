"""Softmax and scaled dot-product attention, written from scratch.

The graded tests call these two functions through tests/adapters.py; write them
without torch's own softmax or attention.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Bool, Float
from torch import Tensor


def softmax(in_features: Float[Tensor, " ..."], dim: int) -> Float[Tensor, " ..."]:
    """Softmax of `in_features` along `dim`, numerically stable.

    Subtracts the maximum along `dim` before exponentiating, so inputs of any
    magnitude (for example around +-1e4) give exact probabilities, never inf or
    NaN. A slice that is entirely -inf (a query that may attend to nothing) gives
    zeros rather than NaN.

    Returns a tensor of the same shape and dtype whose slices along `dim` sum to 1.
    """
    # BEGIN SOLUTION
    exp = torch.exp(in_features - _max_along(in_features, dim))  # e^(x - max x): at most 1, never inf
    total = exp.sum(dim=dim, keepdim=True)
    return exp / total.masked_fill(total == 0, 1.0)  # an all -inf slice: 0 / 1, not 0 / 0
    # END SOLUTION


def scaled_dot_product_attention(
    Q: Float[Tensor, " *batch queries d_k"],
    K: Float[Tensor, " *batch keys d_k"],
    V: Float[Tensor, " *batch keys d_v"],
    mask: Bool[Tensor, " *#batch #queries #keys"] | None = None,
) -> Float[Tensor, " *batch queries d_v"]:
    """softmax(Q K^T / sqrt(d_k)) V over the last two dimensions.

    Args:
        Q: queries, shape (..., queries, d_k); any number of leading batch dims.
        K: keys, shape (..., keys, d_k), the same batch dims as Q.
        V: values, shape (..., keys, d_v).
        mask: optional bool tensor broadcastable to (..., queries, keys).
            True means "this query may attend to this key". A (queries, keys)
            causal mask over 4D inputs and a (batch, 1, keys) padding mask both
            broadcast. A query whose row is all False gets a zero output vector
            (and zero gradients), as torch's own SDPA does since PyTorch 2.5.

    Returns:
        (..., queries, d_v), with Q's dtype and device. The inputs are not modified.

    Raises:
        TypeError: a non-floating Q, K or V, differing dtypes or devices, a non-bool mask.
        ValueError: mismatched d_k or key counts, or a mask that does not broadcast.
    """
    # BEGIN SOLUTION
    _check_attention_inputs(Q, K, V, mask)
    d_k, dtype = Q.shape[-1], Q.dtype
    if dtype in (torch.float16, torch.bfloat16):  # half precision is computed in float32
        Q, K, V = Q.float(), K.float(), V.float()
    S = Q @ K.mT  # (..., queries, keys): the scores before their scale
    if mask is not None:
        S = S.masked_fill(~mask, -math.inf)  # weight e^-inf = 0 for a key the query may not attend to
    # softmax(S / sqrt(d_k)) = softmax((S - c) / sqrt(d_k)) for c constant along a row. With c = the row's max
    # taken off before the scale, the division rounds S - c, not scores near 1e4 that differ by little
    S = S - _max_along(S, dim=-1)
    P = softmax(S / math.sqrt(d_k), dim=-1)  # (..., queries, keys): the attention weights
    return (P @ V).to(dtype)  # (..., queries, d_v)
    # END SOLUTION


# BEGIN SOLUTION
def _max_along(x: Tensor, dim: int) -> Tensor:
    """The max of `x` along `dim` (kept as a dim of size 1), without a gradient: subtracting it changes no
    softmax. 0 where the slice is all -inf, so that x - max is -inf there (e^-inf = 0), not NaN."""
    x_max = x.amax(dim=dim, keepdim=True).detach()
    return x_max.masked_fill(x_max == -math.inf, 0.0)


def _check_attention_inputs(Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None) -> None:
    """Raise a TypeError or ValueError that names the offending shapes or dtypes."""
    shapes = f"Q {tuple(Q.shape)}, K {tuple(K.shape)}, V {tuple(V.shape)}"
    for name, t in (("Q", Q), ("K", K), ("V", V)):
        if not isinstance(t, Tensor) or not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {_what(t)}")
        if t.dim() < 2:
            raise ValueError(f"{name} needs at least 2 dims (..., seq, d), got shape {tuple(t.shape)}")
    if not (Q.dtype == K.dtype == V.dtype):
        raise TypeError(f"Q, K and V must share a dtype, got {Q.dtype}, {K.dtype}, {V.dtype}")
    if not (Q.device == K.device == V.device):
        raise TypeError(f"Q, K and V must be on one device, got {Q.device}, {K.device}, {V.device}")
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(f"Q and K must have the same d_k (last dim): {shapes}")
    if K.shape[-2] != V.shape[-2]:
        raise ValueError(f"K and V must have the same number of keys (dim -2): {shapes}")
    if Q.shape[:-2] != K.shape[:-2] or K.shape[:-2] != V.shape[:-2]:
        raise ValueError(f"Q, K and V must have the same batch dims: {shapes}")
    if mask is None:
        return
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = attend), got {_what(mask)}")
    scores_shape = (*Q.shape[:-1], K.shape[-2])
    # by hand: torch.broadcast_shapes imports sympy on first use, slower than the whole test run
    fits = mask.dim() <= len(scores_shape) and all(
        m in (1, s) for m, s in zip(reversed(mask.shape), reversed(scores_shape), strict=False)
    )
    if not fits:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"(..., queries, keys) = {scores_shape}"
        )


def _what(value: object) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of dtype {value.dtype} and shape {tuple(value.shape)}"
    return type(value).__name__


# END SOLUTION
