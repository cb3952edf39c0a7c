"""CPU seconds of a command and of every process under it, for the benchmarks' ratios on a busy machine.

A grading's processes are not all reaped by their parents (bubblewrap's are killed with it), so the
children's rusage misses the grading server and its jobs. Where this user may make a cgroup (root, with
cgroup v2's `cpu.stat` or v1's `cpuacct`), the command runs in one of its own and its usage is read from
there; elsewhere the rusage of the children this process reaped is the answer (and says so).
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from pathlib import Path

CGROUP_ROOTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup/cpuacct"))


def _cgroup_root() -> Path | None:
    for root in CGROUP_ROOTS:
        if os.access(root, os.W_OK) and ((root / "cgroup.controllers").exists() or (root / "cpuacct.usage").exists()):
            return root
    return None


def _usage(group: Path) -> float:
    if (group / "cpu.stat").exists():  # v2: usage_usec, kept for every cgroup
        stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
        return int(stat["usage_usec"]) / 1e6
    return int((group / "cpuacct.usage").read_text()) / 1e9


def remove_cgroup(group: Path) -> None:
    """Remove a cgroup made for a measure, once the last processes counted in it have left (they may take a moment)."""
    for _ in range(100):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.05)


def run(command: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, float, float, str]:
    """subprocess.run(command), and (it, wall seconds, CPU seconds, how the CPU was counted)."""
    root = _cgroup_root()
    group = root / f"cs-basics-bench-{os.getpid()}-{time.monotonic_ns()}" if root else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    if group is not None:
        group.mkdir()
        kwargs["preexec_fn"] = lambda: (group / "cgroup.procs").write_text(str(os.getpid()))
    start = time.perf_counter()
    try:
        done = subprocess.run(command, **kwargs)
        wall = time.perf_counter() - start
        if group is not None:
            return done, wall, _usage(group), "cgroup"
    finally:
        if group is not None:
            remove_cgroup(group)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, "reaped children only"
