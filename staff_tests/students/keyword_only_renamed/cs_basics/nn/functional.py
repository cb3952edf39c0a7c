from __future__ import annotations

import math

import torch


def softmax(x, dim=-1, *, stable=True):
    if stable:
        x = x - x.max(dim, keepdim=True).values
    e = x.exp()
    return e / e.sum(dim, keepdim=True)


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, scale=None):
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    logits = query @ key.transpose(-2, -1) * scale
    if attn_mask is not None:
        logits = logits.masked_fill(~attn_mask, float("-inf"))
    probs = softmax(logits, dim=-1)
    if attn_mask is not None:
        probs = probs.masked_fill(~attn_mask.any(dim=-1, keepdim=True), 0.0)
    return probs @ value
