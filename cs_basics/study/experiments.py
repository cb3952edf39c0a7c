"""`cs-basics experiments`: why scaled dot-product attention works, as figures.

Every attention call goes through the adapter (tests/adapters.py, found through the
assignment's config), so a student sees their own function. Attention weights are read
out through V = I: softmax(Q K^T / sqrt(d_k)) I is the weight matrix itself. Torch's
own SDPA is the comparison in the verification. Deterministic for a seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F

DIMS = (8, 64, 512)  # the d_k of the scaling figure and the variance table
N_KEYS = 10


@dataclass
class Draws:
    peaked: int = 2000  # draws per d_k for the mean largest weight and the entropy
    variance: int = 200_000  # draws per d_k for the variance of q.k


QUICK = Draws(peaked=50, variance=20_000)


def weights(adapters: ModuleType, Q: torch.Tensor, K: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The attention weights (..., queries, keys) of the student's function: V is the identity."""
    eye = torch.eye(K.shape[-2], dtype=K.dtype).expand(*K.shape[:-1], K.shape[-2])
    return adapters.run_scaled_dot_product_attention(Q, K, eye, mask)


def unscaled_weights(adapters: ModuleType, Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """softmax(Q K^T) without the 1/sqrt(d_k): the same function on Q * sqrt(d_k)."""
    return weights(adapters, Q * math.sqrt(Q.shape[-1]), K)


def verify(adapters: ModuleType, gen: torch.Generator) -> dict:
    """The notebook's shapes against torch's SDPA: shapes, largest difference, row sums."""
    Q, K, V = (torch.randn(2, n, d, generator=gen) for n, d in ((4, 8), (6, 8), (6, 16)))
    out = adapters.run_scaled_dot_product_attention(Q, K, V)
    w = weights(adapters, Q, K)
    expected = F.scaled_dot_product_attention(Q, K, V)
    return {
        "output_shape": list(out.shape),
        "weights_shape": list(w.shape),
        "max_abs_diff": (out - expected).abs().max().item(),
        "max_row_sum_error": (w.sum(-1) - 1).abs().max().item(),
    }


def scaling_examples(adapters: ModuleType, gen: torch.Generator) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """For each d_k: one query against N_KEYS keys, the weights (unscaled, scaled)."""
    examples = {}
    for d_k in DIMS:
        q, K = torch.randn(1, d_k, generator=gen), torch.randn(N_KEYS, d_k, generator=gen)
        examples[d_k] = (unscaled_weights(adapters, q, K)[0], weights(adapters, q, K)[0])
    return examples


def peakedness(adapters: ModuleType, gen: torch.Generator, draws: int) -> list[dict]:
    """Mean largest weight and mean entropy (nats) over `draws` queries, per d_k, without and with the scale."""
    rows = []
    for d_k in (2**p for p in range(1, 11)):
        q, K = torch.randn(draws, 1, d_k, generator=gen), torch.randn(draws, N_KEYS, d_k, generator=gen)
        row = {"d_k": d_k}
        for name, w in (("unscaled", unscaled_weights(adapters, q, K)), ("scaled", weights(adapters, q, K))):
            w = w[:, 0]  # (draws, keys)
            row[f"{name}_max"] = w.max(-1).values.mean().item()
            row[f"{name}_entropy"] = -(w * w.clamp_min(1e-30).log()).sum(-1).mean().item()
        rows.append(row)
    return rows


def variance_table(gen: torch.Generator, draws: int, chunk: int = 20_000) -> list[dict]:
    """Empirical variance of q.k for q, k ~ N(0, I): the theory says d_k (and 1 after the scale)."""
    rows = []
    for d_k in DIMS:
        dots = []
        for start in range(0, draws, chunk):
            n = min(chunk, draws - start)
            q, k = torch.randn(2, n, d_k, generator=gen, dtype=torch.float64)
            dots.append((q * k).sum(-1))
        var = torch.cat(dots).var().item()
        rows.append({"d_k": d_k, "variance": var, "theory": d_k, "relative_error": var / d_k - 1, "scaled": var / d_k})
    return rows


def masking_examples(adapters: ModuleType, gen: torch.Generator, n: int = 5) -> dict[str, torch.Tensor]:
    """Weights for n positions without a mask and with a causal one, and a padded batch."""
    Q, K = torch.randn(n, 4, generator=gen), torch.randn(n, 4, generator=gen)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    lengths = torch.tensor([n, 3])  # the second sequence has 2 padding positions
    padding = (torch.arange(n) < lengths[:, None])[:, None, :]  # (batch, 1, keys)
    Qb, Kb = torch.randn(2, n, 4, generator=gen), torch.randn(2, n, 4, generator=gen)
    return {
        "no mask": weights(adapters, Q, K),
        "causal mask": weights(adapters, Q, K, causal),
        "padding mask (length 3 of 5)": weights(adapters, Qb, Kb, padding)[1],
    }


def run(out: Path, seed: int = 0, quick: bool = False, root: Path | None = None) -> dict:
    """Every experiment: figures into `out`, a summary printed, the numbers returned."""
    from cs_basics.harness.config import Assignment

    from . import figures

    adapters = Assignment.find(root).adapters()
    draws = QUICK if quick else Draws()
    gen = torch.Generator().manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        result = {
            "seed": seed,
            "verification": verify(adapters, gen),
            "peakedness": peakedness(adapters, gen, draws.peaked),
            "variance": variance_table(gen, draws.variance),
        }
        scaling, masking = scaling_examples(adapters, gen), masking_examples(adapters, gen)
    result["figures"] = [
        str(figures.scaling(scaling, result["peakedness"], out / "scaling.png")),
        str(figures.masking(masking, out / "masking.png")),
    ]
    figures.summary(result, draws)
    return result
