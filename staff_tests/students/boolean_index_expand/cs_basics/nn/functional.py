from __future__ import annotations

import math

import torch


def softmax(in_features, dim):
    shifted = in_features - in_features.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = (Q @ K.mT) / math.sqrt(Q.shape[-1])
    if mask is not None:
        full = mask.expand_as(scores)
        scores = scores.clone()
        scores[~full] = float("-inf")
    probs = softmax(scores, -1)
    probs = probs.masked_fill(probs.isnan(), 0)
    return probs @ V
