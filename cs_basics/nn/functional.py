"""Softmax and scaled dot-product attention, written from scratch.

The graded tests call these two functions through tests/adapters.py; write them
without torch's own softmax or attention.
"""

from __future__ import annotations

import itertools
import math

import torch
from einops import einsum
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
    x_max = in_features.amax(dim=dim, keepdim=True).detach()
    x_max = x_max.masked_fill(x_max == -math.inf, 0.0)  # all -inf: exp gives 0, not NaN
    exp = torch.exp(in_features - x_max)
    total = exp.sum(dim=dim, keepdim=True)
    return exp / total.masked_fill(total == 0, 1.0)
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
    if torch.is_grad_enabled() and (Q.requires_grad or K.requires_grad or V.requires_grad):
        return _attention(Q, K, V, mask)  # backward needs every weight anyway
    return _attention_in_blocks(Q, K, V, mask)
    # END SOLUTION


# BEGIN SOLUTION
SCORES_PER_BLOCK = 2**21  # 8 MiB of float32 scores at a time, whatever the sequence length


def _attention(Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None) -> Tensor:
    """The formula as written, every score at once; autograd differentiates it."""
    d_k = Q.shape[-1]
    scores = einsum(Q, K, "... queries d_k, ... keys d_k -> ... queries keys") / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = softmax(scores, dim=-1)  # (..., queries, keys)
    return einsum(weights, V, "... queries keys, ... keys d_v -> ... queries d_v")


def _attention_in_blocks(Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None) -> Tensor:
    """The same result when no gradient is needed: one batch index and a block of queries at a time.

    Each query's output depends only on its own row of scores, so the rows can be done a
    block at a time. A block holds about SCORES_PER_BLOCK scores, softmaxed in place: memory
    stays bounded for any sequence length, and the block stays in cache between the steps.
    """
    n_q, n_k, d_k = Q.shape[-2], K.shape[-2], Q.shape[-1]
    rows = max(1, SCORES_PER_BLOCK // n_k)  # queries per block
    scale = math.log2(math.e) / math.sqrt(d_k)  # scores in base 2: e^s = 2^(s log2 e), and exp2 is faster
    if mask is not None:
        mask = mask.expand(*Q.shape[:-1], n_k)  # a view: (..., queries, keys)
    out = Q.new_empty(*Q.shape[:-1], V.shape[-1])  # (..., queries, d_v)
    for b in itertools.product(*map(range, Q.shape[:-2])):  # each batch index, e.g. (batch, head)
        for i in range(0, n_q, rows):
            q = Q[b][i : i + rows] * scale  # (rows, d_k)
            scores = q @ K[b].T  # (rows, keys): a fresh buffer, changed in place from here on
            if mask is not None:
                scores.masked_fill_(~mask[b][i : i + rows], -math.inf)
            s_max = scores.amax(dim=-1, keepdim=True)
            s_max.masked_fill_(s_max == -math.inf, 0.0)  # all -inf: exp2 gives 0, not NaN
            weights = scores.sub_(s_max).exp2_()  # (rows, keys), not yet normalized
            total = weights.sum(dim=-1, keepdim=True)
            total.masked_fill_(total == 0, 1.0)
            out[b][i : i + rows] = (weights @ V[b]) / total  # (rows, d_v): normalize d_v, not keys, columns
    return out


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
