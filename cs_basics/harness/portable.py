"""What this machine offers the grader's defences, and what each one skips where it cannot run.

The students' side (`uv run pytest`, `uv run cs-basics grade`) runs on Linux, macOS and Windows.
What only Linux (or Unix) gives (resource limits, seccomp, namespaces, a uid per job, /proc, fork)
is imported where it is used and asked for here, by what the machine has rather than by its name,
and each defence left out says so in one sentence (`skipped`).
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
from types import ModuleType


def unix_module(name: str) -> ModuleType | None:
    """`resource`, `fcntl`, ...: the module, or None where this Python has none (Windows)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def skipped(what: str, needs: str, instead: str = "it runs without it") -> str:
    """The sentence every defence left out says: what, what it needs, what happens instead."""
    return f"{what} needs {needs}; on this machine {instead}"


def is_linux() -> bool:
    return sys.platform.startswith("linux")


def fork_server_runs() -> bool:
    """Whether the grader's fork server (zygote.py) can run here: it forks each job's child, and needs
    Linux's prctl, /proc and SOCK_SEQPACKET sockets. Elsewhere a fresh Python runs each attempt."""
    return is_linux() and hasattr(os, "fork")


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def scan_notes() -> list[str]:
    """What the from-scratch rule's scan runs without on this machine (pytest's header, the grader's notes)."""
    if unix_module("resource") is None:
        return [skipped("the scan's memory limit", "Unix")]
    return []


def open_unfollowed(path: str | os.PathLike) -> int:
    """A file descriptor to read `path`, never through a link and never blocking on a FIFO: O_NOFOLLOW and
    O_NONBLOCK where the system has them (Unix); on Windows, which has neither, a link is refused by
    looking first, and the file is opened in binary mode."""
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    if not nofollow and os.path.islink(path):
        raise OSError(errno.ELOOP, "it is a link, which is not followed", str(path))
    return os.open(path, os.O_RDONLY | nofollow | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
