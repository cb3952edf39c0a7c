"""The limits a submission's code runs under (no torch here: the command line reads the defaults)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from dataclasses import dataclass

from cs_basics.harness.cgroup import CgroupMemory, oom_kills, own_memory

# What the grader holds besides the submission's code, for fitting the code's limit into the memory the
# machine gives (docs/benchmarks.md, "Memory"): the grader and each worker's grading server import torch,
# about 300 MiB of their own each (torch 2.15's native start-up and its Python objects), beside the pages
# of torch's libraries they share and the scan process; one grading of the reference peaked at 633 MiB.
GRADER_MB = 340
SERVER_MB = 340  # each worker: its grading server and scan process, and what a child copies of the server's pages
CODE_FLOOR_MB = 64  # the least a submission's code is given, whatever the container: below it correct code fails


@dataclass(frozen=True)
class Limits:
    case_seconds: float = 20.0  # each case; the reference needs milliseconds
    import_seconds: float = 120.0  # importing the submission (and the device's start-up)
    total_seconds: float = 270.0  # the whole submission: any submission is graded in under 5 minutes
    timeouts_per_problem: int = 2  # after this many cases of a problem ran out of time, its other cases are not run
    # what the submission's code may allocate (RLIMIT_DATA, counted from the fork server's own data, which
    # its process inherits); lowered to what the container's memory leaves (within_memory)
    memory_mb: int = 4096
    file_mb: int = 64  # the largest file the child may write
    tmp_mb: int = 512  # what the job's /tmp, /var/tmp, /dev/shm and working folder hold together (memory)
    output_kb: int = 64  # how much of the child's stdout and stderr is kept
    processes: int = 256  # RLIMIT_NPROC, when the child runs under its own uid
    progress_line_kb: int = 64  # a longer line on the progress channel is dropped
    progress_mb: int = 16  # the most the grader reads from the progress channel of one job
    # torch's threads in the child (0: torch's default, one per core). A batch gives each of its workers its
    # share of the cores: two children of two threads each on two cores spin in OpenMP's barriers, waiting for
    # a thread that is not running, and the graded cases (small tensors) took ten times as long
    threads: int = 0
    # not a limit, but what the staff decided: problems whose code they read and released from a hold
    # (`--release PROBLEM`: code that reaches into the interpreter is graded like any other)
    released: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what fitting the limits to the machine changed, for the grade's notes


RELEASE_ENV = "CS_BASICS_RELEASE"  # "PROBLEM,PROBLEM": `--release` where a platform's command is fixed


def released_by_environment() -> tuple[str, ...]:
    """The problems $CS_BASICS_RELEASE releases (the staff set it where they cannot change the grading command:
    a PrairieLearn question's entrypoint, Gradescope's run_autograder); never the submission, whose code runs
    only in the child."""
    return tuple(p.strip() for p in os.environ.get(RELEASE_ENV, "").split(",") if p.strip())


def limits_from(args: argparse.Namespace, workers: int = 1) -> Limits:
    """The limits `cs-basics grade`'s options give, within the memory this machine gives `workers` gradings."""
    return within_memory(
        Limits(
            case_seconds=args.case_seconds,
            total_seconds=args.total_seconds,
            memory_mb=args.memory_mb,
            tmp_mb=args.tmp_mb,
            timeouts_per_problem=args.timeouts_per_problem,
            released=tuple(getattr(args, "release", None) or ()) or released_by_environment(),
        ),
        own_memory(),
        workers,
    )


def within_memory(limits: Limits, memory: CgroupMemory | None, workers: int = 1) -> Limits:
    """`limits`, the code's memory and its temporary folders (a tmpfs: memory too) lowered to what the
    cgroup's limit leaves once the grader and `workers` grading servers have theirs: past that limit the
    kernel's OOM killer ends a process, the grader's as readily as the code's, and the submission gets no
    grade at all. The staff's lower limits stay."""
    if memory is None or memory.limit_mb is None:
        return limits
    room = GRADER_MB + workers * SERVER_MB
    fits = max((memory.limit_mb - room) // workers, CODE_FLOOR_MB)
    lowered = []
    if not limits.memory_mb or limits.memory_mb > fits:
        lowered.append(f"the code's memory limit is {fits} MiB, not {limits.memory_mb or 'none'}")
    if limits.tmp_mb > fits:
        lowered.append(f"its temporary folders hold {fits} MiB, not {limits.tmp_mb}")
    if not lowered:
        return limits
    why = f"the memory this runs in ({memory.limit_mb} MiB, cgroup {memory.folder}) less the grader's {room} MiB"
    note = f"{' and '.join(lowered)}: {why}"
    if fits * workers + room > memory.limit_mb:
        note += (
            f"; that leaves too little, so the code keeps {CODE_FLOOR_MB} MiB and the grading may be killed: "
            f"give it at least {room + workers * CODE_FLOOR_MB} MiB"
        )
    memory_mb = min(limits.memory_mb or fits, fits)
    return dataclasses.replace(
        limits, memory_mb=memory_mb, tmp_mb=min(limits.tmp_mb, fits), notes=(*limits.notes, note)
    )


# how running out of memory reads where the code's limit stopped an allocation: Python's MemoryError, torch's
# CPU allocator, numpy's
OUT_OF_MEMORY = re.compile(r"^MemoryError\b|can't allocate memory|Unable to allocate|Cannot allocate memory")


def out_of_memory(message: str, memory_mb: int) -> str | None:
    """The sentence for a case whose error (`message`, "Type: text") says an allocation failed under the code's
    memory limit; None for any other error."""
    if not memory_mb or not OUT_OF_MEMORY.search(message):
        return None
    return f"your code used more than {memory_mb} MiB of memory, the limit of the process running it"


def killed_for_memory(kills_before: int | None) -> str:
    """What to add to the sentence of a job that died during a case, where the kernel's OOM killer has ended
    a process of this cgroup since `kills_before` (oom_kills() as the job started): past RLIMIT_DATA's count
    (shared memory, a tmpfs), the container's memory ran out, and the job's child goes first."""
    kills = oom_kills()
    if kills_before is None or kills is None or kills <= kills_before:
        return ""
    return RAN_OUT


RAN_OUT = ": the memory this grading runs in ran out (the kernel's OOM killer ended it)"
