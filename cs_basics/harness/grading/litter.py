"""What a job without namespaces of its own leaves in the shared temporary folders: measured while it runs
(`Hoard`), removed after it."""

from __future__ import annotations

import contextlib
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
