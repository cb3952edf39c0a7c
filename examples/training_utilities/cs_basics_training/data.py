"""The batch sampler of a training loop (CS336 assignment 1's `run_get_batch` calls it)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch


def get_batch(
    dataset: npt.NDArray, batch_size: int, context_length: int, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` windows of `context_length` tokens of `dataset` at random starting positions (every position
    whose window and next tokens fit equally likely), and the next token of each position: (x, y), each a
    (batch_size, context_length) integer tensor on `device`. Draw from numpy's or torch's global generator,
    which the caller seeds: the same seed gives the same batch."""
    # BEGIN SOLUTION
    starts = np.random.randint(0, len(dataset) - context_length, size=batch_size)
    windows = np.stack([dataset[s : s + context_length + 1] for s in starts]).astype(np.int64)
    x, y = torch.from_numpy(windows[:, :-1]), torch.from_numpy(windows[:, 1:])
    return x.to(device), y.to(device)
    # END SOLUTION
