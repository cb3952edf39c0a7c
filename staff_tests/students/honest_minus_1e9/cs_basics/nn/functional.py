"""-1e9 fill, all-False rows found with any()."""
import math

import torch


def softmax(in_features, dim):
    in_features = in_features - in_features.max(dim, keepdim=True)[0]
    out = in_features.exp()
    return out / out.sum(dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q.matmul(K.transpose(-1, -2)).div(math.sqrt(Q.size(-1)))
    if mask is not None:
        fill = -1e4 if scores.dtype in (torch.float16, torch.bfloat16) else -1e9
        scores = scores.masked_fill(~mask, fill)
    attn = softmax(scores, dim=-1)
    if mask is not None:
        attn = attn * mask.any(dim=-1, keepdim=True).to(attn.dtype)
    return attn.matmul(V)
