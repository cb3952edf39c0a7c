"""a dataclass config and a class with __call__."""
import math
from dataclasses import dataclass, field

import torch


@dataclass
class AttentionConfig:
    fill: float = float("-inf")
    dims: list = field(default_factory=lambda: [-1])


class Attention:
    def __init__(self, config: AttentionConfig | None = None):
        self.config = config or AttentionConfig()

    def __call__(self, Q, K, V, mask=None):
        scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, self.config.fill)
        weights = softmax(scores, self.config.dims[0])
        if mask is not None:
            weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return weights @ V


def softmax(in_features, dim):
    e = torch.exp(in_features - in_features.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    return Attention()(Q, K, V, mask)
