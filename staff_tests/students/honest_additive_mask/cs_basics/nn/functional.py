"""an additive float mask built from the bool mask."""
import math

import torch


def softmax(in_features, dim):
    z = in_features - in_features.amax(dim, keepdim=True)
    num = torch.exp(z)
    den = num.sum(dim, keepdim=True)
    return num / den


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = (Q @ K.transpose(-2, -1)) / math.sqrt(Q.shape[-1])
    if mask is not None:
        big = 1e4 if scores.dtype in (torch.float16, torch.bfloat16) else 1e9
        scores = scores + (~mask).to(scores.dtype) * -big
    out = softmax(scores, -1)
    if mask is not None:
        out = out * mask.any(-1, keepdim=True)
    return out @ V
