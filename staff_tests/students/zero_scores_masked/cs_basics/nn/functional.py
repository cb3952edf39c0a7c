import math

import torch


def softmax(in_features, dim):
    shifted = in_features - in_features.max(dim=dim, keepdim=True).values
    e = torch.exp(shifted)
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores * mask  # the masked scores become 0 ...
        scores = scores.masked_fill(scores == 0, float("-inf"))  # ... and every 0 is taken as masked
    weights = softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ V
