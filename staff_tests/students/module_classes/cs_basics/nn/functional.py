from __future__ import annotations

import math

import torch

from torch import nn


class Softmax(nn.Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x_max = torch.max(x, dim=self.dim, keepdim=True)[0]
        x_exp = torch.exp(x - x_max)
        return x_exp / torch.sum(x_exp, dim=self.dim, keepdim=True)


class ScaledDotProductAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.softmax = Softmax(dim=-1)

    def forward(self, Q, K, V, mask=None):
        d_k = Q.shape[-1]
        scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == False, float("-inf"))  # noqa: E712
        attn = self.softmax(scores)
        attn = torch.where(torch.isnan(attn), torch.zeros_like(attn), attn)
        return torch.matmul(attn, V)


def softmax(in_features, dim):
    return Softmax(dim)(in_features)


_attention = ScaledDotProductAttention()


def scaled_dot_product_attention(Q, K, V, mask=None):
    return _attention(Q, K, V, mask)
