"""The limits a submission's code runs under (no torch here: the command line reads the defaults)."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass

from cs_basics.harness.cgroup import CgroupMemory, oom_kills
from cs_basics.harness.grading.sandbox.policy import CODE_FLOOR_MB, GRADER_MB, LIMITS, SERVER_MB


@dataclass(frozen=True)
class Limits:
    # the defaults and what each bounds: policy.LIMITS
    case_seconds: float = LIMITS["case_seconds"]
    import_seconds: float = LIMITS["import_seconds"]
    total_seconds: float = LIMITS["total_seconds"]
    timeouts_per_problem: int = LIMITS["timeouts_per_problem"]
    memory_mb: int = LIMITS["memory_mb"]
    file_mb: int = LIMITS["file_mb"]
    tmp_mb: int = LIMITS["tmp_mb"]
    output_kb: int = LIMITS["output_kb"]
    processes: int = LIMITS["processes"]
    progress_line_kb: int = LIMITS["progress_line_kb"]
    progress_mb: int = LIMITS["progress_mb"]
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
