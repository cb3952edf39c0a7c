"""One attempt at some of a job's cases: a child forked by the grading server (`Attempt`), or a fresh Python
where there is no fork server (`SpawnedAttempt`: Windows, macOS); its progress events, its output, how it ended."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

from cs_basics.harness.grading.sandbox.server import JOB, server_env
from cs_basics.harness.grading.sandbox.stopping import STOP, StaffError, request_stop

if TYPE_CHECKING:
    from cs_basics.harness.grading.sandbox.worker import Worker

FINISHED_GRACE_SECONDS = 1.0  # how long a child that said it finished may take to end before it is killed


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


@dataclass(frozen=True)
class Garbled:
    """A line of the channel that is not one JSON object (`Lines` yields it; pipeline/protocol.py charges it)."""

    why: str


class Lines:
    """The progress channel's lines, at most `budget` bytes read: each a JSON object, or `Garbled` (a line that
    is not one, or longer than `longest`: the harness never writes such a line, protocol.py)."""

    def __init__(self, longest: int, budget: int):
        self.longest, self.budget = longest, budget
        self.buffer, self.skipping = b"", False

    def feed(self, data: bytes) -> Iterator[dict | Garbled]:
        self.budget -= len(data)
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            if self.skipping or len(line) > self.longest:  # its end may come in the read that makes it too long
                self.skipping = False
                yield Garbled(f"a line over {self.longest >> 10} KiB")
                continue
            try:
                event = json.loads(line)
            except ValueError:
                yield Garbled("a line that is not JSON")
                continue
            yield event if isinstance(event, dict) else Garbled("a line that is not a JSON object")
        if len(self.buffer) > self.longest:
            self.buffer, self.skipping = b"", True


def channel() -> tuple[int, int]:
    """The progress channel, on which the child sends its reports and the rule's evidence as it is seen
    (rule/evidence.py): a socket pair, not a pipe, since a pipe's write end can be opened again for reading
    through /proc/self/fd, where a thread of the student's code could take the evidence back off it before the
    grader reads it; a socket cannot be opened through /proc. (reading end, writing end)"""
    ours, theirs = socket.socketpair()
    theirs.shutdown(socket.SHUT_RD)  # the child only writes on it
    return ours.detach(), theirs.detach()


class Attempt:
    """One child over some cases: its progress events, its output, how it ended."""

    def __init__(self, worker: Worker, job: dict, log: ChildLog):
        self.worker, self.log = worker, log
        self.server = worker.ensure_server()
        self.id = job["id"]
        progress_r, progress_w = channel()
        output_r, output_w = os.pipe()
        go_r, self.go_w = os.pipe()  # a line on it: the inputs of the child's cases are written (see go)
        worker.none_left = False
        self.how: str | None = None  # set once the job's process has ended
        try:
            self.server.send({"op": "run", "job": job}, (progress_w, output_w, go_r))
        except OSError:  # the server died since it was found alive (the OOM killer): the job's cases get a verdict
            self.server_gone()
        for fd in (progress_w, output_w, go_r):
            os.close(fd)
        self.fds = {progress_r: "progress", output_r: "output"}
        self.lines = Lines(worker.limits.progress_line_kb << 10, worker.limits.progress_mb << 20)
        self.hoard = worker.watch_hoard()
        self.hoarded = False  # its uid held more than tmp_mb in the shared temporary folders
        self.finished = False  # the child said it ran every case and is ending

    def events(self, deadline: Callable[[], float]) -> Iterator[dict | Garbled | None]:
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
                if fd in self.fds:  # else drain() read it to its end meanwhile (a child killed as a case started)
                    yield from self.read(fd)

    def read(self, fd: int) -> Iterator[dict | Garbled]:
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

    def go(self) -> None:
        """Tell the child, which said it has imported the submission, that its cases' inputs are written now."""
        with contextlib.suppress(OSError):  # a child already gone: its cases fail as it ended
            os.write(self.go_w, b"\n")

    def hear(self) -> None:
        message = self.server.receive(0)
        if message is None:
            return
        if message.get("gone"):
            self.server_gone()
        elif message.get("ended") == self.id:
            self.how = message.get("how", "ended")

    def server_gone(self) -> None:
        """The grading server ended under the job: the job's fault (its memory, as the OOM killer chose), unless a
        stop signal from outside ended it (stopped_from_outside)."""
        self.stopped_from_outside(wait=2.0)
        self.how = self.how or "was stopped with the grading server"

    def stopped_from_outside(self, wait: float) -> bool:
        """Whether a stop signal from outside ended the grading server (waiting up to `wait` for it to end), which
        then stops the grading as the grader's own would: Slurm's `scancel` signals every process of the job at
        once, the job's and the server's before the grader's, maybe. A job of a uid of its own cannot signal the
        server; where the job has the grader's uid it could, and its end is charged to it as before."""
        stopped = self.server.stop_signal(wait) if self.worker.uid is not None else None
        if stopped is not None:
            request_stop(f"{stopped} to the grading server")
        return stopped is not None

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
        if self.go_w is not None:
            os.close(self.go_w)
            self.go_w = None

    def wait_ended(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.how is None and time.monotonic() < deadline:
            self.hear() if select.select([self.server.sock], [], [], 0.2)[0] else None


@cache
def child_module():
    """child.py, loaded by path as the server loads it (never part of `cs_basics`): its grouping of cases."""
    spec = importlib.util.spec_from_file_location("_grading_child", JOB / "child.py")
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

    def events(self, deadline: Callable[[], float]) -> Iterator[dict | Garbled | None]:
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
                yield from self.lines.feed(data)
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
