"""Staff only (left out of the handout): the oracles and known mistakes that compute from scratch.

Each takes the adapter's arguments, in its order; tests/cases.py names them as "hidden.answers:NAME".
"""

from __future__ import annotations

import math

import numpy as np
import torch

# ---------------------------------------------------------------- the learning-rate schedule


def lr_cosine_schedule(it, max_learning_rate, min_learning_rate, warmup_iters, cosine_cycle_iters, *, shift=0):
    if it < warmup_iters:
        return (it + shift) / warmup_iters * max_learning_rate
    if it > cosine_cycle_iters:
        return min_learning_rate
    progress = (it - warmup_iters) / (cosine_cycle_iters - warmup_iters)
    return min_learning_rate + 0.5 * (1 + math.cos(math.pi * progress)) * (max_learning_rate - min_learning_rate)


def warmup_from_one(*args):
    return lr_cosine_schedule(*args, shift=1)


def cosine_from_zero(it, max_learning_rate, min_learning_rate, warmup_iters, cosine_cycle_iters):
    if it < warmup_iters or it > cosine_cycle_iters:
        return lr_cosine_schedule(it, max_learning_rate, min_learning_rate, warmup_iters, cosine_cycle_iters)
    progress = it / cosine_cycle_iters
    return min_learning_rate + 0.5 * (1 + math.cos(math.pi * progress)) * (max_learning_rate - min_learning_rate)


def no_floor_after_cycle(it, max_learning_rate, min_learning_rate, warmup_iters, cosine_cycle_iters):
    if it < warmup_iters:
        return it / warmup_iters * max_learning_rate
    progress = (it - warmup_iters) / (cosine_cycle_iters - warmup_iters)
    return min_learning_rate + 0.5 * (1 + math.cos(math.pi * progress)) * (max_learning_rate - min_learning_rate)


# ---------------------------------------------------------------- cross-entropy and clipping


def no_max_shift(inputs, targets):
    picked = inputs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (inputs.exp().sum(-1).log() - picked).mean()


def always_scaled(parameters, max_l2_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = torch.sqrt(sum((g * g).sum() for g in grads))
    for g in grads:
        g.mul_(max_l2_norm / (norm + 1e-6))


def parameters_scaled(parameters, max_l2_norm):
    parameters = [p for p in parameters if p.grad is not None]
    norm = torch.sqrt(sum((p.grad * p.grad).sum() for p in parameters))
    if norm > max_l2_norm:
        with torch.no_grad():
            for p in parameters:
                p.mul_(max_l2_norm / (norm + 1e-6))


# ---------------------------------------------------------------- AdamW


class Adam(torch.optim.Optimizer):
    """AdamW as students write it, with one thing to switch off or get wrong (each known mistake below)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, **wrong):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.wrong = wrong
        self.kept: dict = {}  # state outside self.state: a state_dict() does not carry it

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                state = self.kept.setdefault(id(p), {}) if self.wrong.get("state_outside") else self.state[p]
                if not state:
                    state["step"], state["m"], state["v"] = 0, torch.zeros_like(p), torch.zeros_like(p)
                state["step"] += 1
                t, m, v = state["step"], state["m"], state["v"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                corrected = not self.wrong.get("no_bias_correction")
                step_size = lr * math.sqrt(1 - beta2**t) / (1 - beta1**t) if corrected else lr
                p.addcdiv_(m, v.sqrt().add_(eps), value=-step_size)
                p.mul_(1 - (decay if self.wrong.get("decay_without_lr") else lr * decay))


def adam_with(**wrong):
    return lambda: lambda params, **hyper: Adam(params, **hyper, **wrong)


no_bias_correction = adam_with(no_bias_correction=True)
decay_without_lr = adam_with(decay_without_lr=True)
state_outside = adam_with(state_outside=True)


# ---------------------------------------------------------------- the batch sampler


def get_batch(dataset, batch_size, context_length, device, *, low=0, high=0, shifted=1):
    starts = np.random.randint(low, len(dataset) - context_length - high, size=batch_size)
    x = np.stack([dataset[s : s + context_length] for s in starts])
    y = np.stack([dataset[s + shifted : s + shifted + context_length] for s in starts])
    return torch.from_numpy(x.astype(np.int64)).to(device), torch.from_numpy(y.astype(np.int64)).to(device)


def last_start_never_drawn(*args):
    return get_batch(*args, high=1)


def first_start_never_drawn(*args):
    return get_batch(*args, low=1)


def y_not_shifted(*args):
    return get_batch(*args, shifted=0)
