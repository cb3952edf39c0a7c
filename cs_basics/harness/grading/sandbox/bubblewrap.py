"""Which sandbox grades (bubblewrap where it runs, else the fallback), and the view of the filesystem
bubblewrap gives the grading server."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cs_basics.harness.grading.sandbox.leases import job_uid_range
from cs_basics.harness.grading.sandbox.litter import LITTER
from cs_basics.harness.grading.sandbox.policy import SERVER_READ_ONLY, SERVER_SYSTEM_TOPS
from cs_basics.harness.portable import fork_server_runs

SANDBOX_ENV = "CS_BASICS_SANDBOX"  # "bubblewrap", "fallback", or unset: bubblewrap where it runs


@dataclass(frozen=True)
class Bubblewrap:
    """How bubblewrap runs here, found by trying it as the grader runs the grading server (true where it runs):
    - as root, with namespaces made by root itself (a machine, a privileged container);
    - as root, in a user namespace of the grader's own where root may not make the others but may make that one
      (a rootful podman container: no CAP_SYS_ADMIN): root and the jobs' uids are themselves in it (`userns`);
    - as another user, in a user namespace of its own (`--unshare-user`; the jobs then have no uid of their own).
    `own_proc`: a /proc of its own, which a user namespace may not mount where its container masks parts of its
    /proc (podman's, Docker's): the container's /proc is bound instead. `why`: why it does not run, where not."""

    runs: bool
    why: str = ""
    userns: bool = False
    own_proc: bool = True

    def __bool__(self) -> bool:
        return self.runs


@cache
def bubblewrap_runs() -> Bubblewrap:
    """How bubblewrap runs here (see Bubblewrap), or why it does not: each way tried, strongest first, with the
    options the grading server gets (Server.bubblewrap), running `true`."""
    bwrap = shutil.which("bwrap")
    if not fork_server_runs():
        return Bubblewrap(False, "it needs Linux")
    if bwrap is None:
        return Bubblewrap(False, "`bwrap` is not installed (Debian, Ubuntu: apt-get install bubblewrap)")
    tried = []
    for way in ways_to_try():
        for own_proc in (True, False):
            found = Bubblewrap(True, userns=way == "userns", own_proc=own_proc)
            try:
                with bubblewrap_command(found, ["true"], view=bubblewrap_view([], own_proc=own_proc)) as command:
                    done = subprocess.run(command.args, capture_output=True, timeout=30, pass_fds=command.fds)
            except (OSError, subprocess.TimeoutExpired) as err:
                tried.append(f"{WAYS[way]}: {err}")
                break
            if done.returncode == 0:
                return found
            said = done.stderr.decode(errors="replace").strip().splitlines()
            where = WAYS[way] if own_proc else f"{WAYS[way]} with the container's /proc"
            tried.append(f"{where}: {said[-1] if said else f'status {done.returncode}'}")
    return Bubblewrap(False, "`bwrap` cannot run here (" + "; ".join(tried) + ")")


WAYS = {"root": "as root", "userns": "in a user namespace of root and the jobs' uids", "user": "as this user"}


def ways_to_try() -> list[str]:
    """As root: root's own namespaces, then a user namespace of the grader's; as another user, its own."""
    return ["root", "userns"] if os.geteuid() == 0 else ["user"]


@dataclass
class BubblewrapCommand:
    args: list[str]
    fds: tuple[int, ...] = ()


@contextlib.contextmanager
def bubblewrap_command(how: Bubblewrap, command: list[str], view: list[str]) -> Iterator[BubblewrapCommand]:
    """bwrap's command line that runs `command` in `view` with new PID, network, IPC and UTS namespaces, the way
    `how` says; the descriptors to pass it (a user namespace's), closed after."""
    sandbox = [shutil.which("bwrap") or "bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net"]
    sandbox += ["--unshare-ipc", "--unshare-uts", *view]
    fds: tuple[int, ...] = ()
    if how.userns:  # root, and the jobs' uids, themselves: the server may make the jobs' namespaces and uids
        fds = (user_namespace(job_uid_range()),)
        sandbox += ["--userns", str(fds[0]), "--uid", "0", "--gid", "0", "--cap-add", "ALL"]
    elif os.geteuid() != 0:  # an ordinary user: a user namespace, in which the server may make more
        sandbox += ["--unshare-user", "--uid", "0", "--gid", "0", "--cap-add", "ALL"]
    try:
        yield BubblewrapCommand([*sandbox, "--", *command], fds)
    finally:
        for fd in fds:
            os.close(fd)


CLONE_NEWUSER = 0x10000000
PR_SET_PDEATHSIG = 1


def user_namespace(uids: range) -> int:
    """A new user namespace in which root and each of `uids` are themselves (its maps written by root, as only a
    process with CAP_SETUID outside it may write more than one line); a descriptor of it. Made by a fork of this
    process that enters it and ends once the maps are written: the descriptor keeps it."""
    libc = ctypes.CDLL(None, use_errno=True)
    said, told = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # only system calls here: the grader's threads are gone in the fork
        try:
            # the grader killed before it kills this process: this one ends too, and with it what it inherited
            # (the worker's locks: held by a process left in pause(), its folder would never be swept)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:
                os._exit(0)
            os.close(said)
            failed = 0 if libc.unshare(CLONE_NEWUSER) == 0 else ctypes.get_errno() or 1
            os.write(told, bytes([min(failed, 255)]))
            signal.pause()  # until the parent has written the maps and holds the namespace, and kills this process
        finally:
            os._exit(0)
    os.close(told)
    try:
        failed = os.read(said, 1)
        if failed != b"\0":
            code = failed[0] if failed else errno.ECHILD
            raise OSError(code, f"a user namespace: {os.strerror(code)}")
        lines = f"0 0 1\n{uids[0]} {uids[0]} {len(uids)}\n"
        for name in ("uid_map", "gid_map"):
            Path(f"/proc/{pid}/{name}").write_text(lines)
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(said)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


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
        raise ValueError(f"bubblewrap was asked for, but {bubblewrap_runs().why}")
    return name


def python_paths() -> list[str]:
    """The Python environment: the interpreter's prefix and the virtual environment's."""
    return sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)})


def interpreter() -> str:
    """This Python as a path the sandbox has: its venv's folder resolved, as `python_paths` binds it (a `.venv`
    that is a link to a cache elsewhere, as a CI runner restores one, is bound where it leads, not where it is
    named), the file itself not (a venv's `python` is a link to the base interpreter; started through the link
    it finds its `pyvenv.cfg`)."""
    folder, name = os.path.split(sys.executable)
    return os.path.join(os.path.realpath(folder), name)


def bubblewrap_view(writable: list[str], tmp_mb: int = 1, own_proc: bool = True) -> list[str]:
    """The filesystem the server sees: the system's programs and libraries, the Python environment
    (read-only), fresh /proc (else the container's: `own_proc`), /dev and temporary folders (each of at most
    `tmp_mb`: the server writes nothing there, a job with namespaces has its own), and `writable`; not /root,
    /home or /work."""
    args = [arg for folder in SERVER_READ_ONLY for arg in ("--ro-bind", folder, folder)]
    for top in SERVER_SYSTEM_TOPS:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--proc", "/proc"] if own_proc else ["--bind", "/proc", "/proc"]
    args += ["--dev", "/dev"]
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
