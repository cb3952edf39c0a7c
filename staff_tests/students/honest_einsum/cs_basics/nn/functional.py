"""torch.einsum, scale folded into Q."""
import math

import torch


def softmax(in_features: torch.Tensor, dim: int) -> torch.Tensor:
    exps = torch.exp(in_features - torch.max(in_features, dim=dim, keepdim=True)[0])
    return exps / torch.sum(exps, dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scale = 1.0 / math.sqrt(Q.shape[-1])
    scores = torch.einsum("...id,...jd->...ij", Q * scale, K)
    if mask is not None:
        scores = scores.masked_fill(torch.logical_not(mask), float("-inf"))
    probs = torch.nan_to_num(softmax(scores, dim=-1), nan=0.0)
    return torch.einsum("...ij,...jd->...id", probs, V)
