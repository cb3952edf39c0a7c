from __future__ import annotations

import math

import torch


def softmax(in_features, dim):
    dtype = in_features.dtype
    x = in_features.to(torch.promote_types(dtype, torch.float32))
    x = torch.exp(x - x.amax(dim, keepdim=True))
    return (x / x.sum(dim, keepdim=True)).to(dtype)


def scaled_dot_product_attention(Q, K, V, mask=None):
    compute = torch.promote_types(Q.dtype, torch.float32)
    q, k, v = Q.to(compute), K.to(compute), V.to(compute)
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, -1)
    if mask is not None:
        weights = torch.where(mask.any(-1, keepdim=True), weights, 0.0)
    return (weights @ v).to(Q.dtype)
