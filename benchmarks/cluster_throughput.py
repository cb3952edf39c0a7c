"""Benchmark: one course graded three ways on this machine, side by side, in submissions per minute.

Makes N copies of this checkout's `cs_basics` (a correct submission) and grades the folder, each time
from nothing: in one process (`--workers 1`), in one process with `--workers 2`, and as a 2-task Slurm
array (docs/cluster/grade.sbatch, 1 CPU and so 1 worker per task) followed by its merge
(docs/cluster/merge.sbatch), timed from the array's submission to the merge's end. The Slurm cluster is
the staff tests' own single-node one (staff_tests/slurm_cluster.py: as root; it installs slurm-wlm and
munge with apt-get when missing); without it, the first two ways alone.
Usage (as root): uv run python benchmarks/cluster_throughput.py [--copies 16]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from staff_tests.slurm_cluster import Cluster, Unavailable  # noqa: E402


def all_correct(out: Path, copies: int) -> bool:
    scores = (out / "scores.csv").read_text().splitlines()[1:] if (out / "scores.csv").is_file() else []
    return len(scores) == copies and all(",6.0,6.0" in line for line in scores)


def one_process(folder: Path, out: Path, workers: int) -> float:
    command = [sys.executable, "-m", "cs_basics.cli", "grade", "--submission", str(folder), "--results", str(out)]
    start = time.perf_counter()
    done = subprocess.run([*command, "--workers", str(workers)], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0 or not all_correct(out, len(list(folder.iterdir()))):
        raise SystemExit(f"--workers {workers} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return seconds


def slurm_array(cluster: Cluster, course: Path, copies: int) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env |= {"SHARDS": "2", "COURSE": str(course), "GRADER": str(ROOT), "UV": shutil.which("uv") or "uv"}
    logs = course / "logs"
    logs.mkdir()
    start = time.perf_counter()
    job = cluster.sbatch("--array=1-2", "--cpus-per-task=1", "--mem=4G", f"--output={logs}/grade-%A_%a.out",
                         str(ROOT / "docs/cluster/grade.sbatch"), env=env)  # fmt: skip
    merge = cluster.sbatch(f"--dependency=afterany:{job}", f"--output={logs}/merge-%j.out",
                           str(ROOT / "docs/cluster/merge.sbatch"), env=env)  # fmt: skip
    cluster.wait(merge, seconds=3600)
    seconds = time.perf_counter() - start
    if not all_correct(course / "results/all", copies):
        printed = "".join(p.read_text(errors="replace")[-2000:] for p in sorted(logs.iterdir()))
        raise SystemExit(f"the Slurm array failed:\n{printed}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=16)
    args = parser.parse_args()
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="cs-basics-cluster-") as tmp:
        tmp = Path(tmp)
        folder = tmp / "course/submissions"
        for i in range(args.copies):
            shutil.copytree(
                ROOT / "cs_basics", folder / f"s{i:03d}" / "cs_basics", ignore=shutil.ignore_patterns("__pycache__")
            )
        times["one process, --workers 1"] = one_process(folder, tmp / "one", 1)
        times["one process, --workers 2"] = one_process(folder, tmp / "two", 2)
        try:
            with Cluster(tmp / "slurm") as cluster:
                times["Slurm array of 2 tasks (1 CPU, 1 worker each) + merge"] = slurm_array(
                    cluster, tmp / "course", args.copies
                )
        except Unavailable as why:
            print(f"no Slurm array: {why}")
    table = Table(title=f"{args.copies} correct submissions on {os.cpu_count()} CPUs, each way from nothing")
    for column in ("way", "wall s", "submissions per minute"):
        table.add_column(column)
    for way, seconds in times.items():
        table.add_row(way, f"{seconds:.1f}", f"{args.copies / seconds * 60:.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
