"""The figures and the printed summary of `cs-basics experiments` (matplotlib's Agg backend, rich)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt
import torch

DPI = 90


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, metadata={"Software": None})  # no version string: the same bytes each run
    plt.close(fig)
    return path


def scaling(examples: dict[int, tuple[torch.Tensor, torch.Tensor]], peaked: list[dict], path: Path) -> Path:
    """Top: one query's weights over 10 keys per d_k, without and with the scale. Bottom: peakedness vs d_k."""
    fig = plt.figure(figsize=(11, 6.5))
    grid = fig.add_gridspec(2, len(examples))
    for i, (d_k, (unscaled, scaled)) in enumerate(examples.items()):
        ax = fig.add_subplot(grid[0, i])
        keys = torch.arange(len(scaled))
        ax.bar((keys - 0.2).tolist(), unscaled.tolist(), width=0.4, label="softmax(q·k)")
        ax.bar((keys + 0.2).tolist(), scaled.tolist(), width=0.4, label="softmax(q·k / √d_k)")
        ax.set(title=f"d_k = {d_k}", xlabel="key", ylim=(0, 1), xticks=keys.tolist())
        if i == 0:
            ax.set_ylabel("attention weight")
            ax.legend(fontsize=8)
    d_k = [r["d_k"] for r in peaked]
    ax_max, ax_ent = (
        fig.add_subplot(grid[1, : len(examples) // 2 + 1]),
        fig.add_subplot(grid[1, len(examples) // 2 + 1 :]),
    )
    for name, style in (("unscaled", "o-"), ("scaled", "s-")):
        ax_max.plot(d_k, [r[f"{name}_max"] for r in peaked], style, label=name)
        ax_ent.plot(d_k, [r[f"{name}_entropy"] for r in peaked], style, label=name)
    ax_max.set(ylabel="mean largest weight", ylim=(0, 1.05))
    ax_ent.axhline(torch.log(torch.tensor(10.0)).item(), color="gray", ls=":", label="uniform (ln 10)")
    ax_ent.set(ylabel="mean entropy (nats)")
    for ax in (ax_max, ax_ent):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("d_k (one query, 10 keys, many draws)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def masking(examples: dict[str, torch.Tensor], path: Path) -> Path:
    fig, axes = plt.subplots(1, len(examples), figsize=(4 * len(examples), 3.8))
    for ax, (title, w) in zip(axes, examples.items(), strict=True):
        image = ax.imshow(w.tolist(), vmin=0, vmax=1, cmap="viridis")
        for (i, j), value in (
            (ij, w[ij].item()) for ij in ((i, j) for i in range(w.shape[0]) for j in range(w.shape[1]))
        ):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7, color="w" if value < 0.6 else "k")
        ax.set(title=title, xlabel="key", ylabel="query")
    fig.colorbar(image, ax=axes, shrink=0.8, label="weight")
    fig.savefig(path, dpi=DPI, metadata={"Software": None}, bbox_inches="tight")
    plt.close(fig)
    return path


def summary(result: dict, draws) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    v = result["verification"]
    console.print(
        f"[bold]verification[/] against torch's SDPA (batch 2, 4 queries, 6 keys, d_k 8, d_v 16): "
        f"output {tuple(v['output_shape'])}, weights {tuple(v['weights_shape'])}, "
        f"largest |difference| {v['max_abs_diff']:.2e}, weight rows sum to 1 within {v['max_row_sum_error']:.1e}"
    )
    table = Table(title=f"variance of q·k, q, k ~ N(0, I), {draws.variance} draws (seed {result['seed']})")
    for column in ("d_k", "empirical", "theory (d_k)", "relative error", "after the scale"):
        table.add_column(column, justify="right")
    for r in result["variance"]:
        table.add_row(
            str(r["d_k"]), f"{r['variance']:.2f}", str(r["theory"]), f"{r['relative_error']:+.2%}", f"{r['scaled']:.3f}"
        )
    console.print(table)
    peaked = Table(title=f"how peaked: one query, 10 keys, {draws.peaked} draws per d_k")
    for column in ("d_k", "max weight, unscaled", "max weight, scaled", "entropy, unscaled", "entropy, scaled"):
        peaked.add_column(column, justify="right")
    for r in result["peakedness"]:
        peaked.add_row(
            str(r["d_k"]),
            *(f"{r[k]:.3f}" for k in ("unscaled_max", "scaled_max", "unscaled_entropy", "scaled_entropy")),
        )
    console.print(peaked)
    console.print("figures: " + ", ".join(result["figures"]))
