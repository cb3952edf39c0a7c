"""What a job without namespaces of its own leaves behind: files in the shared temporary folders, measured while
it runs (`Hoard`) and removed after it; System V IPC objects of its uid, removed after it; and its processes'
zombies, which the grader inherits as their subreaper and reaps."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

LITTER = ("/tmp", "/var/tmp", "/dev/shm")  # where a job without namespaces may leave files


def owned_by(uid: int, folders: tuple[str, ...] = LITTER) -> Iterator[tuple[str, os.stat_result]]:
    """What `uid` owns in `folders` (the shared temporary folders): a stack, not os.walk, whose recursion a
    deep tree breaks."""
    stack = list(folders)
    while stack:
        folder = stack.pop()
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in list(entries):
                with contextlib.suppress(OSError):
                    found = entry.stat(follow_symlinks=False)
                    if found.st_uid == uid:
                        yield entry.path, found
                    if stat.S_ISDIR(found.st_mode):
                        stack.append(entry.path)


def remove_tree(path: Path) -> None:
    """shutil.rmtree, finished by `rm -rf` where a job left a folder deeper than its recursion reaches."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], capture_output=True)


def remove_litter(uid: int) -> None:
    """Files a job without namespaces of its own left in the shared temporary folders."""
    folders = list(LITTER)
    while folders:  # a stack, not os.walk, whose recursion a deep tree breaks; the job's own folders go whole
        folder = folders.pop()
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in list(entries):
                with contextlib.suppress(OSError):
                    is_folder = entry.is_dir(follow_symlinks=False)
                    if entry.stat(follow_symlinks=False).st_uid == uid:
                        remove_tree(Path(entry.path)) if is_folder else os.unlink(entry.path)
                    elif is_folder:
                        folders.append(entry.path)


class Hoard:
    """Where a job has no namespaces (so no bounded temporary folders of its own): what its uid holds in the
    shared ones, measured by walking them, at most every second and a fifth of the time. No kernel limit by
    uid exists for a tmpfs mounted without quotas, so this is after the fact: a fast writer gets past the
    limit before the walk sees it, and a file deleted but held open is not seen."""

    def __init__(self, uid: int, limit_mb: int, folders: tuple[str, ...] = LITTER):
        self.uid, self.limit, self.folders = uid, limit_mb << 20, folders
        self.due = 0.0

    def over(self) -> bool:
        start = time.monotonic()
        if start < self.due:
            return False
        held = sum(found.st_blocks * 512 for _, found in owned_by(self.uid, self.folders))
        self.due = start + max(1.0, 5 * (time.monotonic() - start))
        return held > self.limit


# /proc/sysvipc's tables: (file, the column of its id, the call that removes one: shmctl, msgctl, semctl)
SYSV_TABLES = (("shm", "shmid", "shmctl"), ("msg", "msqid", "msgctl"), ("sem", "semid", "semctl"))
IPC_RMID = 0


def ipc_objects(uid: int) -> list[tuple[str, int]]:
    """The System V IPC objects (its table, its id) that `uid` owns or made, in this IPC namespace."""
    found = []
    for table, id_column, _ in SYSV_TABLES:
        with contextlib.suppress(OSError, ValueError, IndexError):
            header, *rows = Path(f"/proc/sysvipc/{table}").read_text().splitlines()
            columns = header.split()
            for row in rows:
                fields = dict(zip(columns, row.split(), strict=False))
                if str(uid) in (fields.get("uid"), fields.get("cuid")):
                    found.append((table, int(fields[id_column])))
    return found


def remove_ipc(uid: int) -> list[tuple[str, int]]:
    """Every System V IPC object of `uid` removed (a job's process refuses to make them: confine.py; without an IPC
    namespace of the job's own, one made all the same would outlive it, for the next grading to read); what is
    left (a segment still attached is removed once its last process ends)."""
    libc = ctypes.CDLL(None, use_errno=True)
    remove = {table: getattr(libc, call) for table, _, call in SYSV_TABLES}
    for table, ipc_id in ipc_objects(uid):
        if table == "sem":
            remove[table](ipc_id, 0, IPC_RMID)
        else:
            remove[table](ipc_id, IPC_RMID, None)
    return ipc_objects(uid)


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """This process adopts the orphans of what it starts (the job processes left when a grading server ends), in
    place of the container's init, which may never reap them: `reap_orphans` does. Linux only."""
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    return False


def own_children() -> list[str] | None:
    """This process's children, from each of its threads' /proc/self/task/TID/children (the kernel gives an orphan
    to one thread of its subreaper); None where the kernel keeps no such list (CONFIG_PROC_CHILDREN)."""
    found: list[str] = []
    try:
        for task in os.scandir("/proc/self/task"):
            with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
                found += Path(task.path, "children").read_text().split()
    except OSError:
        return None
    return found


def reap_orphans(uid: int) -> int:
    """Reap this process's children that have ended and ran as `uid`: a job's orphans it adopted (what it starts as
    that uid itself, `kill_uid`'s killers, the worker's thread has waited for before it calls this); how many. Only
    this process's children are looked at, where the kernel lists them: not every process of the machine."""
    me, reaped = str(os.getpid()), 0
    children = own_children()
    entries = [Path("/proc", pid) for pid in children] if children is not None else list(Path("/proc").iterdir())
    for entry in entries:
        with contextlib.suppress(OSError, IndexError, ValueError, ChildProcessError):
            state, parent = entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()[:2]
            if parent == me and state == "Z" and entry.stat().st_uid == uid:
                reaped += os.waitpid(int(entry.name), os.WNOHANG)[0] != 0
    return reaped


def reap_children(seconds: float = 3.0) -> int:
    """Reap every child this process has left, at its end (its own and the orphans it adopted as a subreaper),
    waiting up to `seconds` for those still ending; how many. A process that exits with zombie children hands
    them to the next subreaper up, a container's init that may never reap them. Not where `os.waitpid` cannot
    wait for any child (Windows)."""
    if not hasattr(os, "WNOHANG"):
        return 0
    reaped, deadline = 0, time.monotonic() + seconds
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no child left
            return reaped
        if pid:
            reaped += 1
        elif time.monotonic() >= deadline:
            return reaped
        else:
            time.sleep(0.02)
