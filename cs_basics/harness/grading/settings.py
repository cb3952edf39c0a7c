"""What `cs-basics grade`'s options ask of a grading, as one value: cli.py reads its command line once into a
`GradeSettings` and hands it down (no argparse below cli.py). No torch here: the command starts the grading
server (which imports torch) from these settings before it imports torch itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from cs_basics.harness.cgroup import own_memory, usable_cores
from cs_basics.harness.grading.sandbox.limits import Limits, released_by_environment, within_memory
from cs_basics.harness.grading.sandbox.policy import GRADER_MB, SERVER_MB


@dataclass(frozen=True)
class GradeSettings:
    device: str | None = None  # cuda, mps or cpu; None: the best present
    sandbox: str | None = None  # bubblewrap or fallback; None: $CS_BASICS_SANDBOX, else bubblewrap where it runs
    case_seconds: float = Limits.case_seconds
    total_seconds: float = Limits.total_seconds
    timeouts_per_problem: int = Limits.timeouts_per_problem
    memory_mb: int = Limits.memory_mb
    tmp_mb: int = Limits.tmp_mb
    release: list[str] = field(default_factory=list)  # as given (a fingerprint compares it, regrade.settings_of)
    workers: int | None = None  # parallel gradings of a folder; None: default_workers()
    shard: str | None = None  # "I/N" of a folder, or None
    force: bool = False  # grade again submissions whose grade is up to date

    def limits(self, workers: int = 1) -> Limits:
        """The limits these settings give, within the memory this machine gives `workers` gradings."""
        released = tuple(self.release or ()) or released_by_environment()
        asked = Limits(
            case_seconds=self.case_seconds,
            total_seconds=self.total_seconds,
            memory_mb=self.memory_mb,
            tmp_mb=self.tmp_mb,
            timeouts_per_problem=self.timeouts_per_problem,
            released=released,
        )
        return within_memory(asked, own_memory(), workers)

    def default_workers(self) -> int:
        """`--workers` unless given: one per core this process may use (its affinity, its cpu cgroup's quota), as many
        as the memory it may use holds, each with its grading server and its code's whole memory limit (as one
        worker would have it: more workers never lower what a submission may use); at least one."""
        if self.workers:
            return self.workers
        memory = own_memory()
        limit_mb = memory.limit_mb if memory is not None and memory.limit_mb is not None else physical_mb()
        code_mb = self.limits(1).memory_mb or 0
        fit = (limit_mb - GRADER_MB) // (SERVER_MB + code_mb) if limit_mb else usable_cores()
        return max(1, min(usable_cores(), fit))


def physical_mb() -> int | None:
    """The machine's memory (where no cgroup bounds this process's), None where unknown."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20
    except (AttributeError, ValueError, OSError):
        return None
