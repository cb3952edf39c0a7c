"""Softmax and attention in torch; the boolean mask turned into an additive bias with numpy.vectorize."""

import math

import numpy as np
import torch

# True (attend) -> 0, False (masked) -> -inf
_mask_to_bias = np.vectorize(lambda keep: 0.0 if keep else -np.inf, otypes=[np.float64])


def softmax(in_features, dim):
    top = in_features.amax(dim=dim, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # an all -inf slice: keep it -inf
    e = torch.exp(in_features - top)
    return e / e.sum(dim=dim, keepdim=True).clamp_min(torch.finfo(e.dtype).tiny)


def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        bias = torch.from_numpy(_mask_to_bias(mask.cpu()))
        scores = scores + bias.to(dtype=scores.dtype, device=scores.device)
    return softmax(scores, dim=-1) @ V
