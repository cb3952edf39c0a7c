import math

import torch


def softmax(in_features, dim):
    e = torch.exp(in_features - in_features.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    s = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    p = softmax(s, -1)
    if mask is not None:
        p = p.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return p @ V
