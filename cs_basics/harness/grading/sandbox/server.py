"""The grader's end of one grading server (zygote.py): started in its sandbox, spoken to over a socket."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from cs_basics.harness.grading.sandbox.bubblewrap import (
    BubblewrapCommand,
    bubblewrap_command,
    bubblewrap_runs,
    bubblewrap_view,
    interpreter,
)
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.stopping import STOP_SIGNALS, StaffError
from cs_basics.harness.rule.tooling import HARNESS_PACKAGE

# no torch here: `cs-basics grade` starts the grading server (which imports torch) before the grader imports it,
# so that the two imports run side by side

JOB = Path(__file__).resolve().parent.parent / "job"  # what runs inside the job, by path

# what install_tool copies beside each other: the job's files (spawned.py: where there is no fork server) and the
# sandbox's policy, plain data they load by path (they may import only the standard library)
JOB_FILES = ("zygote.py", "child.py", "confine.py", "landlock.py", "reach.py", "view.py", "spawned.py")
SERVER_FILES = (*(JOB / name for name in JOB_FILES), Path(__file__).resolve().parent / "policy.py")
# the folders of the grader's package that hold the modules the server loads once for all its jobs (child.PRELOADED):
# the test library and the rule
PRELOADED_FOLDERS = ("harness", "harness/rule")

PASSED_ENV = ("CUDA_", "NVIDIA_", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_", "ATEN_CPU_CAPABILITY")

PASSED_ENV += ("SYSTEMROOT", "WINDIR")  # Windows: a Python without them cannot start its random source or load DLLs
# numpy's BLAS (OpenBLAS) with one thread, unless the staff say otherwise: at numpy's import its pool starts a thread
# a core, which spins on the cores the jobs share (0.13 CPU s of each import of torch here); the jobs compute in torch
SINGLE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1"}
PASSED_ENV += ("OPENBLAS_",)


class Server:
    """The grader's end of one grading server (zygote.py)."""

    def __init__(self, sandbox: str, root: Path, limits: Limits, cgroup_procs: int | None = None):
        """`cgroup_procs`: the worker's job cgroup's cgroup.procs, opened for writing, which each job's child joins."""
        self.sandbox, self.root, self.limits = sandbox, root, limits
        tool = install_tool(root)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [interpreter(), "-I", "-X", "utf8", str(tool / "zygote.py"), str(theirs.fileno())]
        passed = (theirs.fileno(),) if cgroup_procs is None else (theirs.fileno(), cgroup_procs)
        command += [] if cgroup_procs is None else [str(cgroup_procs)]
        with self.sandboxed(command) as sandboxed:
            self.process = subprocess.Popen(
                sandboxed.args,
                stdin=subprocess.DEVNULL,
                pass_fds=(*passed, *sandboxed.fds),
                cwd=root,
                env=server_env(root),
                start_new_session=True,
            )
        theirs.close()
        self.reading = threading.Lock()  # its first message, its ready, read once (ready)
        self.warmed: set[str] = set()  # what it was asked to import (Worker.warm)
        self.ran = False  # whether it was sent a job (a server then joins its job cgroup: zygote.join_job_cgroup)
        self.namespaces: bool | None = None  # whether each job gets namespaces of its own, once the server is ready
        self.own_proc = True  # whether a job with namespaces has a /proc of its own (see zygote.namespaces_allowed)
        self.landlock = 0  # the Landlock ABI the kernel offers the server's children (0: none), once it is ready

    def ready(self) -> Server:
        """The server, once it said it is ready (it imports torch meanwhile: the grader need not wait for it). A
        batch's workers may ask its template at once (Worker.new_server): one reads the message, the others wait."""
        with self.reading:
            return self._ready()

    def _ready(self) -> Server:
        if self.namespaces is None:
            try:
                ready = self.receive(self.limits.import_seconds)
            except (OSError, ValueError):  # closed as it failed, by another worker's thread that asked first
                ready = {"gone": True}
            if not ready or not ready.get("ready"):
                said = f"did not start in {self.limits.import_seconds:.0f} s"
                if ready is not None:  # it ended before it was ready: what it (or bwrap) printed is on stderr
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.process.wait(timeout=5)
                    said = f"ended as it started (status {self.process.returncode}; its own error is printed above)"
                self.close()
                raise StaffError(f"the grading server {said} ({self.sandbox})")
            self.take(ready)
        return self

    def take(self, ready: dict) -> None:
        """What the server's ready message says of its jobs."""
        self.namespaces = bool(ready.get("namespaces"))
        self.own_proc = bool(ready.get("own_proc", True))
        self.landlock = int(ready.get("landlock") or 0)

    def warm(self, names: list[str]) -> None:
        """Have it import `names` (those it was not asked for already): zygote's "warm"."""
        names = [n for n in names if n not in self.warmed]
        with contextlib.suppress(OSError):  # ended: the worker's next job starts another
            self.send({"op": "warm", "names": names}) if names else None
            self.warmed.update(names)

    def ended(self) -> bool:
        """Whether the server has ended (the grader then starts another for the next job)."""
        return self.process.poll() is not None

    def clone(self, cgroup_procs: int | None = None) -> ClonedServer:
        """A server for another worker, copied from this one (zygote's ForkServer.clone) once it is ready: no
        second import of torch. It lives in this server's sandbox, and ends with it: the grader closes this server
        last. Its jobs' folders must be in this server's view (below its `root`)."""
        sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        warmed = set(self.warmed)  # what the copy will have: imported before the message below (another thread may
        try:  # ask for more meanwhile, after it)
            passed = (theirs.fileno(),) if cgroup_procs is None else (theirs.fileno(), cgroup_procs)
            self.send({"op": "clone"}, passed)
        except OSError:  # this server has ended: the copy's socket reads as closed, and the worker starts its own
            pass
        finally:
            theirs.close()
        return ClonedServer(self, sock, warmed)

    def sandboxed(self, command: list[str]) -> contextlib.AbstractContextManager[BubblewrapCommand]:
        """The server's command line: in bubblewrap, the way it runs here (bubblewrap.bubblewrap_runs), or as it is."""
        if self.sandbox != "bubblewrap":
            return contextlib.nullcontext(BubblewrapCommand(command))
        how = bubblewrap_runs()
        view = bubblewrap_view([str(self.root)], self.limits.tmp_mb, own_proc=how.own_proc)
        return bubblewrap_command(how, command, [*view, "--chdir", str(self.root)])

    def send(self, message: dict, fds: tuple[int, ...] = ()) -> None:
        self.ran = self.ran or message.get("op") == "run"
        socket.send_fds(self.sock, [json.dumps(message).encode()], list(fds))

    def receive(self, timeout: float) -> dict | None:
        """The next message; None if none came in time; {"gone": True} when the server has ended."""
        ready, _, _ = select.select([self.sock], [], [], max(timeout, 0))
        if not ready:
            return None
        try:
            data = self.sock.recv(1 << 16)
        except OSError:
            data = b""
        return json.loads(data) if data else {"gone": True}

    def stop_signal(self, wait: float = 2.0) -> str | None:
        """The stop signal (SIGTERM, SIGINT, SIGHUP) that ended this server, once it has ended; None if none did.
        The grader never sends one (it ends its servers with SIGKILL), and a job of a uid of its own cannot: it came
        from outside, as Slurm's `scancel` signals every process of the job at once, the grader's a moment later."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=wait)
        code = self.process.returncode
        if code is None:
            return None
        number = -code if code < 0 else code - 128  # killed by it, or a sandbox (bwrap) that relays its child's death
        return signal.Signals(number).name if number in STOP_SIGNALS else None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


class ClonedServer(Server):
    """The grader's end of a server copied from another (Server.clone): its own socket, and its jobs' own cgroup,
    in the sandbox of the server it was copied from (`source`), which is not the grader's child: it has ended when
    its socket reads as closed, and a stop signal from outside reaches it as it reaches its source."""

    def __init__(self, source: Server, sock: socket.socket, warmed: set[str]):
        self.source, self.sock, self.reading = source, sock, threading.Lock()
        self.warmed, self.ran = warmed, False  # a fork of the source: what it imported, it has
        self.sandbox, self.root, self.limits = source.sandbox, source.root, source.limits
        self.namespaces, self.own_proc, self.landlock = None, True, 0
        self.pid: int | None = None  # in its sandbox's PID namespace: what the source may end (close)

    def _ready(self) -> Server:
        if self.namespaces is None:
            try:
                ready = self.receive(self.limits.import_seconds)
            except (OSError, ValueError):  # closed
                ready = {"gone": True}
            if not ready or not ready.get("ready"):
                self.close()
                said = "ended as it started" if ready else f"did not start in {self.limits.import_seconds:.0f} s"
                raise StaffError(f"the copy of the grading server {said} ({self.sandbox})")
            self.take(ready)
            self.pid = ready.get("pid")
        return self

    def ended(self) -> bool:
        """Whether the copy's end of the socket is closed (POLLHUP: set even where a message is still unread)."""
        try:
            watch = select.poll()
            watch.register(self.sock, select.POLLIN)
            return any(events & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, events in watch.poll(0))
        except (OSError, ValueError):  # closed here
            return True

    def stop_signal(self, wait: float = 2.0) -> str | None:
        return self.source.stop_signal(wait)  # Slurm's scancel signals every process: the source's too

    def close(self) -> None:
        if self.pid is not None and not self.ended():  # its source ends it now (it may be stuck, reading nothing)
            with contextlib.suppress(OSError):
                self.source.send({"op": "end_clone", "pid": self.pid})
        with contextlib.suppress(OSError):
            self.sock.close()


def install_tool(root: Path) -> Path:
    """The server's and the child's files, copied to `root`/tool (the job may not see the course's repository), with
    the grader's modules the server loads as it starts (child.preload_grader) in `grader/`: laid out afresh at each
    server's start, the grader's (root's where it is root), folders 755 and files 644 whatever the checkout's modes
    and the umask, so that no job's uid may write what a server will load."""
    tool = root / "tool"
    tool.mkdir(exist_ok=True)
    tool.chmod(0o755)
    for path in SERVER_FILES:
        copy_readable(path, tool / path.name)
    grader = tool / "grader"
    if grader.is_symlink() or grader.is_file():  # never followed: laid out here, not through a link
        grader.unlink()
    if grader.exists():
        shutil.rmtree(grader)
    for folder in PRELOADED_FOLDERS:
        copy_modules(HARNESS_PACKAGE / folder, grader / HARNESS_PACKAGE.name / folder)
    for folder in [grader, *grader.rglob("*")]:
        if folder.is_dir():
            folder.chmod(0o755)
    return tool


def copy_modules(source: Path, target: Path) -> None:
    """The Python files of `source` (not its subfolders) into `target`, with their bytecode where the grader's own
    import wrote it: each copy keeps its file's time, which the bytecode names (else the server compiles it)."""
    (target / "__pycache__").mkdir(parents=True, exist_ok=True)
    for path in source.glob("*.py"):
        copy_readable(path, target / path.name, keep_time=True)
        compiled = source / "__pycache__" / f"{path.stem}.{sys.implementation.cache_tag}.pyc"
        if compiled.is_file():
            copy_readable(compiled, target / "__pycache__" / compiled.name, keep_time=True)


def copy_readable(source: Path, target: Path, keep_time: bool = False) -> None:
    """`source` copied to `target`, mode 644 (not the source's), with its modification time where `keep_time`."""
    shutil.copyfile(source, target)
    target.chmod(0o644)
    if keep_time:
        stat = source.stat()
        os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def server_env(root: Path) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root), "PYTHONHASHSEED": "0"}
    env |= SINGLE_BLAS_THREAD
    return env | {k: v for k, v in os.environ.items() if k.startswith(PASSED_ENV)}
