from __future__ import annotations

import math

import torch


def stable_softmax(x, dim):
    m = x.max(dim=dim, keepdim=True).values
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s == 0, torch.ones_like(s), s)


def scaled_scores(Q, K):
    return Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])


def apply_mask(scores, mask):
    return scores if mask is None else scores.masked_fill(~mask, -math.inf)


def zero_empty_rows(weights, mask):
    return weights
