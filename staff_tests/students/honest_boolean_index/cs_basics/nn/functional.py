"""boolean indexing into a copy of the scores."""
import math

import torch


def softmax(in_features, dim):
    x = in_features - in_features.amax(dim=dim, keepdim=True)
    x = x.exp()
    return x / x.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1)
    scores = scores / math.sqrt(K.shape[-1])
    if mask is not None:
        full = mask.expand(scores.shape)
        scores = scores.clone()
        scores[~full] = -math.inf
        weights = softmax(scores, -1)
        empty = ~full.any(-1)
        weights = weights.masked_fill(empty.unsqueeze(-1), 0.0)
    else:
        weights = softmax(scores, -1)
    return weights @ V
