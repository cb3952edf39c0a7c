"""torch.utils.checkpoint around its own code, to save memory: the attention's weights recomputed in the backward
pass (use_reentrant=False), the softmax's too (use_reentrant=True)."""
import math

import torch
from torch.utils.checkpoint import checkpoint


def _softmax(in_features, dim):
    e = torch.exp(in_features - in_features.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def softmax(in_features, dim):
    if not in_features.requires_grad:
        return _softmax(in_features, dim)
    return checkpoint(_softmax, in_features, dim, use_reentrant=True)


def _weights(Q, K, mask):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights


def scaled_dot_product_attention(Q, K, V, mask=None):
    weights = checkpoint(_weights, Q, K, mask, use_reentrant=False)
    return weights @ V
