"""Staff only (left out of the handout): the oracles and known mistakes that compute from scratch.

Each takes the adapter's arguments, in its order, in float64; tests/cases.py names them as "hidden.answers:NAME".
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def swiglu(d_model, d_ff, w1, w2, w3, x):
    return (F.silu(x @ w1.mT) * (x @ w3.mT)) @ w2.mT


def rope(d_k, theta, max_seq_len, x, positions, *, pairs="neighbours", frequency=2):
    k = torch.arange(d_k // 2, dtype=torch.float64)
    angles = positions[..., None].double() * theta ** (-frequency * k / d_k)  # (..., seq, d_k / 2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = (x[..., 0::2], x[..., 1::2]) if pairs == "neighbours" else x.chunk(2, dim=-1)
    rotated = (first * cos - second * sin, first * sin + second * cos)
    return torch.stack(rotated, dim=-1).flatten(-2) if pairs == "neighbours" else torch.cat(rotated, dim=-1)


# ---------------------------------------------------------------- known mistakes


def eps_outside_sqrt(d_model, eps, weights, x):
    return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * weights


def no_weight(d_model, eps, weights, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def mean_subtracted(d_model, eps, weights, x):
    centered = x - x.mean(-1, keepdim=True)
    return centered * torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + eps) * weights


def sigmoid_only(x):
    return torch.sigmoid(x)


def gate_on_w3(d_model, d_ff, w1, w2, w3, x):
    return swiglu(d_model, d_ff, w3, w2, w1, x)


def halves_rotated(d_k, theta, max_seq_len, x, positions):
    return rope(d_k, theta, max_seq_len, x, positions, pairs="halves")


def positions_ignored(d_k, theta, max_seq_len, x, positions):
    return rope(d_k, theta, max_seq_len, x, torch.arange(x.shape[-2]))


def frequency_halved(d_k, theta, max_seq_len, x, positions):
    return rope(d_k, theta, max_seq_len, x, positions, frequency=1)
