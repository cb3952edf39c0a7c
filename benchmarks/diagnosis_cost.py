"""Benchmark: what naming the known mistakes costs a failing `uv run pytest -m points`.

Copies the project (code, tests, hidden cases, fixtures) to a temporary folder, gives it an
attention without the 1/sqrt(d_k) scale (most attention cases fail, and each failure runs
every known mistake of attention on that case's inputs), then runs `uv run pytest -q -m points`
there, alternately with diagnosis on and with `CS_BASICS_DIAGNOSIS=off`, warm, and prints the
medians and their ratio.
Usage: uv run python benchmarks/diagnosis_cost.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NO_SCALE = """

def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1)  # no 1/sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    return weights @ V
"""


def seconds(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    diagnosed = "(known mistake: no_scale)" in result.stdout
    if result.returncode != 1 or diagnosed == (env.get("CS_BASICS_DIAGNOSIS") == "off"):
        raise SystemExit(f"expected failing tests, diagnosed unless switched off:\n{result.stdout[-3000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp)
        for name in ("cs_basics", "tests", "hidden", "fixtures"):
            shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(ROOT / "pyproject.toml", copy)
        with (copy / "cs_basics" / "nn" / "functional.py").open("a") as f:
            f.write(NO_SCALE)
        command = ["uv", "run", "--project", str(ROOT), "pytest", "-q", "-m", "points"]
        base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "CS_BASICS_DIAGNOSIS")}
        envs = {"with diagnosis": base, "CS_BASICS_DIAGNOSIS=off": base | {"CS_BASICS_DIAGNOSIS": "off"}}
        times: dict[str, list[float]] = {name: [] for name in envs}
        for env in envs.values():  # warm the caches once
            seconds(command, copy, env)
        for _ in range(args.repeats):
            for name, env in envs.items():
                times[name].append(seconds(command, copy, env))
    with_, without = (statistics.median(t) for t in times.values())
    for name, t in times.items():
        print(f"{name:26s} median {statistics.median(t):.2f} s  ({', '.join(f'{x:.2f}' for x in t)})")
    paired = statistics.median(w / o for w, o in zip(*times.values(), strict=True))
    print(f"ratio of medians {with_ / without:.3f}, median of paired ratios {paired:.3f} ({args.repeats} alternating)")


if __name__ == "__main__":
    main()
