"""The files of a job without namespaces of its own: which folders on the way to the Python environment its uid may
not enter, which import paths it may see, and the environment reached through descriptors opened before the uid
changes (`reach_python`, under Landlock: landlock.py).

Loaded by path by the grading server (zygote.py), beside it, never as part of `cs_basics`; it imports nothing of
ours.
"""

import fcntl
import os
import resource
import sys
import types
from pathlib import Path


def blocked_ancestors(paths: list[str], uid: int) -> list[str]:
    """The highest folders on the way to `paths` that `uid` may not enter (a Python under /root)."""
    found = []
    for path in paths:
        for folder in [*reversed(Path(path).parents), Path(path)]:
            st = folder.stat()
            # the job's gid is its uid (zygote.become): its own folder is open to it by its group (Worker.hand_over)
            owner, group = st.st_uid == uid and st.st_mode & 0o100, st.st_gid == uid and st.st_mode & 0o010
            if not (st.st_mode & 0o001 or owner or group):
                found.append(str(folder))
                break
    return sorted({f for f in found if not any(f != g and Path(f).is_relative_to(g) for g in found)})


def visible(paths: list[str], job: dict) -> list[str]:
    """`paths` but those that are, or hold, a folder the job must not see (the course's repository)."""
    hidden = [Path(h) for h in job.get("hide", [])]
    return [p for p in paths if not any(h.is_relative_to(p) for h in hidden)]


REACH_FD = 900  # the lowest number of the descriptors that reach the Python environment (under the channel's 960)


def reach_python(job: dict, import_paths: list[str]) -> list[str]:
    """Without namespaces, as root, before the uid changes: each folder of the Python environment (and import
    path) on the way to which a folder is closed to the job's uid (a Python, or a checkout's .venv, under /root,
    mode 700) is opened now, and from here on reached through /proc/self/fd/N: the kernel follows that link to
    the folder itself, checking no folder above it (descriptors survive the uid change). sys.path, the sys
    prefixes, every loaded package's __path__ and module's __file__ name it so; what the job imports from then on
    loads through it. Only under Landlock (`landlock_rules`: its files confined to these folders, its own and the
    system's), since ".." from such a folder leads to the folders between it and the closed one. Returns the
    import paths as the job sees them."""
    uid, roots = job["uid"], {}
    wanted = sorted(set(visible([*job["python"], *import_paths], job)), key=len)  # the outermost first
    for path in wanted:
        if any(path == r or path.startswith(r + os.sep) for r in roots) or not blocked_ancestors([path], uid):
            continue
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        lowest = REACH_FD if soft == resource.RLIM_INFINITY else max(min(REACH_FD, soft - 128), 3)
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, lowest)
        os.close(fd)
        roots[path] = f"/proc/self/fd/{moved}"
    if roots:
        name_reached(roots)
    return [reached(p, roots) for p in import_paths]


def reached(path: str, roots: dict[str, str]) -> str:
    """`path` as the job reaches it: through the descriptor of the folder of `roots` that holds it."""
    for root, through in roots.items():
        if path == root or path.startswith(root + os.sep):
            return through + path[len(root) :]
    return path


def name_reached(roots: dict[str, str]) -> None:
    """sys.path, the prefixes, and every loaded module's __path__, __file__ and spec, through `roots`."""
    sys.path[:] = [reached(p, roots) for p in sys.path]
    sys.path_importer_cache.clear()
    for name in ("prefix", "exec_prefix", "base_prefix", "base_exec_prefix"):
        setattr(sys, name, reached(getattr(sys, name), roots))
    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", None) if isinstance(module, types.ModuleType) else None
        if not names:
            continue
        spec = names.get("__spec__")
        found = (names.get("__path__"), getattr(spec, "submodule_search_locations", None))
        for paths in {id(p): getattr(p, "_path", p) for p in found}.values():  # a namespace package's holds a list
            if isinstance(paths, list):
                paths[:] = [reached(p, roots) if isinstance(p, str) else p for p in paths]
        if isinstance(names.get("__file__"), str):
            names["__file__"] = reached(names["__file__"], roots)
        if isinstance(getattr(spec, "origin", None), str) and getattr(spec, "has_location", False):
            spec.origin = reached(spec.origin, roots)
