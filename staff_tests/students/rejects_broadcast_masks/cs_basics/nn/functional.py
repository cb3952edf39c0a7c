from __future__ import annotations

import math

import torch


def softmax(in_features, dim):
    shifted = in_features - in_features.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        if mask.shape != scores.shape:
            raise ValueError(f"Mask shape {mask.shape} doesn't match Q {Q.shape} and K {K.shape}")
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(softmax(scores, dim=-1)) @ V
