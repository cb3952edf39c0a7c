"""Shards: the I-th of N deterministic slices of a folder of submissions, for a cluster's array jobs.

`--shard I/N` (I from 1 to N) or, without it, the environment of an array job:

- Kubernetes Indexed Job: `JOB_COMPLETION_INDEX` (0 to N-1, set by Kubernetes) and `CS_BASICS_SHARDS`
  (N, set by the manifest to the Job's `completions`: Kubernetes does not pass the count itself).
- Slurm job array: `SLURM_ARRAY_TASK_ID`, `SLURM_ARRAY_TASK_MIN`, `SLURM_ARRAY_TASK_COUNT` (and
  `SLURM_ARRAY_TASK_STEP` for `--array=0-30:10`), so `--array=0-3` and `--array=1-4` both give 4 shards.
  Only a whole array can say how many shards there are: one that starts at neither 0 nor 1, or has one
  task, is refused. It is most often a re-run of some shards (`sbatch --array=2` sets COUNT=1, MIN=2;
  `--array=3-4` sets COUNT=2, MIN=3), and taking it at its word would grade the whole course, or the
  wrong halves of it, into those shards' folders. A re-run passes `--shard I/N`, as the recipes do.

Slices are contiguous runs of the submissions sorted by name, of sizes that differ by at most one.
Contiguous rather than round-robin because a submission added later moves at most N-1 others to
another shard (round-robin would move every one after it), and a submission that stays in its
shard keeps its results file there, so a re-grade skips it if nothing changed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
SHARDS_VARIABLE = "CS_BASICS_SHARDS"  # the shard count a Kubernetes Indexed Job's manifest sets


class ShardError(ValueError):
    """A shard that cannot be: 0/2, 3/2, junk, or an array job's environment that names none."""


@dataclass(frozen=True)
class Shard:
    index: int  # 1..count
    count: int
    source: str = "--shard"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard(index: int, count: int, source: str) -> Shard:
    if count < 1:
        raise ShardError(f"{source}: the number of shards must be at least 1, got {count}")
    if not 1 <= index <= count:
        raise ShardError(f"{source}: shard {index} of {count} does not exist: shards are numbered 1 to {count}")
    return Shard(index, count, source)


def parse_shard(text: str) -> Shard:
    """`I/N`, I from 1 to N: `--shard 1/2` and `--shard 2/2` cover a folder."""
    found = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not found:
        raise ShardError(f"--shard {text!r}: expected I/N with whole numbers, I from 1 to N (e.g. 1/4)")
    return shard(int(found[1]), int(found[2]), f"--shard {text}")


def _number(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise ShardError(f"{name}={env[name]!r} is not a whole number") from None


def shard_from_env(env: Mapping[str, str]) -> Shard | None:
    """The shard of a Kubernetes Indexed Job or a Slurm array task; None outside both."""
    if "JOB_COMPLETION_INDEX" in env:
        if SHARDS_VARIABLE not in env:
            raise ShardError(
                f"JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but {SHARDS_VARIABLE} is not: "
                "set it in the manifest to the Job's completions, or pass --shard I/N"
            )
        source = f"JOB_COMPLETION_INDEX={env['JOB_COMPLETION_INDEX']}, {SHARDS_VARIABLE}={env[SHARDS_VARIABLE]}"
        return shard(_number(env, "JOB_COMPLETION_INDEX") + 1, _number(env, SHARDS_VARIABLE), source)
    if "SLURM_ARRAY_TASK_ID" in env:
        missing = [n for n in ("SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT") if n not in env]
        if missing:
            raise ShardError(f"SLURM_ARRAY_TASK_ID is set but {', '.join(missing)} is not; pass --shard I/N")
        task, first, count = (_number(env, f"SLURM_ARRAY_TASK_{n}") for n in ("ID", "MIN", "COUNT"))
        step = _number(env, "SLURM_ARRAY_TASK_STEP") if "SLURM_ARRAY_TASK_STEP" in env else 1
        source = f"SLURM_ARRAY_TASK_ID={task} of {count} from {first}"
        if step < 1 or (task - first) % step:
            raise ShardError(f"{source}: the array is not an evenly stepped range (use --array=1-N)")
        if count == 1 or first not in (0, 1):
            raise ShardError(
                f"{source}: an array of {count} task{'s' * (count > 1)} starting at {first} does not say how many "
                "shards the course has (a re-run of some shards?): pass --shard I/N, this task's shard and the number"
                " of shards (the recipe passes --shard $SLURM_ARRAY_TASK_ID/$SHARDS)"
            )
        return shard((task - first) // step + 1, count, source)
    return None


def resolve_shard(given: Shard | None, env: Mapping[str, str]) -> Shard | None:
    """`--shard` wins; else the array job's environment; None: the whole folder."""
    return given if given is not None else shard_from_env(env)


def submission_folders(folder: Path) -> list[Path]:
    """The submissions of a course's folder, in the order shards slice them: its subfolders by name."""
    return sorted(d for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))


def select(items: Sequence[T], which: Shard | None) -> list[T]:
    """The shard's contiguous slice of `items` (already in a stable order); all of them without a shard."""
    if which is None:
        return list(items)
    n = len(items)
    return list(items[(which.index - 1) * n // which.count : which.index * n // which.count])


def shard_of(items: Sequence[T], item: T, count: int) -> int:
    """The shard (1 to count) whose slice of `items` holds `item`."""
    return next(i for i in range(1, count + 1) if item in select(items, Shard(i, count)))
