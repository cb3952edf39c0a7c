"""built-ins left in code that never runs: after raise, continue and break, under if False, if 0, while False and
if TYPE_CHECKING, in the else of if True."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch.nn.functional import scaled_dot_product_attention as builtin_attention

DEBUG = False


def softmax(in_features, dim):
    if in_features.numel() == 0:
        return in_features.clone()
        raise RuntimeError(torch.softmax(in_features, dim))
    if False:
        return torch.softmax(in_features, dim)
    if 0:
        return torch.nn.functional.softmax(in_features, dim)
    while False:
        in_features = in_features.softmax(dim)
    peak = in_features.amax(dim=dim, keepdim=True)
    for _ in range(1):
        peak = peak.detach()
        continue
        peak = torch.softmax(peak, dim)
    while True:
        e = torch.exp(in_features - peak)
        break
        e = torch.softmax(e, dim)
    if True:
        total = e.sum(dim=dim, keepdim=True)
    else:
        total = torch.softmax(e, dim).sum(dim=dim, keepdim=True)
    return e / total


def scaled_dot_product_attention(Q, K, V, mask=None):
    if TYPE_CHECKING:
        return builtin_attention(Q, K, V, attn_mask=mask)
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError("mask must be boolean")
        return torch.nn.functional.scaled_dot_product_attention(Q, K, V)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ V
