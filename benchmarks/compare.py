"""Benchmark: issue 31's measures, this checkout against an earlier commit, side by side in one run.

For this checkout and for `--before REV` (checked out into a temporary git worktree with an environment
of its own from its lock file, `uv sync --frozen`), alternating, warm, median of `--repeats`:
1. the student's loop: in each one's handout, with the reference solution copied in (what a student who
   has finished has; `cs-basics handout --no-check`), `uv run pytest -m points` over `uv run pytest` of one
   trivial torch test in the same environment (the floor);
2. one grading: `uv run cs-basics grade` of the checkout itself (one correct submission) over
   `uv run pytest -m points` in it;
3. a course: `--copies` copies of the checkout's `cs_basics` (correct submissions) graded as one folder with
   `--workers`: submissions a minute;
4. with `--suite` only (it takes many minutes): `uv run pytest -q` in each checkout, once.
Prints every median, each checkout's ratios and this checkout against the earlier one. Python caches
bytecode as on a student's machine, even where the calling shell sets PYTHONDONTWRITEBYTECODE.
Usage: uv run python benchmarks/compare.py --before REV [--repeats 3] [--copies 16] [--workers 2] [--suite]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import cpu_seconds
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
TRIVIAL = "import torch\n\n\ndef test_trivial():\n    assert torch.ones(2).sum() == 2\n"
SOLUTION = Path("cs_basics/nn/functional.py")
UV_RUN = ["uv", "run", "--frozen", "--project"]


def environment() -> dict[str, str]:
    drop = ("PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV", "UV_PROJECT", "CS_BASICS")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)} | {"UV_PYTHON_DOWNLOADS": "never"}


# (side, measure) -> CPU seconds of each run, every process it started (less noisy on a loaded machine)
CPU: dict[tuple[str, str], list[float]] = {}
COUNTED: set[str] = set()  # how cpu_seconds counted them: "cgroup", or the reaped children only


def call(command: list[str], cwd: Path, check: bool = True, key: tuple[str, str] | None = None) -> float:
    """Wall seconds it took (its CPU seconds into CPU[key]); stops the benchmark, with its output, if it failed."""
    done, seconds, cpu, how = cpu_seconds.run(command, cwd=cwd, env=environment(), capture_output=True, text=True)
    COUNTED.add(how)
    if key is not None:
        CPU.setdefault(key, []).append(cpu)
    if check and done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed in {cwd}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return seconds


def checkout(rev: str, folder: Path) -> Path:
    """`rev` in a worktree of its own, with its own environment."""
    subprocess.run(["git", "worktree", "add", "--detach", str(folder), rev], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["uv", "sync", "--frozen", "-q"], cwd=folder, env=environment(), check=True)
    return folder


def handout(repo: Path, out: Path) -> Path:
    """The repository's handout with the reference solution in it."""
    call([*UV_RUN, str(repo), "cs-basics", "handout", "--no-check", str(out)], repo)
    shutil.copy(repo / SOLUTION, out / SOLUTION)
    return out


def course(repo: Path, folder: Path, copies: int) -> Path:
    for i in range(copies):
        target = folder / f"s{i:03d}" / "cs_basics"
        shutil.copytree(repo / "cs_basics", target, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def commands(repo: Path, tmp: Path, copies: int, workers: int) -> dict[str, tuple[list[str], Path]]:
    """Each measure's command and folder, for one checkout."""
    student = handout(repo, tmp / "handout")
    trivial = tmp / "trivial"
    trivial.mkdir()
    (trivial / "test_trivial.py").write_text(TRIVIAL)
    (trivial / "pytest.ini").write_text("[pytest]\n")
    submissions = course(repo, tmp / "submissions", copies)
    grade = [*UV_RUN, str(repo), "cs-basics", "grade", "--quiet"]
    return {
        "handout: pytest -m points": ([*UV_RUN, str(student), "pytest", "-q", "-m", "points"], student),
        "handout: one trivial torch test": ([*UV_RUN, str(student), "pytest", "-q", str(trivial)], trivial),
        "repository: pytest -m points": ([*UV_RUN, str(repo), "pytest", "-q", "-m", "points"], repo),
        "repository: cs-basics grade": ([*grade, "--results", str(tmp / "results.json")], repo),
        f"course: {copies} submissions, --workers {workers}": (
            # --force: each repeat grades every submission again (without it a re-run skips those already graded)
            [
                *grade,
                "--submission",
                str(submissions),
                "--results",
                str(tmp / "course"),
                "--workers",
                str(workers),
                "--force",
            ],
            repo,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the earlier commit")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--copies", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--suite", action="store_true", help="also time `uv run pytest` in each (many minutes)")
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    names = {"before": f"{args.before}", "after": f"this checkout ({head.stdout.strip()})"}
    with tempfile.TemporaryDirectory(prefix="cs-basics-compare-") as tmp:
        tmp = Path(tmp)
        tmp.chmod(0o755)  # each grader's child reaches its checkout under a uid of its own
        before = checkout(args.before, tmp / "checkout")
        try:
            runs = {}
            for side, repo in (("before", before), ("after", ROOT)):
                (tmp / side).mkdir()
                runs[side] = commands(repo, tmp / side, args.copies, args.workers)
            times: dict[tuple[str, str], list[float]] = {}
            for side in runs:  # warm: each handout's environment is made now, every cache filled
                for command, cwd in runs[side].values():
                    call(command, cwd)
            for _ in range(args.repeats):
                for measure in runs["after"]:
                    for side in runs:
                        key = (side, measure)
                        times.setdefault(key, []).append(call(*runs[side][measure], key=key))
            if args.suite:
                for side, repo in (("before", before), ("after", ROOT)):
                    times[(side, "repository: uv run pytest (the suite)")] = [
                        call([*UV_RUN, str(repo), "pytest", "-q"], repo, check=False)  # timed, whatever fails
                    ]
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, capture_output=True)
    report(times, names, args, "wall seconds")
    if {"cgroup"} == COUNTED:
        report(CPU, names, args, "CPU seconds (every process, in a cgroup)")
    else:  # a grading's sandbox is killed before it reaps the grading server: its CPU would not be counted
        loop = ("handout: pytest -m points", "handout: one trivial torch test")
        report({k: v for k, v in CPU.items() if k[1] in loop}, names, args, "CPU seconds (every process, reaped)")


def report(
    times: dict[tuple[str, str], list[float]], names: dict[str, str], args: argparse.Namespace, what: str
) -> None:
    median = {key: statistics.median(values) for key, values in times.items()}
    console = Console()
    table = Table(title=f"{what}, median of {args.repeats} alternating runs (load average {load()})")
    for column in ("measure", names["before"], names["after"], "after / before"):
        table.add_column(column)
    for measure in dict.fromkeys(m for _, m in median):
        b, a = median[("before", measure)], median[("after", measure)]
        table.add_row(measure, f"{b:.2f}", f"{a:.2f}", f"{a / b:.2f}")
    console.print(table)
    course = f"course: {args.copies} submissions, --workers {args.workers}"
    ratios = Table(title=f"the measures of issue 31, in {what}")
    for column in ("measure", names["before"], names["after"], "goal"):
        ratios.add_column(column)

    def ratio(measure: str, floor: str) -> list[str]:
        return [f"{median[(side, measure)] / median[(side, floor)]:.2f}" for side in ("before", "after")]

    loop = ratio("handout: pytest -m points", "handout: one trivial torch test")
    ratios.add_row("student's loop: pytest -m points / trivial test", *loop, "<= 1.05")
    if ("after", "repository: cs-basics grade") not in median:
        console.print(ratios)
        return
    grading = ratio("repository: cs-basics grade", "repository: pytest -m points")
    ratios.add_row("one grading: cs-basics grade / pytest -m points", *grading, "<= 1.3")
    rates = [f"{args.copies / median[(side, course)] * 60:.0f}" for side in ("before", "after")]  # per CPU minute
    ratios.add_row(
        f"a course: submissions a minute ({args.copies}, --workers {args.workers})", *rates, ">= before; 150"
    )
    suite = "repository: uv run pytest (the suite)"
    if ("after", suite) in median:
        ratios.add_row(
            "our suite: minutes", *[f"{median[(side, suite)] / 60:.1f}" for side in ("before", "after")], "<= 10"
        )
    console.print(ratios)


def load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
