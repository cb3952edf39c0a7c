"""A folder a grader holds for as long as it lives: opened and locked with flock, a lock the kernel releases when
the holder dies, in whatever PID namespace or container it ran (a pid in the folder's name could only be looked
up in the reader's own namespace, and another's live grader looked dead). What a grader that died left (killed
with SIGKILL, or by the OOM killer) is found by its free lock and removed by the next grader that starts: job
cgroups (jobcgroup.py) and work folders, which hold the inputs of hidden cases and students' outputs."""

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
    """The work folders in the temporary folder that this user made (a folder of root's: no other user could make
    it, nor replace it in the sticky /tmp); locked or not."""
    found = []
    with contextlib.suppress(OSError), os.scandir(tempfile.gettempdir()) as entries:
        for entry in entries:
            if entry.name.startswith(WORK_PREFIX):
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.geteuid():
                        found.append(Path(entry.path))
    return found


def held_work_folder(remove: Callable[[Path], None]) -> tuple[Path, int | None]:
    """A fresh work folder and its lock, once the folders graders that died left are removed. Never fails for the
    lock's sake: where none can be held (Windows; a file system that refuses flock, as NFS may) or other graders
    keep sweeping the fresh folder before it is locked, an unlocked folder that no grader removes."""
    if unix_module("fcntl") is None:
        return Path(tempfile.mkdtemp(prefix=UNLOCKED_PREFIX)), None
    remove_unheld(left_work_folders(), remove)
    for _ in range(20):  # a grader removing dead folders may take this one between its making and its lock
        folder = Path(tempfile.mkdtemp(prefix=WORK_PREFIX))
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
    return Path(tempfile.mkdtemp(prefix=UNLOCKED_PREFIX)), None
