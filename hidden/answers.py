"""Staff only (left out of the handout): the known mistakes that compute a softmax from scratch.

Shipped in tests/mistakes.py, they were a working softmax for a student to read (the stability family and the
epsilon pass some cases). Here `uv run cs-basics fixtures` runs them and stores their outputs in each fixture of
their problem (`expected.mistake.<name>.<output>`), and the students' run names them from there. tests/mistakes.py
names each as "hidden.answers:NAME"; each takes its adapter's arguments, as the diagnosis would pass them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tests.mistakes import with_softmax


def unshifted_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.exp(x) / torch.exp(x).sum(dim, keepdim=True)


def global_max_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    return unshifted_softmax(x - x.max(), dim)


def mean_shift_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    return unshifted_softmax(x - x.mean(dim, keepdim=True), dim)


def sum_over_everything(x: torch.Tensor, dim: int) -> torch.Tensor:
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum()


def epsilon_softmax(epsilon: float) -> Callable[[torch.Tensor, int], torch.Tensor]:
    """A stable softmax that divides by the sum plus `epsilon`."""

    def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
        e = torch.exp(x - x.amax(dim, keepdim=True))
        return e / (e.sum(dim, keepdim=True) + epsilon)

    return softmax


# one attribute per variant, as tests/mistakes.py names them: softmax_epsilon_1e_5 divides by the sum + 1e-5
EPSILONS = {"1e_5": 1e-5, "1e_6": 1e-6, "1e_7": 1e-7, "1e_8": 1e-8, "1e_9": 1e-9, "1e_10": 1e-10}
SOFTMAXES = {"no_max_shift": unshifted_softmax, "global_max": global_max_softmax, "mean_shift": mean_shift_softmax}
VARIANTS = (
    {f"softmax_epsilon_{name}": epsilon_softmax(eps) for name, eps in EPSILONS.items()}
    | {f"attention_epsilon_{name}": with_softmax(epsilon_softmax(eps)) for name, eps in EPSILONS.items()}
    | {f"attention_{name}": with_softmax(softmax) for name, softmax in SOFTMAXES.items()}
    | {f"attention_{name}_nan_to_num": with_softmax(softmax, nan_to_zero=True) for name, softmax in SOFTMAXES.items()}
)
globals().update(VARIANTS)  # "hidden.answers:attention_mean_shift_nan_to_num" is an attribute like any other
