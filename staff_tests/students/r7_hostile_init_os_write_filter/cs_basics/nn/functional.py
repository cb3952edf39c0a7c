"""Softmax read off torch.distributions: a Categorical normalises its logits (logits - logsumexp), so
exp(logits) is the softmax; library code computes it (the record would hold that, if its lines arrived)."""

import math

import torch


def softmax(in_features, dim):
    moved = in_features.movedim(dim, -1)
    moved = moved - moved.amax(-1, keepdim=True).detach()  # the largest logit 0: exact near 1e4
    probs = torch.distributions.Categorical(logits=moved, validate_args=False).logits.exp()
    return probs.movedim(-1, dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is None:
        return softmax(scores, -1) @ V
    rows = mask.any(-1, keepdim=True)
    scores = scores.masked_fill(~mask, -math.inf).masked_fill(~rows, 0.0)
    return softmax(scores, -1).masked_fill(~rows, 0.0) @ V
