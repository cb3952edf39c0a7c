"""A job's view of the machine, in the mount namespace of its own that its child made (zygote.enter_namespaces):
private temporary folders and working folder on one bounded tmpfs, the course's repository hidden, the Python
environment reachable by the job's uid. Loaded by path beside zygote.py (never part of `cs_basics`); the
standard library only."""

import ctypes
import os
import types
from collections.abc import Callable
from pathlib import Path

libc = ctypes.CDLL(None, use_errno=True)
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
MNT_DETACH = 2


def check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str, target: str, fstype: str = "", flags: int = 0, data: str = "") -> None:
    args = [s.encode() if s else None for s in (source, target, fstype)]
    check(libc.mount(*args, ctypes.c_ulong(flags), data.encode() if data else None), f"mount {target}")


def umount(target: str) -> None:
    check(libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


def tmpfs(target: str, mode: str, size_mb: int | None = None, inodes: int | None = None) -> None:
    bound = f",size={size_mb}m,nr_inodes={inodes}" if size_mb else ""
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode}{bound}")


def bind(source: str, target: str) -> None:
    mount(source, target, flags=MS_BIND | MS_REC)


def replace_folder(target: str, keep: list[str], stash: str, fresh: str | None = None) -> None:
    """A fresh folder over `target` (an empty root-only tmpfs, or the folder `fresh` bound there), with
    each path of `keep` (inside it) bound back where it was."""
    inside = [k for k in keep if Path(k).is_relative_to(target) and Path(k) != Path(target)]
    held = []
    for i, path in enumerate(inside):
        spot = f"{stash}/{i}-{abs(hash((target, path)))}"
        os.mkdir(spot)
        bind(path, spot)
        held.append((spot, path))
    bind(fresh, target) if fresh else tmpfs(target, "755")
    for spot, path in held:
        os.makedirs(path, mode=0o755, exist_ok=True)
        bind(spot, path)
        umount(spot)
        os.rmdir(spot)


def make_scratch(job: dict, stash: str, policy: types.ModuleType) -> str:
    """The one tmpfs, of at most `tmp_mb`, that holds the job's temporary folders and its working folder."""
    scratch = f"{stash}/scratch"
    os.mkdir(scratch)
    tmpfs(scratch, "755", job["limits"]["tmp_mb"], policy.SCRATCH_INODES)
    for name in policy.SCRATCH_FOLDERS.values():
        os.mkdir(f"{scratch}/{name}")
        os.chmod(f"{scratch}/{name}", 0o1777)
    os.mkdir(f"{scratch}/work", 0o700)
    if job.get("uid") is not None:
        os.chown(f"{scratch}/work", job["uid"], job["uid"])
    return scratch


def build_view(job: dict, policy: types.ModuleType, blocked_ancestors: Callable[[list[str], int], list[str]]) -> None:
    """In the child's own mount namespace: private temporary folders and working folder, which hold at
    most `tmp_mb` together, the repository hidden, the Python environment reachable by the job's uid (the
    folders on the way that it may not enter, `blocked_ancestors`, replaced). Nothing of this reaches the
    rest of the machine. `policy`: sandbox/policy.py."""
    mount("", "/", flags=MS_REC | MS_PRIVATE)
    uid, keep, fresh = job.get("uid"), [*job["python"], job["dir"]], policy.SCRATCH_FOLDERS
    # the stash, mounted over first to hold what the other mounts keep, then covered by the job's own: a temporary
    # folder that holds nothing kept (/dev/shm; where the grader's own TMPDIR is in it, another)
    free = [f for f in reversed(fresh) if os.path.isdir(f) and not any(Path(k).is_relative_to(f) for k in keep)]
    if not free:
        raise OSError(f"every temporary folder (/tmp, /var/tmp, /dev/shm) holds the Python or the job's folder: {keep}")
    stash = free[0]
    tmpfs(stash, "700")
    scratch = make_scratch(job, stash, policy)
    for folder in job.get("hide", []):  # the course's repository: the child needs none of it
        if os.path.isdir(folder):
            replace_folder(folder, keep, stash)
    for folder in blocked_ancestors(keep, uid) if uid is not None else []:
        replace_folder(folder, keep, stash)
    for folder in [f for f in fresh if f != stash and os.path.isdir(f)]:
        replace_folder(folder, keep, stash, f"{scratch}/{fresh[folder]}")
    bind(f"{scratch}/work", f"{job['dir']}/work")
    bind(f"{scratch}/{fresh[stash]}", stash)  # over the stash, where only the scratch's mount point is left
