"""typing helpers: TYPE_CHECKING, cast, overload, a runtime_checkable Protocol, NamedTuple, Final, TypeVar."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final, NamedTuple, Optional, Protocol, TypeVar, cast, overload, runtime_checkable

import torch

if TYPE_CHECKING:
    from collections.abc import Sequence

T = TypeVar("T", bound=torch.Tensor)
LAST: Final = -1


@runtime_checkable
class Normalizer(Protocol):
    def __call__(self, x: torch.Tensor, dim: int) -> torch.Tensor: ...


class Scores(NamedTuple):
    values: torch.Tensor
    has_key: Optional[torch.Tensor]


@overload
def softmax(in_features: T, dim: int) -> T: ...
@overload
def softmax(in_features: torch.Tensor, dim: Sequence[int]) -> torch.Tensor: ...
def softmax(in_features, dim):
    top = in_features.amax(dim=dim, keepdim=True)
    e = torch.exp(in_features - top)
    return cast(torch.Tensor, e / e.sum(dim=dim, keepdim=True))


def _scores(Q: torch.Tensor, K: torch.Tensor, mask: Optional[torch.Tensor]) -> Scores:
    raw = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[LAST])
    if mask is None:
        return Scores(raw, None)
    return Scores(raw.masked_fill(~mask, torch.finfo(raw.dtype).min), mask.any(LAST, keepdim=True))


def scaled_dot_product_attention(Q, K, V, mask=None, normalize: Normalizer = softmax):
    scores = _scores(Q, K, mask)
    weights = normalize(scores.values, LAST)
    if scores.has_key is not None:
        weights = weights * scores.has_key
    return weights @ V
