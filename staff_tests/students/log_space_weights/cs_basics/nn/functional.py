from __future__ import annotations

import math

import torch


def softmax(in_features, dim):
    c = in_features.detach().amax(dim=dim, keepdim=True)
    c = c.nan_to_num(0.0, 0.0, 0.0)
    e = (in_features - c).exp()
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    scores = Q.matmul(K.transpose(-2, -1)).div(math.sqrt(d_k))
    if mask is None:
        return softmax(scores, -1).matmul(V)
    any_key = mask.any(-1, keepdim=True)
    safe_mask = mask | ~any_key
    scores = torch.where(safe_mask, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
    weights = softmax(scores, -1) * any_key
    return weights.matmul(V)
