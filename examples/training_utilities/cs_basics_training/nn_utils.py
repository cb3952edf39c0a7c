"""The loss and the gradient clipping of a training loop (CS336 assignment 1's `run_cross_entropy` and
`run_gradient_clipping` call them).

Write each from torch's primitives: the graded tests forbid torch's own cross-entropy, log-softmax and clipping.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from jaxtyping import Float, Int
from torch import Tensor


def cross_entropy(inputs: Float[Tensor, " ... vocab"], targets: Int[Tensor, " ..."]) -> Float[Tensor, ""]:
    """The mean over every position of -log softmax(inputs)[target]: the logits may be as large as 1e4."""
    # BEGIN SOLUTION
    shifted = inputs - inputs.amax(-1, keepdim=True)
    log_normalizer = shifted.exp().sum(-1).log()
    picked = shifted.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (log_normalizer - picked).mean()
    # END SOLUTION


def gradient_clipping(parameters: Iterable[torch.nn.Parameter], max_l2_norm: float, eps: float = 1e-6) -> None:
    """Scale the gradients of `parameters` in place so that their combined l2 norm is at most `max_l2_norm`
    (times max_l2_norm / (norm + eps), as torch does); parameters without a gradient are left alone."""
    # BEGIN SOLUTION
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = torch.sqrt(sum((g * g).sum() for g in grads))
    if norm > max_l2_norm:
        for g in grads:
            g.mul_(max_l2_norm / (norm + eps))
    # END SOLUTION
