from __future__ import annotations

import math

import torch


def softmax(in_features, dim):
    shifted = in_features - in_features.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-1, -2) / math.sqrt(K.size(-1))
    if mask is not None:
        bias = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
        bias = bias.masked_fill(mask.logical_not(), float("-inf"))
        bias = bias.masked_fill(~mask.any(-1, keepdim=True), 0.0)  # a row with no key: no -inf, zeroed below
        scores = scores + bias
    weights = softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask.any(-1, keepdim=True)
    return weights @ V
