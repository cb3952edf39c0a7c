from __future__ import annotations

import math

import torch


def run_softmax(in_features, dim):
    e = torch.exp(in_features - in_features.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def run_scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.mT / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return torch.nan_to_num(run_softmax(scores, -1)) @ V
