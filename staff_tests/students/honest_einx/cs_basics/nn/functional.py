"""einx.dot and einx arithmetic."""
import math

import einx
import torch


def softmax(in_features, dim):
    m = in_features.amax(dim=dim, keepdim=True)
    e = torch.exp(in_features - m)
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = einx.dot("... q d, ... k d -> ... q k", Q, K) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(-math.inf, dtype=scores.dtype, device=scores.device))
    weights = softmax(scores, -1)
    if mask is not None:
        weights = torch.where(mask.any(-1, keepdim=True), weights, 0.0)
    return einx.dot("... q k, ... k d -> ... q d", weights, V)
