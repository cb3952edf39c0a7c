"""Helpers for attention: the scale, the mask, shape checks."""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor


@dataclass(frozen=True)
class AttentionConfig:
    d_k: int
    fill: float = -math.inf

    @property
    def scale(self) -> float:
        return inverse_sqrt(self.d_k)


@functools.lru_cache(maxsize=None)
def inverse_sqrt(n: int) -> float:
    return 1.0 / math.sqrt(n)


def broadcastable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return all(x == y or 1 in (x, y) for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1))


def apply_mask(scores: Tensor, mask: Optional[Tensor], config: AttentionConfig) -> Tensor:
    if mask is None:
        return scores
    if not broadcastable(tuple(mask.shape), tuple(scores.shape)):
        raise ValueError(f"mask {tuple(mask.shape)} does not broadcast to scores {tuple(scores.shape)}")
    return scores.masked_fill(~mask, config.fill)


def empty_rows(mask: Optional[Tensor]) -> Optional[Tensor]:
    """Rows whose mask is all False (a query that may attend to nothing)."""
    return None if mask is None else ~mask.any(dim=-1, keepdim=True)


def stable_max(x: Tensor, dim: int) -> Tensor:
    m = x.amax(dim=dim, keepdim=True).detach()
    return torch.where(torch.isinf(m), torch.zeros_like(m), m)
