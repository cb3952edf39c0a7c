from __future__ import annotations

import math

import torch


def softmax(in_features, dim):
    out = in_features - in_features.max(dim=dim, keepdim=True).values
    return out.exp() / out.exp().sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = torch.matmul(Q, K.transpose(-2, -1))
    scores.div_(math.sqrt(Q.shape[-1]))
    if mask is not None:
        scores.masked_fill_(~mask, -math.inf)
    weights = softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return torch.matmul(weights, V)
