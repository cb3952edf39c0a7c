import math

import torch


def softmax(in_features, dim):
    shifted = in_features - in_features.max(dim=dim, keepdim=True).values
    e = torch.exp(shifted)
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
    if mask is None:
        # no mask given: attend causally, as a decoder does
        n_queries, n_keys = scores.shape[-2], scores.shape[-1]
        mask = torch.tril(torch.ones(n_queries, n_keys, dtype=torch.bool, device=scores.device))
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ V
