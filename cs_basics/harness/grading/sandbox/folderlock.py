"""A folder a grader holds for as long as it lives: opened and locked with flock, a lock the kernel releases when
the holder dies, in whatever PID namespace or container it ran (a pid in the folder's name could only be looked
up in the reader's own namespace, and another's live grader looked dead). What a grader that died left (killed
with SIGKILL, or by the OOM killer) is found by its free lock and removed by the next grader that starts: job
cgroups (jobcgroup.py) and work folders, which hold the inputs of hidden cases and students' outputs.

Work folders go to the temporary folder the staff named ($TMPDIR, $TEMP, $TMP), else to /dev/shm where it is a
memory file system with room (`work_parent`), else to the system's temporary folder: each phase of each job makes
and removes about 70 files and folders there, which on a disk cost an inode's allocation each (on ext4 without a
journal, a walk past every inode deleted lately: 1,200 of them took 638 ms in /tmp here, 9.4 ms in /dev/shm)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from cs_basics.harness.portable import unix_module

# a worker's work folder in the temporary folder (+ mkdtemp's random part): locked, so removed once its grader died
WORK_PREFIX = "cs-basics-work-"
# where no lock can be held (Windows), and before locks (graders of earlier releases may run beside this one):
# another name, which no grader removes, since nothing tells whether its grader still lives
UNLOCKED_PREFIX = "cs-basics-grade-"
MEMORY_FOLDER = "/dev/shm"  # where work folders go unless the staff named a temporary folder (work_parent)
# what it must have free: a container's default is 64 MiB (Docker, Kubernetes), which a few large submissions fill
MEMORY_FOLDER_FREE_MB = 1024
NAMED_TEMPORARY = ("TMPDIR", "TEMP", "TMP")  # as tempfile reads them


def work_parent(memory: bool = True) -> str:
    """Where a grader's work folders go: the temporary folder the staff named, else /dev/shm where `memory` allows it
    and it is a memory file system (tmpfs) this user may write with MEMORY_FOLDER_FREE_MB free, else the system's
    temporary folder. A worker allows it only where its jobs' memory cgroup counts what they write there (a tmpfs
    file is memory, and nothing else bounds how much a job's outputs hold: jobcgroup.py)."""
    if not memory or any(os.environ.get(name) for name in NAMED_TEMPORARY) or not memory_folder_fits():
        return tempfile.gettempdir()
    return MEMORY_FOLDER


def memory_folder_fits(folder: str = MEMORY_FOLDER) -> bool:
    """Whether `folder` is a mount point of a tmpfs that this user may write, with MEMORY_FOLDER_FREE_MB free."""
    try:
        mounted = [line.split() for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        here = os.statvfs(folder)
    except OSError:  # not Linux, no such folder
        return False
    # mountinfo: id, parent, dev, root, mount point, options, optional fields, "-", type, source, options
    types = [fields[fields.index("-") + 1] for fields in mounted if "-" in fields and fields[4] == folder]
    free_mb = here.f_bavail * here.f_frsize >> 20
    return (
        bool(types)
        and types[-1] == "tmpfs"
        and os.access(folder, os.W_OK | os.X_OK)
        and free_mb >= MEMORY_FOLDER_FREE_MB
    )


def lock(folder: Path) -> int | None:
    """The folder opened (close-on-exec) and locked with flock, or None where another process holds its lock (any
    other failure raises OSError)."""
    import fcntl  # here: Windows has none (held_work_folder locks nothing there)

    held = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(held)
        return None
    except OSError:
        os.close(held)
        raise
    return held


def same_file(held: int, folder: Path) -> bool:
    """Whether `folder` is still the one `held` is open on (not removed, nor made again, since)."""
    try:
        return os.stat(folder).st_ino == os.fstat(held).st_ino
    except OSError:
        return False


def remove_unheld(folders: list[Path], remove: Callable[[Path], None]) -> None:
    """`remove` each folder no process holds the lock of, while holding it (so that none takes it meanwhile)."""
    for folder in folders:
        with contextlib.suppress(OSError):
            held = lock(folder)
            if held is not None:
                try:
                    remove(folder)
                finally:
                    os.close(held)


def left_work_folders() -> list[Path]:
    """The work folders that this user made (a folder of root's: no other user could make it, nor replace it in the
    sticky /tmp), in the temporary folder and in /dev/shm (where a grader puts them depends on its environment and
    the room there: work_parent); locked or not."""
    found = []
    for parent in dict.fromkeys([tempfile.gettempdir(), MEMORY_FOLDER]):
        with contextlib.suppress(OSError), os.scandir(parent) as entries:
            for entry in entries:
                if entry.name.startswith(WORK_PREFIX):
                    with contextlib.suppress(OSError):
                        owned = entry.stat(follow_symlinks=False).st_uid == os.geteuid()
                        if entry.is_dir(follow_symlinks=False) and owned:
                            found.append(Path(entry.path))
    return found


def held_work_folder(remove: Callable[[Path], None], memory: bool = True) -> tuple[Path, int | None]:
    """A fresh work folder and its lock, once the folders graders that died left are removed. Never fails for the
    lock's sake: where none can be held (Windows; a file system that refuses flock, as NFS may) or other graders
    keep sweeping the fresh folder before it is locked, an unlocked folder that no grader removes."""
    if unix_module("fcntl") is None:
        return Path(tempfile.mkdtemp(prefix=UNLOCKED_PREFIX)), None
    remove_unheld(left_work_folders(), remove)
    parent = work_parent(memory)
    for _ in range(20):  # a grader removing dead folders may take this one between its making and its lock
        folder = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=parent))
        try:
            held = lock(folder)
        except FileNotFoundError:
            continue
        except OSError:  # no lock to be had on this file system: no sweep could tell it is in use either
            with contextlib.suppress(OSError):
                folder.rmdir()
            break
        if held is not None and same_file(held, folder):
            return folder, held
        if held is not None:
            os.close(held)
    return Path(tempfile.mkdtemp(prefix=UNLOCKED_PREFIX)), None  # never removed: not in memory
