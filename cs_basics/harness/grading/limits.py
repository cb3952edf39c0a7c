"""The limits a submission's code runs under (no torch here: the command line reads the defaults)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    case_seconds: float = 20.0  # each case; the reference needs milliseconds
    import_seconds: float = 120.0  # importing the submission (and the device's start-up)
    total_seconds: float = 270.0  # the whole submission: any submission is graded in under 5 minutes
    timeouts_per_problem: int = 2  # after this many cases of a problem ran out of time, its other cases are not run
    memory_mb: int = 4096  # RLIMIT_DATA: torch imports in well under 1 GiB
    file_mb: int = 64  # the largest file the child may write
    tmp_mb: int = 512  # what the job's /tmp, /var/tmp, /dev/shm and working folder hold together (memory)
    output_kb: int = 64  # how much of the child's stdout and stderr is kept
    processes: int = 256  # RLIMIT_NPROC, when the child runs under its own uid
    progress_line_kb: int = 64  # a longer line on the progress pipe is dropped
    progress_mb: int = 16  # the most the grader reads from the progress pipe of one job
    # torch's threads in the child (0: torch's default, one per core). A batch gives each of its workers its
    # share of the cores: two children of two threads each on two cores spin in OpenMP's barriers, waiting for
    # a thread that is not running, and the graded cases (small tensors) took ten times as long
    threads: int = 0
    # not a limit, but what the staff decided: problems whose code they read and released from a hold
    # (`--release PROBLEM`: code that reaches into the interpreter is graded like any other)
    released: tuple[str, ...] = ()


def limits_from(args: argparse.Namespace) -> Limits:
    """The limits `cs-basics grade`'s options give."""
    return Limits(
        case_seconds=args.case_seconds,
        total_seconds=args.total_seconds,
        memory_mb=args.memory_mb,
        tmp_mb=args.tmp_mb,
        timeouts_per_problem=args.timeouts_per_problem,
        released=tuple(getattr(args, "release", None) or ()),
    )
