"""Which sandbox grades (bubblewrap where it runs, else the fallback), and the view of the filesystem
bubblewrap gives the grading server."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

from cs_basics.harness.grading.litter import LITTER
from cs_basics.harness.portable import fork_server_runs

SANDBOX_ENV = "CS_BASICS_SANDBOX"  # "bubblewrap", "fallback", or unset: bubblewrap where it runs


@cache
def bubblewrap_runs() -> bool:
    """Whether bubblewrap is installed and may make namespaces here (a container may forbid it), and the
    fork server it holds can run (Linux)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None or not fork_server_runs():
        return False
    probe = [bwrap, *bubblewrap_view([]), "--unshare-pid", "--unshare-net", "true"]
    if os.geteuid() != 0:
        probe[1:1] = ["--unshare-user"]
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    return False


@cache
def bubblewrap_sizes_tmpfs() -> bool:
    """Whether this bubblewrap has `--size` for `--tmpfs` (0.7.0 and later; Ubuntu 22.04 ships 0.6.1)."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        shown = subprocess.run([shutil.which("bwrap") or "bwrap", "--help"], capture_output=True, timeout=30)
        return b"--size" in shown.stdout + shown.stderr
    return False


def choose_sandbox(requested: str | None = None) -> str:
    """ "bubblewrap" where it runs, else "fallback"; $CS_BASICS_SANDBOX or `requested` may ask for either."""
    name = requested or os.environ.get(SANDBOX_ENV) or ("bubblewrap" if bubblewrap_runs() else "fallback")
    if name not in ("bubblewrap", "fallback"):
        raise ValueError(f"unknown sandbox {name!r} (from --sandbox or ${SANDBOX_ENV}): bubblewrap or fallback")
    if name == "bubblewrap" and not fork_server_runs():
        raise ValueError(
            "bubblewrap was asked for, but it needs Linux; here only the fallback grades "
            f"(leave out --sandbox and ${SANDBOX_ENV})"
        )
    if name == "bubblewrap" and not bubblewrap_runs():
        raise ValueError("bubblewrap was asked for, but `bwrap` is not installed or may not make namespaces here")
    return name


def python_paths() -> list[str]:
    """The Python environment: the interpreter's prefix and the virtual environment's."""
    return sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)})


def bubblewrap_view(writable: list[str], tmp_mb: int = 1) -> list[str]:
    """The filesystem the server sees: the system's programs and libraries, the Python environment
    (read-only), fresh /proc, /dev and temporary folders (each of at most `tmp_mb`: the server writes
    nothing there, a job with namespaces has its own), and `writable`; not /root, /home or /work."""
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for folder in LITTER:
        args += ["--size", str(tmp_mb << 20), "--tmpfs", folder] if bubblewrap_sizes_tmpfs() else ["--tmpfs", folder]
    for path in python_paths():
        if not path.startswith("/usr/"):
            args += ["--ro-bind", path, path]
    for device in sorted(Path("/dev").glob("nvidia*")):  # a GPU, where there is one
        args += ["--dev-bind", str(device), str(device)]
    if any(Path("/dev").glob("nvidia*")):
        args += ["--ro-bind", "/sys", "/sys"]
    for path in writable:
        args += ["--bind", path, path]
    return args
