"""torch's Python glue: torch.split and broadcast_tensors, 1 - mask (Tensor.__rsub__), rows iterated with for,
vars(self) and self.__dict__ in a config."""
import math

import torch


class Config:
    def __init__(self, **kwargs):
        self.__dict__.update({"big": 1e9, "half_big": 1e4})
        self.__dict__.update(kwargs)

    def __repr__(self):
        return f"Config({vars(self)})"


def _last_axis(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def softmax(in_features, dim):
    x = in_features.movedim(dim, -1)
    if x.dim() < 2 or x.shape[0] == 0:
        return _last_axis(x).movedim(-1, dim)
    return torch.stack([_last_axis(block) for block in x]).movedim(-1, dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    cfg = Config()
    d = Q.shape[-1]
    q_half, q_rest = torch.split(Q, [d // 2, d - d // 2], dim=-1)
    k_half, k_rest = torch.split(K, [d // 2, d - d // 2], dim=-1)
    scores = (q_half @ k_half.transpose(-2, -1) + q_rest @ k_rest.transpose(-2, -1)) / math.sqrt(d)
    if mask is not None:
        mask, scores = torch.broadcast_tensors(mask, scores)
        big = cfg.half_big if scores.dtype in (torch.float16, torch.bfloat16) else cfg.big
        scores = scores - (1 - mask.to(scores.dtype)) * big
    weights = softmax(scores, -1)
    if mask is not None:
        weights = weights * mask.any(-1, keepdim=True)
    return weights @ V
