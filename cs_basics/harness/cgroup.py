"""The memory this process may use: its cgroup's limit (cgroup v2 or v1), as a container engine sets it.

A platform's container (Gradescope's 768 MB, a PrairieLearn job's 2 GiB, a Kubernetes pod's limit) is a
memory cgroup: past its limit the kernel's OOM killer ends one of its processes, the grader's as readily
as the submission's. The grader reads the limit here and keeps the submission's code below it.

Where the cgroup lies: /proc/self/cgroup names this process's cgroup in each hierarchy, relative to the
root of its cgroup namespace; /proc/self/mountinfo says which cgroup each mount shows at its mount point
(a container without its own cgroup namespace sees its own cgroup mounted at /sys/fs/cgroup, named by
the host's path). The limit that binds is the smallest on the way up to the mount's root.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

# cgroup v1 writes "no limit" as the largest page count it keeps, in bytes (9223372036854771712 with 4 KiB
# pages): any value this large is no limit
NO_LIMIT = 1 << 60


@dataclass(frozen=True)
class CgroupMemory:
    """A memory cgroup's limits and use, in bytes (None: no limit)."""

    limit: int | None  # memory (RAM) its processes may hold together, page cache included
    swap: int | None  # swap they may use besides (v1: memsw's limit less memory's); None: no limit or unknown
    usage: int  # what they hold now, page cache included
    folder: Path  # the cgroup's folder the numbers were read from

    @property
    def limit_mb(self) -> int | None:
        return None if self.limit is None else self.limit >> 20


def _number(path: Path) -> int | None:
    """A limit file's value; None for "max", a v1 value that means no limit, or a file that is not there."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return _big(int(text)) if text.isdigit() else None  # "max": no limit


def _smallest(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _mounts(mountinfo: str) -> list[tuple[str, Path, str, set[str]]]:
    """Each cgroup mount: (the cgroup it shows, where, "cgroup2" or "cgroup", its v1 controllers)."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        kind = after[0] if after else ""
        if kind in ("cgroup", "cgroup2"):
            options = set(after[2].split(",")) if len(after) > 2 else set()
            found.append((fields[3], Path(fields[4].replace("\\040", " ")), kind, options))
    return found


def _folder(mount_root: str, mount_point: Path, path: str) -> Path:
    """The folder of cgroup `path` under a mount showing cgroup `mount_root`; the mount point itself where
    the path lies outside what the mount shows (a container's view of the host's path)."""
    relative = os.path.relpath(path, mount_root)
    folder = mount_point if relative.startswith("..") else (mount_point / relative).resolve()
    return folder if folder.is_dir() and mount_point in (folder, *folder.parents) else mount_point


def _chain(folder: Path, mount_point: Path) -> list[Path]:
    """`folder` and each cgroup above it, up to the mount's root."""
    chain = [folder]
    while chain[-1] != mount_point and mount_point in chain[-1].parents:
        chain.append(chain[-1].parent)
    return chain


def _v2(folder: Path, mount_point: Path) -> CgroupMemory:
    chain = _chain(folder, mount_point)
    limit = _smallest([_number(f / "memory.max") for f in chain])
    swap = _smallest([_number(f / "memory.swap.max") for f in chain])
    return CgroupMemory(limit, swap, _number(folder / "memory.current") or 0, folder)


def _v1(folder: Path, mount_point: Path) -> CgroupMemory:
    chain = _chain(folder, mount_point)
    stat = _stat(folder / "memory.stat")  # the kernel's own minimum over every ancestor, those out of view too
    limit = _smallest(
        [*(_number(f / "memory.limit_in_bytes") for f in chain), _big(stat.get("hierarchical_memory_limit"))]
    )
    both = _smallest(
        [*(_number(f / "memory.memsw.limit_in_bytes") for f in chain), _big(stat.get("hierarchical_memsw_limit"))]
    )
    swap = None if both is None or limit is None else max(both - limit, 0)
    return CgroupMemory(limit, swap, _number(folder / "memory.usage_in_bytes") or 0, folder)


def _stat(path: Path) -> dict[str, int]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    pairs = (line.split() for line in lines)
    return {pair[0]: int(pair[1]) for pair in pairs if len(pair) == 2 and pair[1].isdigit()}


def _big(value: int | None) -> int | None:
    """A limit as read; None for none (v1's largest values)."""
    return None if value is None or value >= NO_LIMIT else value


def _cgroup_paths(proc_cgroup: str, controller: str) -> dict[str, str]:
    """`controller` (v1's hierarchy that has it) or "" (v2's) -> the cgroup's path, from a /proc/PID/cgroup's text."""
    paths = {}
    for line in proc_cgroup.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":
            paths[""] = path
        elif controller in controllers.split(","):
            paths[controller] = path
    return paths


def cgroup_memory(proc_cgroup: str, mountinfo: str) -> CgroupMemory | None:
    """The memory cgroup that `proc_cgroup` (a /proc/PID/cgroup's text) names, read through the mounts of
    `mountinfo` (a /proc/PID/mountinfo's text); a v1 memory hierarchy first, where there is one (a hybrid
    machine's v2 hierarchy then holds no memory controller); None where no memory cgroup is mounted."""
    paths = _cgroup_paths(proc_cgroup, "memory")
    mounts = _mounts(mountinfo)
    for root, point, kind, options in mounts:
        if kind == "cgroup" and "memory" in options and "memory" in paths:
            return _v1(_folder(root, point, paths["memory"]), point)
    for root, point, kind, _ in mounts:
        if kind == "cgroup2" and "" in paths:
            folder = _folder(root, point, paths[""])
            if (folder / "memory.max").exists() or (point / "memory.stat").exists():  # the controller is on
                return _v2(folder, point)
    return None


def own_memory() -> CgroupMemory | None:
    """This process's memory cgroup; None where there is none to read (not Linux, no cgroup mounted)."""
    try:
        return cgroup_memory(Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text())
    except OSError:
        return None


def cgroup_cores(proc_cgroup: str, mountinfo: str) -> float | None:
    """The cores the cpu cgroup that `proc_cgroup` names may use (its quota over its period: v2's `cpu.max`, v1's
    `cpu.cfs_quota_us` and `cpu.cfs_period_us`), the smallest on the way up; None where none is set or readable."""
    paths = _cgroup_paths(proc_cgroup, "cpu")
    found: list[float | None] = []
    for root, point, kind, options in _mounts(mountinfo):
        if kind == "cgroup" and "cpu" in options and "cpu" in paths:
            for folder in _chain(_folder(root, point, paths["cpu"]), point):
                quota, period = _number(folder / "cpu.cfs_quota_us"), _number(folder / "cpu.cfs_period_us")
                found.append(quota / period if quota and period else None)  # -1 (no quota) reads as None
            break
        if kind == "cgroup2" and "" in paths:
            for folder in _chain(_folder(root, point, paths[""]), point):
                with contextlib.suppress(OSError, ValueError):
                    quota, _, period = (folder / "cpu.max").read_text().partition(" ")
                    found.append(int(quota) / int(period) if quota.isdigit() and int(period) > 0 else None)
    return _smallest(found)


def usable_cores() -> int:
    """The cores this process may run on: those its CPU affinity allows, fewer where its cpu cgroup's quota gives
    less (a container's `--cpus`, Gradescope's half a CPU counts as one); at least one."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota = cgroup_cores(Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text())
    except OSError:
        quota = None
    return max(1, min(cores, math.ceil(quota)) if quota is not None else cores)


def oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has ended in this process's memory cgroup (v2's
    memory.events, v1's memory.oom_control, kernels since 4.13); None where that cannot be read."""
    memory = own_memory()
    for name in ("memory.events", "memory.oom_control") if memory is not None else ():
        kills = _stat(memory.folder / name).get("oom_kill")
        if kills is not None:
            return kills
    return None


def killed_first() -> None:
    """Where memory runs out all the same, the kernel's OOM killer ends this process before the grader's
    (oom_score_adj 1000, the most; raising it needs no privilege). For the processes that read or run a
    submission: the scan here, the job's child in zygote.py (which imports nothing of cs_basics)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text("1000")
