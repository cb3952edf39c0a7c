from __future__ import annotations

import math

import torch


def softmax(in_features, dim):
    shifted = in_features - in_features.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)


def _check(Q, K, V, mask):
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(f"d_k differs: {Q.shape} vs {K.shape}")
    if K.shape[-2] != V.shape[-2]:
        raise ValueError(f"keys and values differ: {K.shape} vs {V.shape}")
    if mask is not None:
        torch.broadcast_shapes(mask.shape, (*Q.shape[:-1], K.shape[-2]))  # raises if it cannot broadcast
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be bool, got {mask.dtype}")


def scaled_dot_product_attention(Q, K, V, mask=None):
    _check(Q, K, V, mask)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(softmax(scores, -1))
    return weights @ V
