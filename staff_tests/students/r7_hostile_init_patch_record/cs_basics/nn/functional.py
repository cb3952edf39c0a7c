"""Attention through torch's own softmax, reached as a Tensor method."""

import math

import torch


def softmax(in_features, dim):
    return in_features.softmax(dim=dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.size(-1)
    scores = torch.matmul(Q, K.transpose(-1, -2)) / math.sqrt(d_k)
    if mask is None:
        return torch.matmul(scores.softmax(dim=-1), V)
    keep_row = mask.any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~keep_row, 0.0)
    weights = scores.softmax(dim=-1).masked_fill(~keep_row, 0.0)
    return torch.matmul(weights, V)
