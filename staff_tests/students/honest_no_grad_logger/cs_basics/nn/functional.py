"""a @torch.no_grad() helper for the mask, a module logger, nn.Module buffers moved with .to(), nn.Dropout(0.0)."""
import logging
import math

import torch
from torch import nn

log = logging.getLogger(__name__)
log.addHandler(logging.NullHandler())


@torch.no_grad()
def _rows_with_a_key(mask):
    return mask.any(dim=-1, keepdim=True)


class Attention(nn.Module):
    def __init__(self, d_k):
        super().__init__()
        self.d_k = d_k
        self.register_buffer("neg_inf", torch.tensor(float("-inf")))
        self.dropout = nn.Dropout(p=0.0)

    def forward(self, Q, K, V, mask=None):
        log.debug("attention over %s queries and %s keys", Q.shape[-2], K.shape[-2])
        scores = (Q @ K.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, self.neg_inf)
        weights = self.dropout(softmax(scores, -1))
        if mask is not None:
            weights = torch.where(_rows_with_a_key(mask), weights, 0.0)
        return weights @ V


def softmax(in_features, dim):
    m = in_features.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(in_features - m)
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))


def scaled_dot_product_attention(Q, K, V, mask=None):
    layer = Attention(Q.shape[-1]).to(Q.device)
    return layer(Q, K, V, mask)
