"""The static scan's process: where scan.scan reads a submission's code, bounded, away from the grader.

Whatever the student's code holds (huge files, deep nesting), the grading process parses none of it: the
scan runs in a process of its own, its address space limited (RLIMIT_AS), its recursion and thread stack
set for the visitors, killed past its time limit; a process killed by a signal (a stack overflow) or out of
memory makes the code Unreadable, a failed scan (a bug) is a RuntimeError for the staff.

Two ways to get that process, with the same bounds and the same verdicts (scan_verdict):
- a fresh Python per scan (`start_scan`, running scan.main): the students' pytest run (one scan a session),
  and the grader where it cannot fork (Windows, macOS: portable.fork_server_runs);
- a fork of a warm process (`Scanner`, one per grading worker, running `serve`): a fresh Python spends more
  CPU starting and importing the scan (ast, pathlib, dataclasses, pickle) than scanning. The warm process
  imports the scan once, then for each job forks a child that applies the bounds to itself and scans
  (scan.bounded_scan, as scan.main does), and relays what the child wrote and how it ended. Each scan runs
  in a fork of the warm process as it was before any scan, so nothing of one submission's scan (its syntax
  trees, its memory limit) reaches the next; the warm process never parses a student's file itself.
  Its input: each job as its length (JOB) and its JSON. Its output for each: REPLY (the child's exit code,
  negative for the signal that ended it, as subprocess gives it; the lengths of its stdout and stderr),
  then the child's stdout (the pickled result) and the end of its stderr. It ends when its stdin closes
  (the grader closed it, or ended), at once, with its child; past the time limit the grader kills its
  session (it and its child).

Imports the scan and the standard library only (no torch: the grader starts workers before it imports torch).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

from cs_basics.harness.rule.scan import bounded_scan
from cs_basics.harness.rule.syntax import STACK_BYTES, Unreadable

SCAN_MEMORY = 1 << 30  # the scan's process: real code of 5 MiB (the largest graded) parses in about 250 MiB
SCAN_SECONDS = 60.0  # real code of 5 MiB parses in about 5 s on a loaded 2-core machine
WINDOWS_CRASH = 0xC0000000  # exit statuses from here up are NTSTATUS codes of a process Windows ended (a crash)
HARNESS_ROOT = Path(__file__).resolve().parents[3]  # the grader's own cs_basics (never the student's) is below
JOB = struct.Struct(">I")  # the warm process's input: each job's length, then its JSON
REPLY = struct.Struct(">iII")  # its output: the child's exit code, the lengths of its stdout and stderr
STDERR_KEPT = 64 << 10  # the end of a failed scan's stderr: its traceback
PR_SET_PDEATHSIG = 1


def scan_bounded(
    job: dict, memory: int = SCAN_MEMORY, seconds: float = SCAN_SECONDS, scanner: Scanner | None = None
) -> dict:
    """scan.scan(job) in a process of its own (no torch, no threads of the grader's): a fork of `scanner`'s warm
    process, else a fresh Python; its address space limited to `memory` and its time to `seconds`: whatever
    the student's code holds, the grading process parses none of it. Raises Unreadable when the code cannot
    be read within these bounds."""
    if scanner is not None:
        return scanner.scan(job, memory, seconds)
    return scan_result(*start_scan(job, memory), seconds)


def harness_python(statement: str) -> list[str]:
    """A fresh, isolated Python that runs `statement` with the grader's own cs_basics importable."""
    return [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(HARNESS_ROOT)!r}); {statement}"]


def scan_request(job: dict, memory: int) -> bytes:
    """The job as the scan reads it: its address space includes the scan thread's stack."""
    return json.dumps(job | {"memory": memory + STACK_BYTES}).encode()


def start_scan(job: dict, memory: int = SCAN_MEMORY) -> tuple[subprocess.Popen, bytes]:
    """The scan's process, started, and the job it is to read on its standard input."""
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    process = subprocess.Popen(harness_python("from cs_basics.harness.rule.scan import main; main()"), cwd="/", **pipes)
    return process, scan_request(job, memory)


def overtime(seconds: float) -> Unreadable:
    return Unreadable(f"reading it took the grader over {seconds:.0f} s")


def scan_result(process: subprocess.Popen, job: bytes, seconds: float = SCAN_SECONDS) -> dict:
    """What the scan's process found, once it ended (killed past `seconds`)."""
    try:
        stdout, stderr = process.communicate(job, timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise overtime(seconds) from None
    return scan_verdict(process.returncode, stdout, stderr)


def scan_verdict(returncode: int, stdout: bytes, stderr: bytes) -> dict:
    """What a scan's process found, from how it ended (its exit code, negative for a signal) and what it wrote."""
    if returncode < 0:  # killed (a stack overflow, say): the code made the grader's reader fail
        raise Unreadable(f"the grader's reader of it was killed by signal {-returncode}")
    if returncode >= WINDOWS_CRASH:  # the same on Windows: an exception code (0xC00000FD, a stack overflow)
        raise Unreadable(f"the grader's reader of it crashed (exception 0x{returncode:X})")
    if returncode != 0:
        raise RuntimeError(f"the grader's scan failed:\n{stderr.decode(errors='replace')[-4000:]}")
    result = pickle.loads(stdout)
    if "unreadable" in result:
        raise Unreadable(result["unreadable"])
    return result["found"]


class Scanner:
    """A grading worker's warm scan process (`serve`), started at its first scan: each scan in a fresh
    fork of it, within the bounds a fresh Python's scan has, for a few milliseconds of CPU instead of a
    Python's start and imports. Only where the grader forks (portable.fork_server_runs); one scan at a time."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None

    def scan(self, job: dict, memory: int = SCAN_MEMORY, seconds: float = SCAN_SECONDS) -> dict:
        deadline = time.monotonic() + seconds
        request = scan_request(job, memory)
        try:
            self.send(JOB.pack(len(request)) + request)
        except OSError:  # it ended since the last scan (killed from outside): a new one takes the job
            self.close()
            self.send(JOB.pack(len(request)) + request)
        try:
            head = self.receive(REPLY.size, deadline)
            returncode, out, err = REPLY.unpack(head)
            body = self.receive(out + err, deadline)
        except TimeoutError:
            self.close()  # the warm process and its child: the next scan starts a new one
            raise overtime(seconds) from None
        except EOFError:
            ended = self.close()
            raise RuntimeError(f"the grader's scan failed: its warm process ended (exit code {ended})") from None
        return scan_verdict(returncode, body[:out], body[out:])

    def send(self, data: bytes) -> None:
        if self.process is None:
            pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
            command = harness_python("from cs_basics.harness.rule.scanprocess import serve; serve()")
            self.process = subprocess.Popen(command, cwd="/", start_new_session=True, **pipes)
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def receive(self, size: int, deadline: float) -> bytes:
        """`size` bytes of the warm process's reply, read by `deadline` (TimeoutError), EOFError if it ended."""
        assert self.process is not None and self.process.stdout is not None
        fd, data = self.process.stdout.fileno(), bytearray()
        while len(data) < size:
            if not select.select([fd], [], [], max(deadline - time.monotonic(), 0))[0]:
                raise TimeoutError
            chunk = os.read(fd, min(size - len(data), 1 << 20))
            if not chunk:
                raise EOFError
            data += chunk
        return bytes(data)

    def close(self) -> int | None:
        """The warm process and any child of it, ended; how the process ended (None: none was started)."""
        if self.process is None:
            return None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # its session: it and the child scanning
        for pipe in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        ended, self.process = self.process.wait(), None
        return ended


# ---------------------------------------------------------------- the warm process (Scanner starts it)


class Inbox:
    """This process's stdin, read as frames; `eof` once the grader closed it."""

    def __init__(self, fd: int = 0):
        self.fd, self.pending, self.eof = fd, bytearray(), False

    def fill(self) -> None:
        chunk = os.read(self.fd, 1 << 16)
        self.eof = not chunk
        self.pending += chunk

    def take(self, size: int) -> bytes | None:
        while len(self.pending) < size and not self.eof:
            self.fill()
        if len(self.pending) < size:
            return None
        taken = bytes(self.pending[:size])
        del self.pending[:size]
        return taken

    def job(self) -> dict | None:
        head = self.take(JOB.size)
        body = None if head is None else self.take(JOB.unpack(head)[0])
        return None if body is None else json.loads(body)


def serve() -> None:
    inbox = Inbox()
    libc = ctypes.CDLL(None, use_errno=True)  # loaded once, here (Linux: a worker starts this where it forks)
    while (job := inbox.job()) is not None:
        reply = scan_in_child(job, inbox, libc)
        if reply is None:  # the grader is gone
            return
        view = memoryview(reply)
        while view:
            view = view[os.write(1, view) :]


def scan_in_child(job: dict, inbox: Inbox, libc: ctypes.CDLL) -> bytes | None:
    """REPLY and what a child scanning `job` wrote; None (the child killed) if stdin closed meanwhile."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    server = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        child(job, out_w, err_w, server, libc)
    os.close(out_w)
    os.close(err_w)
    read = {out_r: bytearray(), err_r: bytearray()}
    open_fds = [out_r, err_r]
    while open_fds:
        ready = select.select([*open_fds, *([] if inbox.eof else [inbox.fd])], [], [])[0]
        if inbox.fd in ready:
            inbox.fill()  # the grader sends the next job only after this reply: this is its end
            if inbox.eof:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return None
        for fd in (fd for fd in ready if fd in read):
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                open_fds.remove(fd)
                os.close(fd)
            read[fd] += chunk
            if fd == err_r:
                del read[fd][:-STDERR_KEPT]
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return REPLY.pack(code, len(read[out_r]), len(read[err_r])) + read[out_r] + read[err_r]


def child(job: dict, out: int, err: int, server: int, libc: ctypes.CDLL) -> NoReturn:
    """The scan in this fork, within the bounds a fresh Python's scan.main sets; its result on `out`."""
    code = 1
    try:
        die_with(server, libc)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        sys.stdout.buffer.write(pickle.dumps(bounded_scan(job)))
        sys.stdout.flush()
        code = 0
    except BaseException:
        import traceback  # only a failed scan pays for it

        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


def die_with(server: int, libc: ctypes.CDLL) -> None:
    """SIGKILL this child when the warm process ends (the grader killed it past the scan's time limit)."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != server:  # it ended before the signal was set
        os._exit(1)
