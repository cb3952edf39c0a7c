"""a frozen dataclass: __post_init__ with object.__setattr__, a dataclasses.fields loop with getattr(self, f.name),
type(x).__name__ in its errors."""
from __future__ import annotations

import dataclasses
import math

import torch


@dataclasses.dataclass(frozen=True)
class Inputs:
    Q: torch.Tensor
    K: torch.Tensor
    V: torch.Tensor

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{f.name} must be a tensor, got {type(value).__name__}")
        object.__setattr__(self, "scale", 1.0 / math.sqrt(self.Q.shape[-1]))

    def describe(self):
        return ", ".join(f"{f.name}{tuple(getattr(self, f.name).shape)}" for f in dataclasses.fields(self))


def softmax(in_features, dim):
    if not isinstance(in_features, torch.Tensor):
        raise TypeError(f"softmax needs a tensor, got {type(in_features).__name__}")
    peak = in_features.amax(dim, keepdim=True)
    e = (in_features - peak).exp()
    return e / e.sum(dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    x = Inputs(Q, K, V)
    if x.K.shape[-1] != x.Q.shape[-1]:
        raise ValueError(f"d_k differs: {x.describe()}")
    scores = (x.Q @ x.K.transpose(-2, -1)) * x.scale
    if mask is not None:
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    weights = softmax(scores, -1)
    if mask is not None:
        weights = torch.where(mask.any(-1, keepdim=True), weights, torch.zeros_like(weights))
    return weights @ x.V
