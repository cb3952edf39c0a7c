from __future__ import annotations

import math

import torch


def softmax(in_features, dim):
    shifted = in_features - in_features.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None, dropout_p=0.0, training=False, return_weights=False):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
        empty = ~mask.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(empty, 0.0)
    weights = softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(empty, 0.0)
    if training and dropout_p > 0:
        weights = torch.nn.functional.dropout(weights, dropout_p)
    out = weights @ V
    return (out, weights) if return_weights else out
