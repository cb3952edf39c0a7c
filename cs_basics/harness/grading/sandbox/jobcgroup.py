"""A memory cgroup of a worker's own, which each of its jobs joins: every page the job's processes hold counted
against the job's limit, whatever the mapping (shared anonymous memory, memfd, tmpfs files), which RLIMIT_DATA
does not count: a submission held 5.6 GiB under a 4 GiB limit, in either sandbox, before it.

Made below the grader's own memory cgroup (cgroup.py finds it), where the grader may write there: as root on a
machine or in a container whose cgroup filesystem is writable (cgroup v1; cgroup v2 where the grader's cgroup
already delegates the memory controller to its children: the grader moves no process, its own or another's,
to make that so). Where none can be made, the job's child refuses what RLIMIT_DATA does not count instead
(confine.py) and the grade's notes say why. The grader opens its `cgroup.procs` and hands it to the grading
server, whose children join it before any student code runs (zygote.run_child); the worker removes it at its end.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from cs_basics.harness.cgroup import own_memory
from cs_basics.harness.grading.sandbox.folderlock import lock, remove_unheld, same_file
from cs_basics.harness.grading.sandbox.limits import RAN_OUT, Limits
from cs_basics.harness.grading.sandbox.policy import SERVER_MB

PREFIX = "cs-basics-jobs-"  # + the grader's pid and a random part: unique across PID namespaces too


def job_memory_mb(limits: Limits) -> int:
    """The job cgroup's limit: the code's memory, its temporary folders (a tmpfs: memory too) and what a job's
    child copies of the grading server's pages as it writes to them (the server's own are counted in its cgroup)."""
    return limits.memory_mb + limits.tmp_mb + SERVER_MB


@dataclass
class JobCgroup:
    folder: Path
    version: int  # 1 or 2
    limit_mb: int
    held: int  # the folder, opened and locked (flock) for as long as the grader uses it: what says it is in use

    def procs(self) -> int:
        """Its cgroup.procs, opened for writing (close-on-exec): what a job's child writes "0" to, to join."""
        return os.open(self.folder / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    def oom_kills(self) -> tuple[int, int] | None:
        """(processes the kernel's OOM killer ended in it, times its own limit was reached): v1's oom_control and
        failcnt, v2's memory.events.local (kills and "oom"); None where they cannot be read. An OOM kill in a
        cgroup above (the container's) is counted in the victim's cgroup too, but not as its own limit."""
        v1 = self.version == 1
        events = self._numbers("memory.oom_control" if v1 else "memory.events.local")
        hits = self._numbers("memory.failcnt").get("") if v1 else events.get("oom")
        kills = events.get("oom_kill")
        return None if kills is None or hits is None else (kills, hits)

    def _numbers(self, name: str) -> dict[str, int]:
        """A cgroup file's "key value" lines (a file of one number: under the key "")."""
        found = {}
        with contextlib.suppress(OSError):
            for line in (self.folder / name).read_text().splitlines():
                key, _, value = line.rpartition(" ")
                if value.isdigit():
                    found[key] = int(value)
        return found

    def killed(self, before: tuple[int, int] | None) -> str:
        """What to add to the sentence of a job that died during a case, where the OOM killer ended a process of
        this cgroup since `before` (oom_kills() as the job started): at its own limit, or the machine's."""
        now = self.oom_kills()
        if before is None or now is None or now[0] <= before[0]:
            return ""
        if now[1] <= before[1]:  # its limit was not reached: the memory above it ran out
            return RAN_OUT
        return (
            f": your code's processes held more than {self.limit_mb} MiB of memory (shared memory and temporary "
            "files included), their limit, and the kernel's OOM killer ended them"
        )

    def remove(self) -> None:
        """Gone, once no process is left in it (the last may take a moment to leave); its lock released. Again
        is nothing (a worker may be closed twice)."""
        try:
            for _ in range(50):
                try:
                    self.folder.rmdir()
                    return
                except FileNotFoundError:
                    return
                except OSError:
                    time.sleep(0.02)
        finally:
            if self.held >= 0:
                os.close(self.held)
                self.held = -1


def make_job_cgroup(limit_mb: int) -> JobCgroup | str:
    """A fresh job cgroup of `limit_mb` (memory, and no swap), or the sentence that says why none can be made here."""
    memory = own_memory()
    if memory is None:
        return "no memory cgroup is mounted here"
    parent = memory.folder
    version = 1 if (parent / "memory.limit_in_bytes").exists() else 2
    remove_stale(parent)
    for _ in range(3):  # a grader that removes stale folders may take this one between its mkdir and its lock
        folder = parent / f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            folder.mkdir()
        except OSError as err:
            return f"the grader may not make a cgroup in {parent} ({os.strerror(err.errno or errno.EACCES)})"
        try:
            held = lock(folder)
        except FileNotFoundError:
            continue
        except OSError as err:  # no lock to be had here: no cgroup either, as none could tell it is in use
            with contextlib.suppress(OSError):
                folder.rmdir()
            return f"the grader could not lock a cgroup it made in {parent} ({os.strerror(err.errno or 0)})"
        if held is not None and same_file(held, folder):
            break
        if held is not None:
            os.close(held)
    else:
        return f"the cgroups the grader made in {parent} were removed at once by another process"
    made = JobCgroup(folder, version, limit_mb, held)
    try:
        settings(made)
    except OSError as err:
        made.remove()
        why = os.strerror(err.errno) if err.errno else str(err)
        return f"the grader could not limit the memory of a cgroup it made in {parent} ({why})"
    return made


def settings(made: JobCgroup) -> None:
    """Its limit, with no swap beside it; raises OSError where it cannot be set."""
    folder, limit = made.folder, str(made.limit_mb << 20)
    if made.version == 1:
        (folder / "memory.limit_in_bytes").write_text(limit)
        if (folder / "memory.memsw.limit_in_bytes").exists():  # memory and swap together: no swap besides but a
            # page or two, so that memory's own limit is the one reached first (the kernel counts its failcnt;
            # memsw's it keeps at 0 since Linux 6.12)
            (folder / "memory.memsw.limit_in_bytes").write_text(str((made.limit_mb + 1) << 20))
        return
    if not (folder / "memory.max").exists():  # enabling it is a change to the grader's own cgroup: not made here
        raise OSError(0, "the memory controller is not enabled for the children of the grader's cgroup")
    (folder / "memory.max").write_text(limit)
    for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):  # the job's processes end together
        if (folder / name).exists():
            (folder / name).write_text(value)


def remove_stale(parent: Path) -> None:
    """Job cgroups a grader that died left: no process holds their lock, and they are empty (their jobs'
    processes died with it, or were killed by uid; rmdir refuses a cgroup with a process in it)."""
    with contextlib.suppress(OSError):
        remove_unheld(list(parent.glob(f"{PREFIX}*")), Path.rmdir)
