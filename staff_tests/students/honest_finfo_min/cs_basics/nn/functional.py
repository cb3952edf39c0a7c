"""torch.finfo(dtype).min fill, type annotations, Optional."""
import math
from typing import Optional

import torch
from torch import Tensor


def softmax(in_features: Tensor, dim: int) -> Tensor:
    largest = in_features.max(dim=dim, keepdim=True).values
    numerator = (in_features - largest).exp()
    return numerator / numerator.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q: Tensor, K: Tensor, V: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    d_k = K.shape[-1]
    scores: Tensor = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    attention = softmax(scores, dim=-1)
    if mask is not None:
        attention = attention.masked_fill(~mask.any(dim=-1, keepdim=True), 0)
    return torch.matmul(attention, V)
