"""an options class that sets its fields with setattr over **kwargs and picks a method with getattr(self, ...)."""
import math

import torch


class Options:
    defaults = {"fill": "finfo_min", "scale": None, "zero_empty_rows": True}

    def __init__(self, **kwargs):
        for key, value in {**self.defaults, **kwargs}.items():
            if key not in self.defaults:
                raise TypeError(f"unknown option {key!r}")
            setattr(self, key, value)

    def fill_value(self, dtype):
        return getattr(self, f"_fill_{self.fill}")(dtype)

    def _fill_finfo_min(self, dtype):
        return torch.finfo(dtype).min

    def _fill_neg_inf(self, dtype):
        return float("-inf")


def softmax(in_features, dim):
    e = torch.exp(in_features - torch.max(in_features, dim=dim, keepdim=True).values)
    return e / torch.sum(e, dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None, **options):
    opts = Options(**options)
    scale = opts.scale if opts.scale is not None else 1.0 / math.sqrt(Q.shape[-1])
    scores = torch.matmul(Q, K.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), opts.fill_value(scores.dtype))
    weights = softmax(scores, dim=-1)
    if mask is not None and getattr(opts, "zero_empty_rows"):
        weights = weights * mask.any(dim=-1, keepdim=True)
    return torch.matmul(weights, V)
