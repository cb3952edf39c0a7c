"""FlashAttention-2 on the CPU: scaled dot-product attention a block of queries at a time (an extra).

The assignment's answer is the formula itself (cs_basics/nn/functional.py, which keeps every score).
This is the same function computed so that memory stays bounded for any sequence length: the
forward pass keeps each query row's max and sum instead of its weights, and the backward pass
recomputes the weights block by block (FlashAttention-2's algorithm). `cs-basics bench --impl flash`
times it against torch's fused kernel.

Writing its body is an extra for students who finish early: the handout leaves it out. It is no answer
to the assignment: the grader always runs its own copy of cs_basics/study/, and the from-scratch rule
forbids graded code to use it (the name `cs_basics.study` in code a problem reaches, and this kernel's
marker operator `cs_basics.study_kernel` in a graded case's run).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def flash_attention(Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None = None) -> Tensor:
    """softmax(Q K^T / sqrt(d_k), masked) V, as cs_basics.nn.functional.scaled_dot_product_attention
    (the same shapes, mask, all-False rows and dtypes), in blocks of queries.

    Raises:
        TypeError: a non-floating Q, K or V, differing dtypes or devices, a non-bool mask.
        ValueError: shapes that do not fit (..., queries, d_k), (..., keys, d_k), (..., keys, d_v), or
            a mask that does not broadcast to (..., queries, keys).
    """
    # BEGIN SOLUTION
    _check_inputs(Q, K, V, mask)
    _mark(Q)  # the from-scratch rule's run-time record sees this operator: the kernel is no graded answer
    return _FlashAttention.apply(Q, K, V, mask)
    # END SOLUTION


# BEGIN SOLUTION
# A block: up to ROWS_PER_BLOCK queries of one or more batch indices (e.g. heads), about SCORES_PER_BLOCK
# scores in all (4 MiB of float32, within a core's cache), whatever the sequence length.
ROWS_PER_BLOCK = 256
SCORES_PER_BLOCK = 2**20


class _FlashAttention(torch.autograd.Function):
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
                "flash_attention: double backward (create_graph=True) is not supported; "
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


# An operator of its own that does nothing, run by every call: the record of a graded case sees the kernel
# run (forbidden_ops `cs_basics.study_*`), whatever name reached it. torch.library's low-level API: its
# custom_op imports about 900 modules on a first call (5 s).
_LIBRARY = torch.library.Library("cs_basics", "FRAGMENT")
_LIBRARY.define("study_kernel(Tensor Q) -> Tensor")
_LIBRARY.impl("study_kernel", lambda Q: Q.new_empty(0), "CompositeExplicitAutograd")
_mark = torch.ops.cs_basics.study_kernel


def _check_inputs(Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None) -> None:
    """A TypeError or ValueError that says what came: each tensor's dtype and shape."""
    given = ", ".join(f"{name} {_describe(t)}" for name, t in (("Q", Q), ("K", K), ("V", V)))
    if not all(isinstance(t, Tensor) and t.is_floating_point() for t in (Q, K, V)):
        raise TypeError(f"flash_attention: Q, K and V must be floating-point tensors; got {given}")
    if len({Q.dtype, K.dtype, V.dtype}) > 1 or len({Q.device, K.device, V.device}) > 1:
        raise TypeError(f"flash_attention: Q, K and V must share one dtype and one device; got {given}")
    fits = min(Q.dim(), K.dim(), V.dim()) >= 2 and Q.shape[:-2] == K.shape[:-2] == V.shape[:-2]
    if not (fits and Q.shape[-1] == K.shape[-1] and K.shape[-2] == V.shape[-2]):
        raise ValueError(
            "flash_attention: expects Q (..., queries, d_k), K (..., keys, d_k) and V (..., keys, d_v) "
            f"with the same batch dims; got {given}"
        )
    if mask is None:
        return
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"flash_attention: the mask must be a bool tensor (True: attend); got {_describe(mask)}")
    scores = (*Q.shape[:-1], K.shape[-2])
    try:
        mask.expand(scores)  # a view, as the blocks take it
    except RuntimeError:
        raise ValueError(
            f"flash_attention: a mask of shape {tuple(mask.shape)} does not broadcast to the scores' "
            f"(..., queries, keys) = {scores}"
        ) from None


def _describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"{tuple(value.shape)} {value.dtype} on {value.device}"
    return f"a {type(value).__name__}"


# END SOLUTION
