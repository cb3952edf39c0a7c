"""Run a submission's code in a sandbox, under limits, and collect what it computed.

The grader never imports student code. A `Worker` starts a grading server (zygote.py), which
imports torch once, inside bubblewrap where it runs (its own PID and network namespaces, a view
of the filesystem that holds the Python environment and the worker's own folder and nothing of
the course's repository, `--die-with-parent`), else as a plain child (the fallback). For each job
the server forks a child that isolates itself further (see zygote.py) and runs the cases under a
uid of its own when the grader is root. The grader reads the child's progress and output from
pipes it bounds, enforces a time limit per case, per import and per submission, stops a
problem's cases once its function has failed to return twice, and ends every process of the job
(by uid, which nothing can outrun, and by namespace) before it reads any result. A case that
hangs or kills the interpreter fails alone: a fresh child takes the remaining cases.

Hidden cases run only after every public case, in children of their own: their inputs are written
into the job's folder once no process that ran a public case is left and the public cases' outputs
are read, so nothing the code printed or wrote before that can hold a hidden input. What the
children print from then on is kept per hidden case, never in the output students see at once.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import json
import os
import queue
import random
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from cs_basics.harness.grading.limits import Limits
from cs_basics.harness.portable import fork_server_runs, is_root, open_unfollowed, skipped, unix_module
from cs_basics.harness.rule.evidence import Received
from cs_basics.harness.rule.scanprocess import Scanner

if TYPE_CHECKING:
    import torch

    from cs_basics.harness.grading.grade import Overlay
    from cs_basics.harness.rule.record import Record
# torch, and what imports it, only where a job's results are read: `cs-basics grade` starts the grading server
# (which imports torch) before it imports torch itself, so that the two imports run side by side

HERE = Path(__file__).resolve().parent
SERVER_FILES = ("zygote.py", "child.py", "spawned.py")  # spawned.py: the child where there is no fork server
SANDBOX_ENV = "CS_BASICS_SANDBOX"  # "bubblewrap", "fallback", or unset: bubblewrap where it runs
UID_BASE, UID_COUNT = 61000, 4000  # the jobs' uids when the grader is root: no login, one per worker
UIDS_ENV = "CS_BASICS_JOB_UIDS"  # "FIRST-LAST": another range of jobs' uids (the tests narrow it to force collisions)
LEASE_PREFIX = "cs-basics-uid-"  # a worker's uid is leased by binding the abstract Unix socket of this name + uid
LEASE_WAIT_SECONDS = 600.0  # how long a worker waits for a uid when other workers hold every one
OUTPUT_FILE_LIMIT = 16 << 20  # the largest outputs file read back
LITTER = ("/tmp", "/var/tmp", "/dev/shm")  # where a job without namespaces may leave files
STOP = threading.Event()  # set when the grader is told to stop (SIGTERM, SIGINT, SIGHUP)
FINISHED_GRACE_SECONDS = 1.0  # how long a child that said it finished may take to end before it is killed
UNREPORTED = "your code's result for this case could not be reported (its message was too long?); the other cases ran"
# installed libraries the grading server loads only once a job's code names one (speed only): einx's torch
# backend imports torch._dynamo, as long to import as torch itself, and most submissions never use einx
WARM_ON_REQUEST = ("einx",)
PASSED_ENV = ("CUDA_", "NVIDIA_", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_", "ATEN_CPU_CAPABILITY")
PASSED_ENV += ("SYSTEMROOT", "WINDIR")  # Windows: a Python without them cannot start its random source or load DLLs


class StaffError(Exception):
    """The sandbox cannot run the submission fairly (before any student code ran): the staff must act."""


@dataclass
class CaseRun:
    outputs: dict | None = None
    error: str | None = None  # what went wrong, for the student
    seconds: float = 0.0
    record: Record | None = None  # the forbidden operators the case ran, as the child saw them
    printed: str = ""  # a hidden case's: what the code printed while it ran (not in the submission's output)


@dataclass
class ChildLog:
    """The child's stdout and stderr: the first `limit` bytes kept, the rest counted."""

    limit: int
    kept: bytearray = field(default_factory=bytearray)
    dropped: int = 0

    def add(self, data: bytes) -> None:
        room = self.limit - len(self.kept)
        self.kept += data[: max(room, 0)]
        self.dropped += max(len(data) - max(room, 0), 0)

    def text(self) -> str:
        text = self.kept.decode(errors="replace")
        return text + (f"\n[... {self.dropped} more bytes of output cut]" if self.dropped else "")


class Lines:
    """JSON events from the progress pipe: lines longer than `longest` dropped, at most `budget` bytes read."""

    def __init__(self, longest: int, budget: int):
        self.longest, self.budget = longest, budget
        self.buffer, self.skipping = b"", False

    def feed(self, data: bytes) -> Iterator[dict]:
        self.budget -= len(data)
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            if self.skipping:
                self.skipping = False
                continue
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    yield event
        if len(self.buffer) > self.longest:
            self.buffer, self.skipping = b"", True


# ---------------------------------------------------------------- the sandbox and the uids


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


def named_libraries(files: list[Path]) -> list[str]:
    """The libraries of WARM_ON_REQUEST whose name is in the student's files (read within intake's bounds)."""
    texts = [path.read_bytes() for path in files]
    return [name for name in WARM_ON_REQUEST if any(name.encode() in text for text in texts)]


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


def process_uids() -> dict[int, int]:
    """pid -> uid of every live process (zombies, which only wait to be reaped, left out)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found[int(entry.name)] = entry.stat().st_uid
    return found


def processes_of(uid: int) -> list[int]:
    return [pid for pid, owner in process_uids().items() if owner == uid]


def job_uid_range() -> range:
    """The jobs' uids: 61000 to 64999, or the range $CS_BASICS_JOB_UIDS names ("FIRST-LAST")."""
    text = os.environ.get(UIDS_ENV, "").strip()
    if not text:
        return range(UID_BASE, UID_BASE + UID_COUNT)
    first, _, last = text.partition("-")
    with contextlib.suppress(ValueError):
        uids = range(int(first), int(last or first) + 1)
        if uids and uids[0] > 0 and uids[-1] < 65534:
            return uids
    raise ValueError(f"${UIDS_ENV} is {text!r}; it must be FIRST-LAST, uids from 1 to 65533 that no user logs in as")


def take_lease(uid: int) -> socket.socket | None:
    """The lease on `uid`: an abstract Unix socket bound to its name, which no other process on the machine
    (in this network namespace) can bind while we hold it, and which the kernel frees when we die; None if
    another process holds it. No file is made."""
    lease = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        lease.bind(f"\0{LEASE_PREFIX}{uid}")
    except OSError as err:
        lease.close()
        if err.errno == errno.EADDRINUSE:
            return None
        raise
    return lease


def lease_uid(wait: float = LEASE_WAIT_SECONDS) -> tuple[int, socket.socket]:
    """A uid of the jobs' range, leased for as long as the returned socket stays open, that no process has;
    waits (up to `wait` seconds) while other workers hold every one."""
    uids = job_uid_range()
    deadline = time.monotonic() + wait
    while True:
        busy = set(process_uids().values())
        start = random.randrange(len(uids))
        for offset in range(len(uids)):
            uid = uids[(start + offset) % len(uids)]
            lease = None if uid in busy else take_lease(uid)
            if lease is not None and processes_of(uid):  # left by a grader that died: not ours to take yet
                lease.close()
            elif lease is not None:
                return uid, lease
        if STOP.is_set():
            raise StaffError(f"grading was stopped ({stop_reason()}) while waiting for a job uid")
        if time.monotonic() >= deadline:
            raise StaffError(f"every uid from {uids[0]} to {uids[-1]} is leased by another worker or busy")
        time.sleep(random.uniform(0.2, 0.5))


def kill_uid(uid: int) -> bool:
    """Every process of `uid`, wherever it runs: `kill -9 -1` as that uid, again until none is left
    (the kernel signals them all in one pass, so forking faster cannot outrun it). Whether none is left."""
    kill = [shutil.which("kill") or "/bin/kill", "-9", "-1"]
    setpriv = shutil.which("setpriv")  # util-linux: it takes the uid, so Python's child need not (see below)
    for _ in range(100):
        if setpriv:  # no uid change in Python's child: subprocess may use vfork, not a fork of the whole grader
            done = subprocess.run(
                [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *kill], capture_output=True
            )
        else:
            done = subprocess.run(kill, user=uid, group=uid, extra_groups=[], capture_output=True)
        if done.returncode != 0 and not processes_of(uid):
            return True
        time.sleep(0.01)
    return False


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


# ---------------------------------------------------------------- the grading server


class Server:
    """The grader's end of one grading server (zygote.py)."""

    def __init__(self, sandbox: str, root: Path, limits: Limits):
        self.sandbox, self.root, self.limits = sandbox, root, limits
        tool = install_tool(root)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [sys.executable, "-I", "-X", "utf8", str(tool / "zygote.py"), str(theirs.fileno())]
        if sandbox == "bubblewrap":
            command = self.bubblewrap(command)
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(),),
            cwd=root,
            env=server_env(root),
            start_new_session=True,
        )
        theirs.close()
        self.namespaces: bool | None = None  # whether each job gets namespaces of its own, once the server is ready

    def ready(self) -> Server:
        """The server, once it said it is ready (it imports torch meanwhile: the grader need not wait for it)."""
        if self.namespaces is None:
            ready = self.receive(self.limits.import_seconds)
            if not ready or not ready.get("ready"):
                self.close()
                raise StaffError(
                    f"the grading server did not start in {self.limits.import_seconds:.0f} s ({self.sandbox})"
                )
            self.namespaces = bool(ready.get("namespaces"))
        return self

    def bubblewrap(self, command: list[str]) -> list[str]:
        sandbox = [shutil.which("bwrap"), "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net"]
        view = bubblewrap_view([str(self.root)], self.limits.tmp_mb)
        sandbox += ["--unshare-ipc", "--unshare-uts", *view, "--chdir", str(self.root)]
        if os.geteuid() != 0:  # an ordinary user: a user namespace, in which the server may make more
            sandbox += ["--unshare-user", "--uid", "0", "--gid", "0", "--cap-add", "ALL"]
        return [*sandbox, "--", *command]

    def send(self, message: dict, fds: tuple[int, ...] = ()) -> None:
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

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


def install_tool(root: Path) -> Path:
    """The server's and the child's files, copied to `root`/tool (the job may not see the course's repository)."""
    tool = root / "tool"
    tool.mkdir(exist_ok=True)
    for name in SERVER_FILES:
        shutil.copyfile(HERE / name, tool / name)
    return tool


def server_env(root: Path) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root), "PYTHONHASHSEED": "0"}
    return env | {k: v for k, v in os.environ.items() if k.startswith(PASSED_ENV)}


# ---------------------------------------------------------------- a worker: one server, one uid, one job at a time


class Worker:
    """A grading server and a uid of its own (leased for the worker's life, so that no other grader on the
    machine takes it), reused for one submission after another."""

    def __init__(self, sandbox: str | None = None, limits: Limits | None = None, namespaces: bool = True):
        self.sandbox = choose_sandbox(sandbox)
        self.namespaces = namespaces  # False: as where the kernel refuses them (for tests of that case)
        self.limits = limits or Limits()
        self.spawns = not fork_server_runs()  # Windows, macOS: a fresh Python per attempt (SpawnedAttempt)
        self.uid, self.lease = lease_uid() if is_root() and not self.spawns else (None, None)
        self.root = Path(tempfile.mkdtemp(prefix="cs-basics-grade-"))
        self.root.chmod(0o711)  # the job's uid passes through to its own folder
        if self.spawns:
            install_tool(self.root)
        self.server: Server | None = None
        self.scanner = None if self.spawns else Scanner()  # started at its first scan; a fresh Python where none
        self.jobs = 0
        self.attempts = 0
        self.hide: list[str] = []  # folders no job may see besides the course's (a batch's folder of submissions)
        self.overlays: dict[Path, Overlay] = {}  # course root -> the files laid over each job's code (grade.stage)
        self.none_left = False  # no process of the uid is left, and no job started since (known by kill_uid)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def isolated(self) -> bool:
        """Whether each job gets namespaces of its own (no network, private temporary folders)."""
        return self.namespaces and not self.spawns and self.ensure_server().namespaces

    def describe(self) -> str:
        where = "a bubblewrap sandbox" if self.sandbox == "bubblewrap" else "the fallback sandbox (no bubblewrap)"
        if self.spawns:
            where += ", a fresh Python per attempt (the fork server needs Linux)"
        who = f"uid {self.uid}" if self.uid is not None else "the grader's own uid (not root)"
        if self.spawns:
            who = "the grader's own user"
        alone = "its own namespaces (no network, private /tmp)" if self.isolated else "no namespaces of its own"
        return f"graded in {where}, as {who}, with {alone}"

    def skipped(self) -> list[str]:
        """The defences this machine cannot give the job (a sentence each, for the grade's notes)."""
        if not self.spawns:
            return []
        notes = [skipped("isolating the code (a uid of its own, namespaces, seccomp)", "Linux", "it runs as you")]
        if unix_module("resource") is None:
            notes.append(skipped("limiting the memory and file size of the code's process", "Unix"))
        return notes

    def attempt(self, job: dict, log: ChildLog) -> Attempt | SpawnedAttempt:
        """One child over the job's cases: forked by the server, or a fresh Python where there is none."""
        return SpawnedAttempt(self, job, log) if self.spawns else Attempt(self, job, log)

    def summary(self) -> dict:
        """Which sandbox, for the results file: {"name": "bubblewrap" or "fallback", "uid", "namespaces"}."""
        return {"name": self.sandbox, "uid": self.uid, "namespaces": self.isolated}

    def next_id(self) -> int:
        self.attempts += 1
        return self.attempts

    def new_job_dir(self) -> Path:
        self.jobs += 1
        folder = self.root / "jobs" / str(self.jobs)
        for sub in ("code", "inputs", "out", "work"):
            (folder / sub).mkdir(parents=True)
        os.chmod(folder.parent, 0o711)
        return folder

    def hand_over(self, folder: Path) -> None:
        """As root: the job's uid may write only its out/ and work/ folders."""
        for path in (folder, *folder.rglob("*")):
            mode = 0o755 if path.is_dir() else 0o644
            try:
                os.chmod(path, mode, follow_symlinks=False)
            except NotImplementedError:  # Windows (Python < 3.13): a link is left alone by looking first
                if not path.is_symlink():
                    os.chmod(path, mode)
        if self.uid is not None:
            for sub in ("out", "work"):
                os.chown(folder / sub, self.uid, self.uid)

    def start(self) -> Worker:
        """Start the grading server now, without waiting for it (it imports torch while the grader goes on).
        Where there is no fork server (Windows, macOS), each attempt starts its own Python instead: nothing to start."""
        if self.server is None and not self.spawns:
            self.server = Server(self.sandbox, self.root, self.limits)
        return self

    def ensure_server(self) -> Server:
        if self.server is None or self.server.process.poll() is not None:
            if self.server is not None:
                self.server.close()
            self.server = Server(self.sandbox, self.root, self.limits)
        return self.server.ready()

    def end_processes(self, wait: bool = True) -> None:
        """Every process of this worker's jobs, gone: by their uid as root; else through the server, the
        subreaper of every process a job leaves (a grader that is not root has no uid to kill by), waiting
        for it to say so unless a job's attempt is still listening to it."""
        if self.uid is not None:
            self.none_left = kill_uid(self.uid)
        elif self.server is not None:
            sweep = self.next_id()
            with contextlib.suppress(OSError):
                self.server.send({"op": "sweep", "id": sweep})
                deadline = time.monotonic() + 10
                while wait and time.monotonic() < deadline:
                    message = self.server.receive(deadline - time.monotonic())
                    if message is None or message.get("gone") or message.get("swept") == sweep:
                        break

    def end_job(self, job_id: int) -> None:
        """Every process of the job, gone."""
        self.end_processes(wait=False)  # the job's attempt reads the server's messages
        if self.server is not None:
            with contextlib.suppress(OSError):
                self.server.send({"op": "kill", "id": job_id})

    def watch_hoard(self) -> Hoard | None:
        """Where the jobs have no namespaces, so no bounded temporary folders of their own: a watch on their uid."""
        return Hoard(self.uid, self.limits.tmp_mb) if self.uid is not None and not self.isolated else None

    def clean_up(self, folder: Path) -> None:
        """After a submission: nothing of it left running or lying around."""
        if not self.none_left:  # else none is left since its last phase, and no job started since
            self.end_processes()
        if self.uid is not None and not self.isolated:  # with namespaces its temporary folders went with it
            remove_litter(self.uid)
        remove_tree(folder)

    def close(self) -> None:
        if self.scanner is not None:
            self.scanner.close()
        if self.uid is None:
            self.end_processes()  # through the server, while it is there
        if self.server is not None:
            self.server.close()
            self.server = None
        if self.uid is not None:
            kill_uid(self.uid)
        if self.lease is not None:  # only once nothing of its jobs is left: the next holder starts clean
            self.lease.close()
            self.lease = None
        remove_tree(self.root)


# ---------------------------------------------------------------- one attempt at a job's cases


class Attempt:
    """One child over some cases: its progress events, its output, how it ended."""

    def __init__(self, worker: Worker, job: dict, log: ChildLog):
        self.worker, self.log = worker, log
        self.server = worker.ensure_server()
        self.id = job["id"]
        progress_r, progress_w = os.pipe()
        output_r, output_w = os.pipe()
        worker.none_left = False
        self.server.send({"op": "run", "job": job}, (progress_w, output_w))
        os.close(progress_w)
        os.close(output_w)
        self.fds = {progress_r: "progress", output_r: "output"}
        self.lines = Lines(worker.limits.progress_line_kb << 10, worker.limits.progress_mb << 20)
        self.how: str | None = None  # set once the job's process has ended
        self.hoard = worker.watch_hoard()
        self.hoarded = False  # its uid held more than tmp_mb in the shared temporary folders
        self.finished = False  # the child said it ran every case and is ending

    def events(self, deadline: Callable[[], float]) -> Iterator[dict | None]:
        """The child's events; None when `deadline()` passes or the grader is told to stop. Ends when
        the job's process has ended and what it wrote is read."""
        while True:
            wait = min(deadline() - time.monotonic(), 0.25) if self.how is None else 0
            self.hoarded = self.hoarded or bool(self.hoard and self.how is None and self.hoard.over())
            if STOP.is_set() or self.hoarded or (self.how is None and deadline() <= time.monotonic()):
                yield None
                continue
            ready, _, _ = select.select([*self.fds, self.server.sock] if self.how is None else list(self.fds), [], [],
                                        max(wait, 0))  # fmt: skip
            if not ready and self.how is not None:
                return
            for fd in ready:
                if fd is self.server.sock:
                    self.hear()
                    continue
                yield from self.read(fd)

    def read(self, fd: int) -> Iterator[dict]:
        data = os.read(fd, 65536)
        if self.fds[fd] == "output" and data:
            self.log.add(data)
        elif data:
            yield from self.lines.feed(data)
        if not data or (self.fds[fd] == "progress" and self.lines.budget <= 0):  # past its budget: no more read
            self.fds.pop(fd)
            os.close(fd)

    def drain(self) -> None:
        """Read what the job wrote to its output so far into the current log (the child flushes its
        streams before each event), so that what follows goes to the next case's log; bounded."""
        output = [fd for fd, kind in self.fds.items() if kind == "output"]
        for _ in range(64):
            if not output or output[0] not in self.fds or not select.select(output, [], [], 0)[0]:
                return
            for _event in self.read(output[0]):
                pass

    def hear(self) -> None:
        message = self.server.receive(0)
        if message is None:
            return
        if message.get("gone"):
            self.how = self.how or "was stopped with the grading server"
        elif message.get("ended") == self.id:
            self.how = message.get("how", "ended")

    def end(self) -> None:
        """Kill whatever is left of the job, wait until the server says it ended, close the pipes. A child that
        said it finished is ending: it gets a moment to (the phase then ends every process of the uid anyway)."""
        if self.how is None and self.finished:
            self.wait_ended(FINISHED_GRACE_SECONDS)
        if self.how is None:
            self.worker.end_job(self.id)
            self.wait_ended(10)
            if self.how is None:  # the server itself is stuck: a fresh one for the next job
                self.server.close()
                self.how = "was killed"
        for fd in self.fds:
            os.close(fd)
        self.fds = {}

    def wait_ended(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.how is None and time.monotonic() < deadline:
            self.hear() if select.select([self.server.sock], [], [], 0.2)[0] else None


@cache
def child_module():
    """child.py, loaded by path as the server loads it (never part of `cs_basics`): its grouping of cases."""
    spec = importlib.util.spec_from_file_location("_grading_child", HERE / "child.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def end_tree(process: subprocess.Popen) -> None:
    """`process` and what it started: its session on Unix, its tree on Windows (taskkill /T)."""
    if hasattr(os, "killpg"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    elif shutil.which("taskkill"):
        subprocess.run(["taskkill", "/F", "/T", "/PID", str(process.pid)], capture_output=True)
    with contextlib.suppress(OSError):
        process.kill()


def describe_exit(code: int) -> str:
    """How a spawned child ended, in the words the fork server uses."""
    if code < 0:
        return f"was killed by signal {signal.Signals(-code).name if -code in signal.valid_signals() else -code}"
    if code >= 0xC0000000:  # Windows: an NTSTATUS (0xC0000005, an access violation)
        return f"crashed (exception 0x{code:X})"
    return f"exited with status {code}"


class SpawnedAttempt:
    """One attempt where there is no fork server (Windows, macOS): a fresh Python (spawned.py) per group of
    cases that forbid the same operators, one after another, as the forked child forks one per group.
    Threads read its pipes (Windows's select takes sockets only). What the code prints is read as it
    comes, so a case's last lines may be counted to the next case of the same phase, never across the
    public and hidden phases (each runs its own attempts)."""

    def __init__(self, worker: Worker, job: dict, log: ChildLog):
        self.worker, self.log, self.job = worker, log, job
        self.groups = [cases for _, cases in child_module().cases_by_rule(job)]
        self.lines = Lines(worker.limits.progress_line_kb << 10, worker.limits.progress_mb << 20)
        self.how: str | None = None  # set once the last process has ended
        self.hoard, self.hoarded = None, False  # no uid of the job's own to watch
        self.lock = threading.Lock()
        self.ended = False  # once set, nothing more is read into a log
        self.process: subprocess.Popen | None = None
        self.start(self.groups.pop(0))

    def start(self, cases: list[str]) -> None:
        command = [sys.executable, "-I", "-X", "utf8", str(self.worker.root / "tool" / "spawned.py")]
        pipe = subprocess.PIPE
        try:
            self.process = subprocess.Popen(
                command, stdin=pipe, stdout=pipe, stderr=pipe, cwd=self.worker.root,
                env=server_env(self.worker.root), start_new_session=True,
            )  # fmt: skip
        except OSError as err:
            raise StaffError(f"could not start a Python to run the submission's code ({err})") from None
        self.progress: queue.Queue[bytes] = queue.Queue(maxsize=64)  # b"" at the end of the pipe
        self.lines.buffer, self.lines.skipping = b"", False  # nothing of the child before carries over
        threading.Thread(target=self.pump, args=(self.process.stdout, self.progress), daemon=True).start()
        self.output = threading.Thread(target=self.pump, args=(self.process.stderr, None), daemon=True)
        self.output.start()
        with contextlib.suppress(OSError):
            self.process.stdin.write(json.dumps(self.job | {"cases": cases}).encode())
            self.process.stdin.close()

    def pump(self, pipe, into: queue.Queue | None) -> None:
        """A pipe's bytes: the progress into `into` (until its budget is spent: then the pipe is closed),
        the output into the current case's log until the attempt has ended. The pipe is closed here, by
        the one thread that reads it."""
        budget = self.worker.limits.progress_mb << 20
        try:
            while (into is None or budget > 0) and (data := os.read(pipe.fileno(), 65536)):
                budget -= len(data)
                if into is not None:
                    into.put(data)
                    continue
                with self.lock:
                    if self.ended:  # a process the job left behind prints after it: no log takes that
                        return
                    self.log.add(data)
        except OSError:
            pass
        finally:
            pipe.close()
            if into is not None:
                into.put(b"")

    def events(self, deadline: Callable[[], float]) -> Iterator[dict | None]:
        """The children's events, group after group; None when `deadline()` passes or the grader is told to
        stop. Ends when the last child has ended and what it wrote is read."""
        while True:
            if STOP.is_set() or (self.how is None and deadline() <= time.monotonic()):
                yield None
                continue
            try:
                data = self.progress.get(timeout=max(min(deadline() - time.monotonic(), 0.25), 0))
            except queue.Empty:
                continue
            if data:
                for event in self.lines.feed(data):
                    if not (event.get("event") == "finished" and self.groups):  # a group's, not the attempt's
                        yield event
                continue
            if self.next_group():
                return

    def next_group(self) -> bool:
        """At the end of a child's progress: the next group's child, or True when none is left to run."""
        try:
            code = self.process.wait(timeout=max(self.worker.limits.case_seconds, 1.0))
        except subprocess.TimeoutExpired:  # it closed its pipe and went on: the case's limit ends it
            end_tree(self.process)
            code = self.process.wait()
        self.output.join(timeout=2.0)  # what it printed last, unless a process it left holds the pipe
        if code == 0 and self.groups and not STOP.is_set():
            self.start(self.groups.pop(0))
            return False
        self.how = describe_exit(code)
        return True

    def drain(self) -> None:
        """What the code printed so far is in the current log (the pump adds it as it comes)."""
        with self.lock:
            pass

    def end(self) -> None:
        """End the child and what it started (its session or tree); from then on its output reaches no log,
        whatever a process that escaped the tree still prints (the hidden phase starts after this)."""
        if self.process is not None and self.process.poll() is None:
            end_tree(self.process)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
            self.how = self.how or "was killed"
        if self.process is not None:
            self.output.join(timeout=1.0)  # what it printed before it ended
        with self.lock:
            self.ended = True


def run_once(worker: Worker, job: dict, cases: list[str], state: RunState) -> tuple[list[str], bool]:
    """One child over `cases`; fills `state.runs` for the cases it reached. Returns the unreached ones,
    and whether a fresh child should take them (not after an import failure, the total limit or a stop)."""
    limits = worker.limits
    attempt = worker.attempt(job | {"cases": cases}, state.log_for(cases[0]))
    current, started = None, time.monotonic()
    deadline = min(started + limits.import_seconds, state.stop_at)
    remaining = list(cases)
    try:
        for event in attempt.events(lambda: deadline):  # noqa: B023 (late binding wanted: the deadline moves)
            if event is None and attempt.hoarded:
                return state.hoarded(remaining, current, attempt.hoard.limit >> 20)
            if event is None:  # a limit passed, or the grader is stopping
                return state.out_of_time(remaining, current, started)
            kind, case = event.get("event"), event.get("case")
            if kind == "staff_error" and state.hidden:  # every check for the staff passed before the public cases:
                why = f"the process running your code stopped: {event.get('message', '')}"  # this may hold hidden data
                state.halt(remaining, why)
                return [], False
            if kind == "staff_error":
                raise StaffError(str(event.get("message", "")))
            if kind == "import_error":
                state.halt(remaining, f"your code failed to import:\n{event.get('message', '')}")
                return [], False
            if kind == "evidence":  # the rule's evidence, sent as it was seen (rule/evidence.py)
                state.evidence(event, cases)
            elif kind == "ready":
                deadline = state.stop_at
            elif kind in ("start", "finished") and current is not None:  # its report was lost (a line too long)
                state.fail([current], UNREPORTED)
                remaining.remove(current)
                current = None
            if kind == "start" and case in remaining:
                attempt.drain()  # what was printed so far belongs to the case before (or to the import)
                attempt.log = state.log_for(case)
                current, started = case, time.monotonic()
                deadline = min(started + limits.case_seconds, state.stop_at)
            elif kind in ("done", "error") and case == current:
                state.finish(case, event, time.monotonic() - started)
                remaining.remove(case)
                current, deadline = None, state.stop_at
            elif kind == "finished":
                attempt.finished = True
                break
        attempt.end()
        flooded = attempt.lines.budget <= 0
        if flooded:
            why = (
                f"your code wrote over {limits.progress_mb} MiB to the grader's progress pipe, which it stopped reading"
            )
            state.halt(remaining, why)
            return [], False
        if remaining and current is not None:  # the pipe closed mid-case: the interpreter died
            state.fail([current], f"the Python process running your code {attempt.how} during this case")
            state.cut_off(current, attempt.how)
            remaining.remove(current)
        elif remaining:
            state.halt(remaining, f"the Python process running your code {attempt.how} before it ran")
            return [], False
        return remaining, True
    finally:
        attempt.end()


@dataclass
class RunState:
    """What the attempts at one submission's cases have found so far."""

    problems: dict[str, str]  # case id -> its problem
    limits: Limits
    stop_at: float
    log: ChildLog
    runs: dict[str, CaseRun] = field(default_factory=dict)
    timeouts: dict[str, list[str]] = field(default_factory=dict)  # problem -> its cases that ran out of time
    hidden: bool = False  # whether the children now run hidden cases
    printed: dict[str, ChildLog] = field(default_factory=dict)  # hidden case -> what was printed while it ran
    halted: str | None = None  # why no fresh child may take the cases left (an import failure, a limit, a stop)
    received: Received = field(default_factory=Received)  # the rule's evidence, as the children sent it

    def log_for(self, case: str) -> ChildLog:
        """Where what the children print while `case` runs goes: the submission's output until the hidden
        cases, then each hidden case's own."""
        return self.printed.setdefault(case, ChildLog(self.log.limit)) if self.hidden else self.log

    def fail(self, cases: list[str], error: str) -> None:
        for case in cases:
            self.runs[case] = CaseRun(error=error)

    def halt(self, cases: list[str], error: str) -> None:
        """Fail `cases`, and every case after them, for a reason no fresh child would change."""
        self.fail(cases, error)
        self.halted = error

    def evidence(self, event: dict, cases: list[str]) -> None:
        """A line of the rule's evidence; a case already finished gets it too (a thread of the code may send it)."""
        from cs_basics.harness.rule.evidence import merged

        self.received.add(event, cases)
        for case in cases:
            run = self.runs.get(case)
            if run is not None and run.record is not None and event in self.received.lines.get(case, []):
                run.record = merged(run.record, [event])

    def cut_off(self, case: str, how: str | None) -> None:
        """The child ended while sending the rule's evidence (rule/evidence.py): the case's record is not whole."""
        from cs_basics.harness.rule.evidence import LOST_STATUS, merged
        from cs_basics.harness.rule.record import Record

        if how == f"exited with status {LOST_STATUS}":
            self.runs[case].record = merged(Record(), self.received.evidence(case), complete=False)

    def finish(self, case: str, event: dict, seconds: float) -> None:
        from cs_basics.harness.rule.evidence import merged
        from cs_basics.harness.rule.record import Record

        reported = Record.from_json(event.get("record", {}))
        complete = self.received.complete(event.get("evidence"))
        record = merged(reported, self.received.evidence(case), complete)
        if event.get("event") == "done":
            self.runs[case] = CaseRun(outputs={}, seconds=seconds, record=record)  # read once the child is gone
        else:
            error = f"your code raised {event.get('message')}\n{event.get('traceback', '')}"
            self.runs[case] = CaseRun(error=error, seconds=seconds, record=record)

    def hoarded(self, remaining: list[str], current: str | None, limit_mb: int) -> tuple[list[str], bool]:
        """The job's uid held more than `limit_mb` in the shared temporary folders, where what it wrote stays
        until the submission's end: its case fails, and no other case runs."""
        why = f"your code wrote over {limit_mb} MiB to /tmp, /var/tmp and /dev/shm"
        if current is None:  # while importing
            self.fail(remaining, why)
            return [], False
        self.fail([current], why)
        self.fail([case for case in remaining if case != current], f"not run: {why} during case {current}")
        return [], False

    def out_of_time(self, remaining: list[str], current: str | None, started: float) -> tuple[list[str], bool]:
        """Mark what a passed limit (or a stop) cost; return the cases a fresh child may still take."""
        if STOP.is_set():
            self.halt(remaining, f"not run: grading was stopped ({stop_reason()})")
            return [], False
        total = time.monotonic() >= self.stop_at
        why = f"the submission's total time limit ({self.limits.total_seconds:.0f} s) ran out"
        if current is None:
            self.halt(
                remaining, why if total else f"importing the submission took over {self.limits.import_seconds:.0f} s"
            )
            return [], False
        if total:
            self.halt(remaining, why)
            return [], False
        why = f"the case ran over its time limit of {self.limits.case_seconds:.0f} s (an endless loop?)"
        self.timeouts.setdefault(self.problems[current], []).append(current)
        self.runs[current] = CaseRun(error=why, seconds=time.monotonic() - started)
        return [c for c in remaining if c != current], True

    def skip_stuck_problems(self, cases: list[str]) -> list[str]:
        """Cases of a problem whose function already failed to return `timeouts_per_problem` times are not run."""
        left = []
        for case in cases:
            stuck = self.timeouts.get(self.problems[case], [])
            if len(stuck) >= self.limits.timeouts_per_problem:
                self.runs[case] = CaseRun(error=f"not run: your function did not return on cases {' and '.join(stuck)}")
            else:
                left.append(case)
        return left


STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGBREAK") if hasattr(signal, name)
)  # Windows: no SIGHUP, and Ctrl-Break is SIGBREAK
_stop_reason = [""]


def stop_reason() -> str:
    return _stop_reason[0] or "stopped"


def request_stop(reason: str) -> None:
    """Stop grading soon: running jobs are ended and their cases marked, results are still written."""
    _stop_reason[0] = reason
    STOP.set()


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[list[int]]:
    """While inside: a stop signal asks grading to wind down; yields [the signal's number] once one came."""
    came: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return

    def stop(signum: int, frame: object) -> None:
        came.append(signum)
        request_stop(signal.Signals(signum).name)

    before = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield came
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def started_worker(sandbox: str | None, limits: Limits) -> Iterator[Worker | None]:
    """A worker whose grading server starts now, before the grader imports torch (`cs-basics grade`: the two
    imports run side by side); None where it cannot start here, and grading then says why as it always did."""
    try:
        worker = Worker(sandbox, limits)
    except (ValueError, StaffError):
        worker = None
    if worker is None:
        yield None
        return
    with worker:
        yield worker.start()


def run_cases(
    worker: Worker,
    job: dict,
    cases: list[str],
    problems: dict[str, str],
    hidden: Collection[str] = (),
    hand_over_hidden: Callable[[], None] = lambda: None,
) -> tuple[dict[str, CaseRun], str]:
    """Run every public case, then (`hand_over_hidden` writing their inputs only then) every hidden case,
    in children; read their outputs only once every child is gone. Returns the runs and what the
    children printed before the first hidden input existed."""
    limits = worker.limits
    state = RunState(problems, limits, time.monotonic() + limits.total_seconds, ChildLog(limits.output_kb * 1024))
    try:
        run_phase(worker, job, [c for c in cases if c not in hidden], state)
        later = [c for c in cases if c in hidden]
        if later:
            state.hidden = True
            if state.halted is not None:  # an import failure or a limit: the same for the hidden cases
                state.fail(later, state.halted)
            else:
                hand_over_hidden()
                run_phase(worker, job, later, state)
    finally:
        worker.clean_up(Path(job["dir"]))
    for case, log in state.printed.items():
        state.runs[case].printed = log.text()
    return state.runs, state.log.text()


def run_phase(worker: Worker, job: dict, cases: list[str], state: RunState) -> None:
    """`cases` in one child after another until each has a run; then every process of the job ended and
    the outputs of `cases` read (a process left could otherwise change them later)."""
    if not cases:
        return
    remaining, retry = list(cases), True
    while remaining and retry:
        remaining = state.skip_stuck_problems(remaining)
        if remaining:
            remaining, retry = run_once(worker, job | {"id": worker.next_id()}, remaining, state)
    state.fail(remaining, "not run: an earlier failure stopped the submission's process")
    worker.end_processes()  # nothing of the job may still write while the outputs are read
    for name in cases:
        run = state.runs[name]
        if run.error is None:
            run.outputs, run.error = read_outputs(Path(job["dir"]) / "out" / f"{name}.safetensors")


def read_outputs(path: Path) -> tuple[dict | None, str | None]:
    """The child's outputs, rebuilt on their devices; never following links, never unbounded."""
    try:
        fd = open_unfollowed(path)
    except OSError as err:
        return None, f"your code's outputs could not be read back ({err.strerror})"
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, "your code's outputs could not be read back (not a regular file)"
        data = f.read(OUTPUT_FILE_LIMIT + 1)
    if len(data) > OUTPUT_FILE_LIMIT:
        return None, f"your code's outputs are over {OUTPUT_FILE_LIMIT >> 20} MiB"
    from safetensors.torch import load

    try:
        tensors = load(data)
        meta = json.loads(_metadata(data)["outputs"])
        return {key: _rebuild(key, m, tensors) for key, m in meta.items()}, None
    except Exception as err:
        return None, f"your code's outputs could not be read back ({type(err).__name__}: {err})"


def _metadata(data: bytes) -> dict:
    size = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + size]).get("__metadata__", {})


def _rebuild(key: str, meta: dict, tensors: dict[str, torch.Tensor]) -> object:
    import torch

    from cs_basics.harness.compare import Foreign

    if meta["kind"] == "tensor":
        return tensors[key].to(torch.device(meta["device"]))
    return Foreign(str(meta["describe"]), str(meta.get("sequence", "")))
