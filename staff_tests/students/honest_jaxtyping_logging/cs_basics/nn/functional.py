"""unused os/logging/numpy/typing imports, jaxtyping annotations, a logger."""
from __future__ import annotations

import logging
import math
import os
from typing import Optional

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

logger = logging.getLogger(__name__)
DEBUG = os.environ.get("MY_DEBUG", "0") == "1"


def softmax(in_features: Float[Tensor, " ..."], dim: int) -> Float[Tensor, " ..."]:
    maximum = torch.amax(in_features, dim=dim, keepdim=True)
    exponent = torch.exp(in_features - maximum)
    total = torch.sum(exponent, dim=dim, keepdim=True)
    if DEBUG:
        logger.debug("softmax over %s", tuple(in_features.shape))
    return exponent / total


def scaled_dot_product_attention(
    Q: Float[Tensor, " *batch q d"],
    K: Float[Tensor, " *batch k d"],
    V: Float[Tensor, " *batch k v"],
    mask: Optional[Bool[Tensor, " *#batch #q #k"]] = None,
) -> Float[Tensor, " *batch q v"]:
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(softmax(scores, dim=-1), nan=0.0)
    return weights @ V
