"""Attention, written with the standard library's help; the old torch version left below for comparison."""

import collections
import functools
import math
import operator
from typing import NamedTuple

import torch

Shapes = collections.namedtuple("Shapes", ["batch", "queries", "keys", "d_k", "d_v"])


class Scores(NamedTuple):
    values: torch.Tensor
    scale: float


def _shapes(Q, K, V):
    return Shapes(tuple(Q.shape[:-2]), Q.shape[-2], K.shape[-2], Q.shape[-1], V.shape[-1])


def _numel(shape):
    return functools.reduce(operator.mul, shape, 1)


def softmax(in_features, dim):
    m = in_features.amax(dim, keepdim=True)
    z = torch.exp(in_features - m)
    return z / z.sum(dim, keepdim=True)
    return torch.softmax(in_features, dim)  # the first version, kept for reference (never runs)


def scaled_dot_product_attention(Q, K, V, mask=None):
    shapes = _shapes(Q, K, V)
    if _numel(shapes.batch) == 0:
        return Q.new_zeros((*shapes.batch, shapes.queries, shapes.d_v))
    s = Scores(Q @ K.transpose(-2, -1), 1 / math.sqrt(shapes.d_k))
    scores = s.values * s.scale
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, -math.inf))
        scores = torch.where(mask.any(-1, keepdim=True), scores, torch.zeros_like(scores))
    p = softmax(scores, -1)
    if mask is not None:
        p = torch.where(mask.any(-1, keepdim=True), p, torch.zeros_like(p))
    return p @ V


if __name__ == "__main__":
    x = torch.randn(2, 3, 4)
    print((softmax(x, -1) - torch.softmax(x, -1)).abs().max())
