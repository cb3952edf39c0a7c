"""Where the tests meet your code: each adapter calls one function of your package (CS336's signatures).

The graded tests call only these functions. If your functions live elsewhere or take
other arguments, change the one line in each body, not the signature.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy.typing as npt
import torch
from jaxtyping import Float, Int
from torch import Tensor

from cs_basics_training import data, nn_utils, optimizer
from cs_basics_training.optimizer import AdamW


def run_cross_entropy(inputs: Float[Tensor, " batch_size vocab_size"], targets: Int[Tensor, " batch_size"]) -> Tensor:
    """The average cross-entropy loss over the examples: a tensor with one value."""
    return nn_utils.cross_entropy(inputs, targets)


def run_gradient_clipping(parameters: Iterable[torch.nn.Parameter], max_l2_norm: float) -> None:
    """Clip the parameters' combined gradient norm to max_l2_norm, in place (their .grad); returns nothing."""
    nn_utils.gradient_clipping(parameters, max_l2_norm)


def get_adamw_cls() -> Any:
    """Your AdamW, a torch.optim.Optimizer (the class, not an instance)."""
    return AdamW


def run_get_lr_cosine_schedule(
    it: int, max_learning_rate: float, min_learning_rate: float, warmup_iters: int, cosine_cycle_iters: int
) -> float:
    """The learning rate at iteration `it` of the cosine schedule with linear warmup."""
    return optimizer.get_lr_cosine_schedule(
        it=it,
        max_learning_rate=max_learning_rate,
        min_learning_rate=min_learning_rate,
        warmup_iters=warmup_iters,
        cosine_cycle_iters=cosine_cycle_iters,
    )


def run_get_batch(
    dataset: npt.NDArray, batch_size: int, context_length: int, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of windows of `dataset` and their next tokens: (x, y), each (batch_size, context_length)."""
    return data.get_batch(dataset, batch_size, context_length, device)
