from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from cs_basics.nn._attention_utils import AttentionConfig, apply_mask, empty_rows, stable_max


def softmax(in_features: Tensor, dim: int) -> Tensor:
    exps = torch.exp(in_features - stable_max(in_features, dim))
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q: Tensor, K: Tensor, V: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    config = AttentionConfig(d_k=Q.shape[-1])
    scores = apply_mask(torch.matmul(Q, K.transpose(-2, -1)) * config.scale, mask, config)
    weights = softmax(scores, dim=-1)
    empty = empty_rows(mask)
    if empty is not None:
        weights = weights.masked_fill(empty, 0.0)
    return torch.matmul(weights, V)
