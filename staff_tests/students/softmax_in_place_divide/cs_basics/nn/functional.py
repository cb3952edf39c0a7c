from __future__ import annotations

import math

import torch


def softmax(in_features, dim):
    e = torch.exp(in_features - in_features.max(dim=dim, keepdim=True).values)
    e /= e.sum(dim=dim, keepdim=True)
    return e


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(softmax(scores, -1)) @ V
