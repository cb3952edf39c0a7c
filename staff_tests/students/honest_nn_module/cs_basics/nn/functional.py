"""nn.Module classes with __init__/super().__init__(), called as self.softmax(x)."""
import math

import torch
from torch import nn


class Softmax(nn.Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x_max = torch.amax(x, dim=self.dim, keepdim=True)
        e = torch.exp(x - x_max)
        return e / torch.sum(e, dim=self.dim, keepdim=True)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class ScaledDotProductAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.softmax = Softmax(dim=-1)

    def forward(self, Q, K, V, mask=None):
        scores = torch.matmul(Q, K.transpose(-1, -2)) / math.sqrt(Q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask == False, float("-inf"))  # noqa: E712
        attn = self.softmax(scores)
        if mask is not None:
            attn = torch.where(mask.any(-1, keepdim=True), attn, torch.zeros_like(attn))
        return torch.matmul(attn, V)

    def __repr__(self):
        return f"{self.__class__.__name__}()"


def softmax(in_features, dim):
    return Softmax(dim)(in_features)


def scaled_dot_product_attention(Q, K, V, mask=None):
    return ScaledDotProductAttention()(Q, K, V, mask)
