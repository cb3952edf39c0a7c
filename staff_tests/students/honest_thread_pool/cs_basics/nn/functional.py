"""a ThreadPoolExecutor made at import computes the weights in a worker thread."""
import math
from concurrent.futures import ThreadPoolExecutor

import torch

_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="attention")


def softmax(in_features, dim):
    shifted = in_features - in_features.amax(dim=dim, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = _POOL.submit(softmax, scores, -1).result()
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ V
