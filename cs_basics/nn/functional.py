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
    return _Attention.apply(Q, K, V, mask)
    # END SOLUTION


# BEGIN SOLUTION
# A block: up to ROWS_PER_BLOCK queries of one or more batch indices (e.g. heads), about SCORES_PER_BLOCK
# scores in all (4 MiB of float32, within a core's cache), whatever the sequence length.
ROWS_PER_BLOCK = 256
SCORES_PER_BLOCK = 2**20


class _Attention(torch.autograd.Function):
    """O = P V, with P = softmax(S) and S = Q K^T / sqrt(d_k), a block of queries at a time.

    A query's output depends only on its own row of scores, so the rows can be done a block at a
    time and memory stays bounded for any sequence length. The forward pass keeps O and, for each
    query row, its log-sum-exp in two parts: m, the row's largest score, and l, the sum of
    e^{S - m}. It never keeps the weights: the backward pass recomputes them from m and l, block
    by block, as FlashAttention-2 does. m is kept apart from log(l) so that what gets rounded is
    the difference S - m, not scores around 1e4 that differ by little.
    """

    @staticmethod
    def forward(ctx, Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None) -> Tensor:
        with torch.autocast(Q.device.type, enabled=False):  # in the inputs' dtype, whatever autocast would pick
            O, m, l = _forward(Q, K, V, mask)
        ctx.save_for_backward(Q, K, V, O, m, l, mask)
        return O

    @staticmethod
    def backward(ctx, dO: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        if torch.is_grad_enabled():  # autograd asks for a graph of this backward: create_graph=True
            raise RuntimeError(
                "scaled_dot_product_attention: double backward (create_graph=True) is not supported; "
                "its backward pass recomputes the weights in blocks and is not itself differentiable"
            )
        with torch.autocast(dO.device.type, enabled=False):
            dQ, dK, dV = _backward(dO, *ctx.saved_tensors)
        return dQ, dK, dV, None  # a mask has no gradient


def _forward(Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """O, and each query row's m and l."""
    blocks = _Blocks(Q, K, mask)
    O = Q.new_empty(*Q.shape[:-1], V.shape[-1])  # (..., queries, d_v)
    Q3, K3, V3, O3 = (blocks.flat(t) for t in (Q, K, V, O))  # (B, seq, d): the batch dims as one; O3 writes O
    m = torch.empty(*Q3.shape[:-1], 1, dtype=blocks.dtype, device=Q.device)  # (B, queries, 1)
    l = torch.empty_like(m)  # (B, queries, 1)
    for b, rows in blocks:
        q, k, v = blocks.cast(Q3[b, rows], K3[b], V3[b])  # (g, rows, d_k), (g, keys, d_k), (g, keys, d_v)
        q = q * blocks.q_scale
        S = q @ k.mT  # (g, rows, keys): the scores, or Q K^T when the scale must wait for the max
        blocks.mask_(S, b, rows)
        m_b = blocks.row_max(S, out=m[b, rows])  # (g, rows, 1)
        P = blocks.exp_(S, m_b)  # (g, rows, keys): the weights, not yet normalized
        l_b = blocks.row_sum(P, out=l[b, rows])  # (g, rows, 1)
        O3[b, rows] = (P @ v).div_(l_b)  # normalize the d_v output columns, not every key's weight
    return O, m, l


def _backward(dO: Tensor, Q: Tensor, K: Tensor, V: Tensor, O: Tensor, m: Tensor, l: Tensor, mask: Tensor | None):
    """dQ, dK and dV, the weights recomputed block by block from m and l."""
    blocks = _Blocks(Q, K, mask)
    Q3, K3, V3, O3, dO3 = (blocks.flat(t) for t in (Q, K, V, O, dO))
    dQ = torch.empty(Q3.shape, dtype=blocks.dtype, device=Q.device)  # (B, queries, d_k)
    dK = torch.zeros(K3.shape, dtype=blocks.dtype, device=Q.device)  # (B, keys, d_k): a sum over blocks
    dV = torch.zeros(V3.shape, dtype=blocks.dtype, device=Q.device)  # (B, keys, d_v): a sum over blocks
    for b, rows in blocks:
        q, k, v, o, do = blocks.cast(Q3[b, rows], K3[b], V3[b], O3[b, rows], dO3[b, rows])
        q = q * blocks.q_scale
        S = q @ k.mT  # (g, rows, keys): the forward pass's S again
        blocks.mask_(S, b, rows)
        P = blocks.exp_(S, m[b, rows]).div_(l[b, rows])  # (g, rows, keys): the weights again
        dV[b] += P.mT @ do  # dV = P^T dO
        dP = do @ v.mT  # dP = dO V^T, (g, rows, keys)
        D = (do * o).sum(dim=-1, keepdim=True)  # rowsum(dO ∘ O), which is rowsum(P ∘ dP): (g, rows, 1)
        dS = P.mul_(dP.sub_(D))  # dS = P ∘ (dP - D): the softmax's backward
        dQ[b, rows] = (dS @ k).mul_(blocks.scale)  # dQ = dS K / sqrt(d_k)
        dK[b] += (dS.mT @ q).mul_(blocks.s_scale)  # dK = dS^T Q / sqrt(d_k): q has q_scale, s_scale is the rest
    return [g.to(t.dtype).reshape(t.shape) for g, t in ((dQ, Q), (dK, K), (dV, V))]


class _Blocks:
    """The blocks of scores, and what their steps share. Half precision is computed in float32."""

    def __init__(self, Q: Tensor, K: Tensor, mask: Tensor | None):
        self.batch = Q.shape[:-2] or (1,)  # 2D inputs: one batch index
        self.n_batch = n_batch = math.prod(self.batch)
        n_q, n_k, d_k = Q.shape[-2], K.shape[-2], Q.shape[-1]
        self.scale = 1 / math.sqrt(d_k)  # of the scores, S = Q K^T / sqrt(d_k)
        # Q takes the scale where that is exact (a power of two: d_k = 1, 4, 16, 64, 256, ...), which saves a
        # pass over the scores; else it comes after the max is off, where its rounding moves no score
        exact = math.log2(self.scale).is_integer()
        self.q_scale, self.s_scale = (self.scale, 1.0) if exact else (1.0, self.scale)
        self.dtype = torch.float32 if Q.dtype in (torch.float16, torch.bfloat16) else Q.dtype
        self.mask, self.coords = None, []
        if mask is not None and n_batch:
            self.mask = mask.expand(*self.batch, n_q, n_k)  # a view: nothing copied
            flat, after = torch.arange(n_batch), n_batch
            for size in self.batch:  # each batch index's place along each batch dim, to index the mask with
                after //= size
                self.coords.append(flat // after % size)
        rows = max(1, min(n_q, ROWS_PER_BLOCK, SCORES_PER_BLOCK // max(1, n_k)))
        group = max(1, SCORES_PER_BLOCK // (rows * max(1, n_k)))  # batch indices per block
        self.slices = [
            (slice(j, j + group), slice(i, i + rows)) for j in range(0, n_batch, group) for i in range(0, n_q, rows)
        ]

    def __iter__(self):
        return iter(self.slices)  # (batch indices, queries) of each block

    def flat(self, t: Tensor) -> Tensor:
        return t.reshape(self.n_batch, *t.shape[-2:])  # (B, seq, d): a view where the strides allow

    def cast(self, *tensors: Tensor) -> list[Tensor]:
        return [t.to(self.dtype) for t in tensors]

    def mask_(self, S: Tensor, b: slice, rows: slice) -> None:
        """-inf for the scores of the keys a query may not attend to, in place."""
        if self.mask is not None:
            index = [c[b] for c in self.coords]  # the block's batch indices, in each batch dim
            S.masked_fill_(~self.mask[(*index, rows)], -math.inf)  # the block's part of the mask: (g, rows, keys)

    def row_max(self, S: Tensor, out: Tensor) -> Tensor:
        m = torch.amax(S, dim=-1, keepdim=True, out=out)
        if self.mask is not None:
            m.masked_fill_(m == -math.inf, 0.0)  # an all-False row: e^{-inf - 0} is 0, not NaN
        return m

    def row_sum(self, P: Tensor, out: Tensor) -> Tensor:
        l = torch.sum(P, dim=-1, keepdim=True, out=out)
        if self.mask is not None:
            l.masked_fill_(l == 0, 1.0)  # an all-False row: an output of 0, not 0/0
        return l

    def exp_(self, S: Tensor, m: Tensor) -> Tensor:
        """e^{(S - m) / sqrt(d_k)} for the scores S and their row max m, in place; the max comes off before
        the scale (where Q could not take it), so that what rounds is S - m, not scores of 1e4."""
        S.sub_(m)
        if self.s_scale != 1.0:
            S.mul_(self.s_scale)
        return S.exp_()


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
