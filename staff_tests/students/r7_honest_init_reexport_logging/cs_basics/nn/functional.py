import logging
import math
import os
import warnings

import torch

logger = logging.getLogger(__name__)
DEBUG = os.environ.get("CS_BASICS_DEBUG", "0") == "1"
if DEBUG:
    logging.basicConfig(level=logging.DEBUG)


def softmax(in_features, dim):
    shifted = in_features - in_features.max(dim=dim, keepdim=True).values
    e = torch.exp(shifted)
    out = e / e.sum(dim=dim, keepdim=True)
    if DEBUG:
        logger.debug("softmax over dim %d of %s", dim, tuple(in_features.shape))
    return out


def scaled_dot_product_attention(Q, K, V, mask=None):
    if Q.dtype == torch.float16:
        warnings.warn("float16 attention: expect about 1e-3 relative error", stacklevel=2)
    logger.debug("attention Q %s K %s V %s", tuple(Q.shape), tuple(K.shape), tuple(V.shape))
    scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
        no_key = ~mask.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(no_key, 0.0)
    weights = softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(no_key, 0.0)
    return torch.matmul(weights, V)
