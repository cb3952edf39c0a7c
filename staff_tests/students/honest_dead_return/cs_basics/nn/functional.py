"""a softmax that keeps the built-in it was checked against after its real return (never run), as a real student
handed in; the attention calls that softmax."""
import math

import torch
import torch.nn.functional as F


def softmax(in_features, dim):
    shifted = in_features - in_features.max(dim=dim, keepdim=True).values
    exp = torch.exp(shifted)
    return exp / exp.sum(dim=dim, keepdim=True)
    return torch.softmax(in_features, dim=dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ V
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)
