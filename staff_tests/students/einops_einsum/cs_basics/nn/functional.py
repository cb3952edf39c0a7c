from __future__ import annotations

import math

import torch

from einops import einsum, rearrange


def softmax(in_features, dim):
    shifted = in_features - in_features.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = einsum(Q, K, "... q d, ... k d -> ... q k") / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
        seen = rearrange(mask.any(dim=-1), "... q -> ... q 1")
        scores = torch.where(seen, scores, torch.zeros_like(scores))
    weights = softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * seen
    return einsum(weights, V, "... q k, ... k d -> ... q d")
