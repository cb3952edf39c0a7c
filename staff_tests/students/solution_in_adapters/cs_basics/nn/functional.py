from __future__ import annotations

import math

import torch


def softmax(in_features, dim):
    raise NotImplementedError


def scaled_dot_product_attention(Q, K, V, mask=None):
    raise NotImplementedError
