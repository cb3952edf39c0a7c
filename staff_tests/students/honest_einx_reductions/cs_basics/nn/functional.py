"""einx's reductions and elementwise ops for softmax (einx.max, einx.subtract, einx.sum, einx.divide), einx.dot."""
import math

import einx
import torch


def softmax(in_features, dim):
    x = in_features.movedim(dim, -1)
    top = einx.max("... [k]", x)
    e = torch.exp(einx.subtract("... k, ...", x, top))
    total = einx.sum("... [k]", e)
    return einx.divide("... k, ...", e, total).movedim(-1, dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = einx.dot("... q d, ... k d -> ... q k", Q, K) * (1 / math.sqrt(Q.shape[-1]))
    if mask is not None:
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    weights = softmax(scores, -1)
    if mask is not None:
        weights = weights * mask.any(-1, keepdim=True)
    return einx.dot("... q k, ... k v -> ... q v", weights, V)
