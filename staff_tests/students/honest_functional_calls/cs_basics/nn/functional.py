"""torch.* function calls rather than methods or operators."""
import math

import torch


def softmax(in_features, dim):
    shifted = torch.sub(in_features, torch.amax(in_features, dim=dim, keepdim=True))
    numerator = torch.exp(shifted)
    return torch.div(numerator, torch.sum(numerator, dim=dim, keepdim=True))


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = torch.div(torch.matmul(Q, torch.transpose(K, -2, -1)), math.sqrt(Q.shape[-1]))
    if mask is not None:
        scores = torch.masked_fill(scores, torch.logical_not(mask), -torch.inf)
    weights = torch.nan_to_num(softmax(scores, -1), nan=0.0)
    return torch.matmul(weights, V)
