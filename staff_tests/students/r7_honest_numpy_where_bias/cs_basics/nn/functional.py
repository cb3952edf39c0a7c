import math

import numpy as np
import torch


def _bias_from_mask(mask, dtype, device):
    """Boolean mask -> additive bias (0 keep, -inf drop), built in numpy on the CPU."""
    m = np.asarray(mask.detach().cpu())
    if not np.issubdtype(m.dtype, np.bool_):
        raise TypeError(f"mask must be boolean, got {m.dtype}")
    bias = np.where(m, 0.0, -np.inf).astype(np.float32)
    return torch.as_tensor(bias, device=device).to(dtype)


def softmax(in_features, dim):
    x = in_features - in_features.amax(dim=dim, keepdim=True).nan_to_num(neginf=0.0)
    ex = x.exp()
    denom = ex.sum(dim=dim, keepdim=True)
    return ex / torch.where(denom == 0, torch.ones_like(denom), denom)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = (Q @ K.mT) * (1.0 / math.sqrt(Q.size(-1)))
    if mask is not None:
        scores = scores + _bias_from_mask(mask, scores.dtype, scores.device)
    return softmax(scores, dim=-1) @ V
