from __future__ import annotations

import math

import torch


def softmax(in_features, dim):
    shifted = in_features - in_features.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    if Q.dim() == 3:
        Q, K, V = Q[:, None], K[:, None], V[:, None]
        mask = None if mask is None else mask[:, None] if mask.dim() == 3 else mask
        return scaled_dot_product_attention(Q, K, V, mask)[:, 0]
    scores = torch.einsum("bhqd,bhkd->bhqk", Q, K) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(softmax(scores, -1))
    return torch.einsum("bhqk,bhkd->bhqd", weights, V)
