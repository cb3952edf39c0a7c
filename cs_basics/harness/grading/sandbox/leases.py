"""The jobs' uids: one leased to each worker for its life (no other grader on the machine takes it), the
processes that run as it, and killing every one of them."""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import signal
import socket
import subprocess
import time

from cs_basics.harness.grading.sandbox.stopping import STOP, StaffError, stop_reason

UID_BASE, UID_COUNT = 61000, 4000  # the jobs' uids when the grader is root: no login, one per worker

UIDS_ENV = "CS_BASICS_JOB_UIDS"  # "FIRST-LAST": another range of jobs' uids (the tests narrow it to force collisions)

LEASE_PREFIX = "cs-basics-uid-"  # a worker's uid is leased by binding the abstract Unix socket of this name + uid

LEASE_WAIT_SECONDS = 600.0  # how long a worker waits for a uid when other workers hold every one


def process_uids() -> dict[int, int]:
    """pid -> uid of every live process (zombies, which only wait to be reaped, left out)."""
    return {pid: uid for pid, uid in owners().items() if not zombie(pid)}


def owners() -> dict[int, int]:
    """pid -> uid of every process, zombies too: the owner of /proc/PID, its effective uid (kept for every process,
    dumpable or not: proc(5)), read without reading a file of /proc."""
    found = {}
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    found[int(entry.name)] = entry.stat().st_uid
    return found


def zombie(pid: int) -> bool:
    """Whether `pid` is a zombie (it only waits to be reaped) or gone. A process whose first thread ended while
    another runs on shows "Z" too (a submission's `pthread_exit` in its main thread): it is live while any of
    its threads is."""
    found = state(f"/proc/{pid}/stat")
    if found != b"Z":
        return found is None
    with contextlib.suppress(OSError):
        tasks = os.listdir(f"/proc/{pid}/task")
        return all(state(f"/proc/{pid}/task/{task}/stat") in (b"Z", b"X", None) for task in tasks)
    return True


def state(path: str) -> bytes | None:
    """The state letter of a /proc stat file (after the name, which may hold anything); None where it is gone."""
    try:
        with open(path, "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def processes_of(uid: int) -> list[int]:
    """The live processes of `uid`, from /proc: what kill(2) cannot say (see kill_uid)."""
    return [pid for pid, owner in owners().items() if owner == uid and not zombie(pid)]


def seconds_waiting_for_a_core(uid: int) -> float | None:
    """How long the threads of the processes of `uid` now in /proc have waited for a core, runnable but not running
    (the run queue's delay: /proc/PID/task/TID/schedstat's second field, in ns); None where the kernel does not
    keep it (no CONFIG_SCHED_INFO). A thread that ended takes its own out of the sum."""
    waited, found = 0, False
    for pid, owner in owners().items():
        if owner != uid:
            continue
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{pid}/task"):
                with (
                    contextlib.suppress(OSError, IndexError, ValueError),
                    open(f"/proc/{pid}/task/{task}/schedstat", "rb") as stat,
                ):
                    waited += int(stat.read().split()[1])
                    found = True
    if not found and not os.path.exists("/proc/self/schedstat"):
        return None
    return waited / 1e9


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


KILL_SECONDS = 1.0  # how long a process that is not dying may outlast the kills before kill_uid gives up
# how long kill_uid waits for processes that are dying (SIGKILL received, or exiting) but not gone: one killed while
# the kernel holds it (a read from a busy disk, a frozen cgroup) ends only once that is over. Taken for a process that
# "could not be ended", it fails every hidden case of a correct submission (CI's lab once saw the reference lose
# exactly its five hidden cases in a job of 33 s, where it takes 10 to 22 s: the fit found, not a proof)
DYING_SECONDS = 30.0
KILL_AGAIN = 20  # rounds, 5 ms apart, after which a process still there is signalled again
PF_EXITING = 0x4  # /proc/PID/stat's flags: the process is in the kernel's exit path
SIGKILL_BIT = 1 << (signal.SIGKILL - 1)  # in /proc/PID/status's pending masks


def kill_uid(uid: int) -> bool:
    """Every process of `uid`, wherever it runs, gone; whether none is left. /proc says which are left, never kill's
    answer: `kill(-1)` from an unprivileged uid fails only where no process exists but the caller and init, and
    counts those it may not signal as found. None left: one look at /proc, nothing started. Else `kill(-1, SIGKILL)`
    as that uid (the kernel signals them all in one pass, so forking faster cannot outrun it), again whenever /proc
    shows a process the last pass may have missed, until none is left: for KILL_SECONDS, and for DYING_SECONDS while
    every process left is dying (it never runs its code again, but is not gone yet)."""
    signalled: set[int] = set()
    start, round_ = time.monotonic(), 0
    while True:
        left = set(processes_of(uid))
        if not left:
            return True
        waited, again = time.monotonic() - start, round_ % KILL_AGAIN == KILL_AGAIN - 1
        past = waited >= DYING_SECONDS or STOP.is_set()
        if waited >= KILL_SECONDS and (past or (again and not all(dying(pid, uid) for pid in left))):
            return False  # what is dying is read every KILL_AGAIN rounds: a thousand threads cost no more
        if not left <= signalled or again:
            signal_all_as(uid)
            signalled = left
        time.sleep(0.005)
        round_ += 1


def dying(pid: int, uid: int | None = None) -> bool:
    """Whether `pid` will never run its own code again: each of its threads has SIGKILL pending or is in the exit
    path (or the process is gone, or its pid is now another uid's). What it does then is the kernel's: it ends once
    a wait in the kernel is over."""
    try:
        if uid is not None and os.stat(f"/proc/{pid}").st_uid != uid:
            return True  # gone, and its pid taken again since /proc listed it
        return all(task_dying(f"/proc/{pid}/task/{task}") for task in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return True  # gone meanwhile


def task_dying(task: str) -> bool:
    try:
        with open(f"{task}/stat", "rb") as stat:
            flags = int(stat.read().rsplit(b")", 1)[1].split()[6])  # after the name: state, ppid, …, flags
        if flags & PF_EXITING:
            return True
        with open(f"{task}/status", "rb") as status:
            pending = [line.split()[1] for line in status if line.startswith((b"SigPnd:", b"ShdPnd:"))]
        return any(int(mask, 16) & SIGKILL_BIT for mask in pending)
    except (OSError, IndexError, ValueError):
        return True  # gone meanwhile


def signal_all_as(uid: int) -> None:
    """`kill(-1, SIGKILL)` once, as `uid`: every process it may signal. Where util-linux's setpriv is installed it
    takes the uid and the shell's own `kill` signals (subprocess may vfork them: no copy of the grader, and no kill
    program is needed: debian:bookworm-slim has none); elsewhere a fork of the grader takes it (kill_as)."""
    setpriv, shell = shutil.which("setpriv"), "/bin/sh"
    if setpriv is None or not os.access(shell, os.X_OK):
        kill_as(uid)
        return
    subprocess.run([setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", shell, "-c", "kill -9 -1"],
                   capture_output=True)  # fmt: skip


def kill_as(uid: int) -> None:
    """`kill(-1, SIGKILL)` once as `uid`, from a fork of this process that takes the uid. No program is run: only
    system calls (the grader's threads are gone in the fork, their locks may be held)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)  # every process this uid may signal, but this one
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
