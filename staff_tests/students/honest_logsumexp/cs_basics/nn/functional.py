"""exp(x - logsumexp(x)); all-False rows through a finite fill."""
import math

import torch


def softmax(in_features, dim):
    shifted = in_features - in_features.amax(dim=dim, keepdim=True)  # near 1e4, x - logsumexp(x) rounds
    return torch.exp(shifted - torch.logsumexp(shifted, dim=dim, keepdim=True))


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.mT * (Q.shape[-1] ** -0.5)
    if mask is None:
        return softmax(scores, -1) @ V
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = softmax(scores, -1) * mask
    weights = weights * mask.any(-1, keepdim=True)
    return weights @ V
