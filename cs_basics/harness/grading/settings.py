"""What `cs-basics grade`'s options ask of a grading, as one value: cli.py reads its command line once into a
`GradeSettings` and hands it down (no argparse below cli.py). No torch here: the command starts the grading
server (which imports torch) from these settings before it imports torch itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cs_basics.harness.cgroup import own_memory
from cs_basics.harness.grading.sandbox.limits import Limits, released_by_environment, within_memory


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
    workers: int | None = None  # parallel gradings of a folder; None: half the cores
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
