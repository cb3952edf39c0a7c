from __future__ import annotations

import math

import torch

from cs_basics.nn import attention_utils


def softmax(in_features, dim):
    return attention_utils.stable_softmax(in_features, dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = attention_utils.scaled_scores(Q, K)
    scores = attention_utils.apply_mask(scores, mask)
    weights = attention_utils.stable_softmax(scores, -1)
    return attention_utils.zero_empty_rows(weights, mask) @ V
