from __future__ import annotations

import math

import torch

import einx


def softmax(in_features, dim):
    shifted = in_features - in_features.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = einx.dot("... q [d], ... k [d] -> ... q k", Q, K) * Q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = softmax(scores, -1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # an all-False row had uniform weights: now zeros
    return einx.dot("... q [k], ... [k] v -> ... q v", weights, V)
