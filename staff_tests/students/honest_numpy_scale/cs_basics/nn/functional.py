"""numpy for the scale, torch.inf fills, unused numpy import at the top."""
import numpy as np
import torch


def softmax(in_features, dim):
    stable = in_features - in_features.amax(dim=dim, keepdim=True)
    e = stable.exp()
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scale = float(1.0 / np.sqrt(Q.shape[-1]))
    scores = (Q @ K.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, -torch.inf)
    weights = softmax(scores, -1)
    if mask is not None:
        weights = weights.masked_fill(mask.logical_not().all(-1, keepdim=True), 0.0)
    return weights @ V
