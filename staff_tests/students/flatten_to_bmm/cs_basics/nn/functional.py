from __future__ import annotations

import math

import torch


def softmax(in_features, dim):
    shifted = in_features - in_features.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    *batch, n_q, d_k = Q.shape
    n_k, d_v = K.shape[-2], V.shape[-1]
    q = Q.reshape(-1, n_q, d_k)
    k = K.reshape(-1, n_k, d_k)
    v = V.reshape(-1, n_k, d_v)
    scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(d_k)
    if mask is not None:
        m = mask.expand(*batch, n_q, n_k).reshape(-1, n_q, n_k)
        scores = scores.masked_fill(~m, float("-inf"))
    weights = softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights)
    return torch.bmm(weights, v).reshape(*batch, n_q, d_v)
