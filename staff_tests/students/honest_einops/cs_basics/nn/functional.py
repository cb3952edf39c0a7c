"""einops rearrange/einsum, a helper module."""
import math

import torch
from einops import einsum, rearrange

from .utils import stable_softmax


def softmax(in_features, dim):
    return stable_softmax(in_features, dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = einsum(Q, K, "... q d, ... k d -> ... q k") / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = stable_softmax(scores, -1)
    if mask is not None:
        keep = rearrange(mask.any(-1), "... q -> ... q 1")
        weights = weights * keep
        weights = torch.nan_to_num(weights, nan=0.0)
    return einsum(weights, V, "... q k, ... k d -> ... q d")
