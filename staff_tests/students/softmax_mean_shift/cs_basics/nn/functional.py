from __future__ import annotations

import math

import torch


def softmax(in_features, dim):
    centred = in_features - in_features.mean(dim=dim, keepdim=True)
    e = centred.exp()
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return softmax(scores, -1) @ V
