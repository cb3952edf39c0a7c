from __future__ import annotations

import math

import torch

from einops import einsum


def softmax(in_features, dim):
    shifted = in_features - in_features.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = einsum(Q, K, "... q d, ... k d -> ... q k") / math.sqrt(Q.shape[-1])
    if mask is not None:
        bias = torch.zeros(mask.shape, device=mask.device).masked_fill(~mask, float("-inf"))
        scores = scores + bias
    weights = torch.nan_to_num(softmax(scores, -1))
    return einsum(weights, V, "... q k, ... k d -> ... q d")
