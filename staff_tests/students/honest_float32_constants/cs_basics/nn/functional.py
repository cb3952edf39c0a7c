"""a float32 constant tensor used as the fill in every dtype."""
import math

import torch

NEG_INF = torch.tensor(float("-inf"))


def softmax(in_features, dim):
    m = in_features.amax(dim=dim, keepdim=True)
    e = torch.exp(in_features - m)
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, NEG_INF.to(device=scores.device, dtype=scores.dtype))
    weights = softmax(scores, -1)
    if mask is not None:
        weights = torch.where(mask, weights, torch.zeros((), dtype=weights.dtype, device=weights.device))
    return weights @ V
