import math

import torch
from einops import einsum, rearrange, reduce

NEG_INF = -1e9


def softmax(in_features, dim):
    x = in_features.movedim(dim, -1)
    x = x - reduce(x, "... n -> ... 1", "max").detach()
    e = x.exp()
    out = e / reduce(e, "... n -> ... 1", "sum")
    return out.movedim(-1, dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    dtype = Q.dtype
    q, k, v = Q, K, V
    if dtype in (torch.float16, torch.bfloat16):  # -1e9 does not fit in float16: compute in float32
        q, k, v = Q.float(), K.float(), V.float()
    scores = einsum(q, k, "... q d, ... k d -> ... q k") / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = softmax(scores, -1)
    if mask is not None:
        has_key = rearrange(mask.any(-1), "... q -> ... q 1")
        weights = weights * has_key
    return einsum(weights, v, "... q k, ... k d -> ... q d").to(dtype)
