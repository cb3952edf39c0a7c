"""A Python that looks like Windows's wherever the harness could tell, on this Linux machine.

`windows_like_python(folder)` makes a throwaway virtual environment over this one whose site-packages
runs `install()` at start-up (a .pth line): every Python the run starts gets it, `-I` ones included
(the grader's scan, the child that runs a submission). `install()` then
- refuses the Unix-only modules (`resource`, `fcntl`, `termios`, `pwd`, `grp`, ...) with the error
  Windows gives, and `_posixsubprocess` after `subprocess` took its copy;
- removes what Windows's `os`, `signal`, `socket` and `select` lack (`os.fork`, uids, process groups,
  wait statuses, `O_NOFOLLOW`; SIGHUP; Unix sockets and passing descriptors; `poll`), makes
  `select.select` refuse what is not a socket and `os.chmod` refuse `follow_symlinks=False`, as there.

What it cannot change: `sys.platform` and `os.name` stay Linux's (the standard library and torch
branch on them as they load), so code that branches on them is tested in-process with
`sys.platform` patched (test_windows.py).
"""

from __future__ import annotations

import errno
import importlib.abc
import os
import select
import signal
import site
import socket
import stat
import sys
import venv
from pathlib import Path

REFUSED = frozenset({"resource", "fcntl", "termios", "pwd", "grp", "pty", "tty", "syslog", "posix_ipc"})
OS_MISSING = (
    "fork", "forkpty", "setsid", "getsid", "setpgid", "getpgid", "getpgrp", "killpg",
    "getuid", "geteuid", "getgid", "getegid", "setuid", "setgid", "seteuid", "setegid", "setgroups", "getgroups",
    "initgroups", "chown", "lchown", "fchown", "WIFEXITED", "WEXITSTATUS", "WIFSIGNALED", "WTERMSIG",
    "wait3", "wait4", "getloadavg", "mkfifo", "pipe2", "O_NOFOLLOW", "O_NONBLOCK", "sched_getaffinity",
)  # fmt: skip
SIGNALS_MISSING = ("SIGHUP", "SIGQUIT", "SIGALRM", "SIGUSR1", "SIGUSR2", "SIGCHLD", "SIGPIPE", "alarm", "setitimer")
SOCKET_MISSING = ("AF_UNIX", "send_fds", "recv_fds", "sendmsg", "recvmsg")
SELECT_MISSING = ("poll", "epoll")
MARK = "CS_BASICS_WINDOWS_LIKE"  # set in every process that runs install()


class RefuseUnixModules(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.split(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def select_sockets_only(rlist, wlist, xlist, timeout=None, _select=select.select):
    """Windows's select.select: sockets only (WinError 10038 for a pipe or a file)."""
    for item in [*rlist, *wlist, *xlist]:
        fd = item if isinstance(item, int) else item.fileno()
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise OSError(errno.ENOTSOCK, "An operation was attempted on something that is not a socket")
    return _select(rlist, wlist, xlist, timeout)


def chmod_following_links(path, mode, *, dir_fd=None, follow_symlinks=True, _chmod=os.chmod):
    """Windows's os.chmod before Python 3.13: follow_symlinks=False is not available."""
    if not follow_symlinks:
        raise NotImplementedError("chmod: follow_symlinks unavailable on this platform")
    return _chmod(path, mode, dir_fd=dir_fd)


def install() -> None:
    import selectors  # noqa: F401 (their choices made while poll and Unix sockets are there, as Windows's are its own)
    import subprocess  # noqa: F401

    for name in REFUSED:
        sys.modules.pop(name, None)
    sys.meta_path.insert(0, RefuseUnixModules())
    sys.modules["_posixsubprocess"] = None  # subprocess keeps its copy; `import _posixsubprocess` fails
    for module, names in ((os, OS_MISSING), (signal, SIGNALS_MISSING), (socket, SOCKET_MISSING)):
        for name in names:
            module.__dict__.pop(name, None)
    for name in SELECT_MISSING:
        select.__dict__.pop(name, None)
    select.select = select_sockets_only
    os.chmod = chmod_following_links
    os.environ[MARK] = "1"


def windows_like_python(folder: Path) -> Path:
    """A virtual environment in `folder` over this one, every process of which runs `install()`; its python."""
    venv.create(folder, with_pip=False, symlinks=os.name != "nt")
    packages = Path(folder / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages")
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (packages / "_windows_like.py").write_text(Path(__file__).read_text())
    lines = [f"import site; site.addsitedir({p!r})" for p in ours]
    (packages / "zz_windows_like.pth").write_text("\n".join([*lines, "import _windows_like; _windows_like.install()"]))
    return folder / "bin" / "python"
