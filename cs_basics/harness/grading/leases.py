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
from pathlib import Path

from cs_basics.harness.grading.stopping import STOP, StaffError, stop_reason

UID_BASE, UID_COUNT = 61000, 4000  # the jobs' uids when the grader is root: no login, one per worker

UIDS_ENV = "CS_BASICS_JOB_UIDS"  # "FIRST-LAST": another range of jobs' uids (the tests narrow it to force collisions)

LEASE_PREFIX = "cs-basics-uid-"  # a worker's uid is leased by binding the abstract Unix socket of this name + uid

LEASE_WAIT_SECONDS = 600.0  # how long a worker waits for a uid when other workers hold every one


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


KILL_ROUNDS = 100  # kill(-1) again until none is left: 100 rounds 10 ms apart


def kill_uid(uid: int) -> bool:
    """Every process of `uid`, wherever it runs: `kill(-1, SIGKILL)` sent as that uid, again until /proc shows
    none left (the kernel signals them all in one pass, so forking faster cannot outrun it). Whether none is
    left. Where util-linux's setpriv and a `kill` program are installed, they take the uid (subprocess may vfork
    them: no copy of the grader); elsewhere (debian:bookworm-slim has no `kill`) a fork of the grader takes it."""
    setpriv, kill = shutil.which("setpriv"), shutil.which("kill")
    if not (setpriv and kill):
        return any(kill_as(uid) for _ in range(3))  # 3 tries: a process of the uid may kill the killer
    for _ in range(KILL_ROUNDS):
        done = subprocess.run([setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", kill, "-9", "-1"],
                              capture_output=True)  # fmt: skip
        if done.returncode != 0 and not processes_of(uid):  # it found none to signal, and none is left
            return True
        time.sleep(0.01)
    return False


def kill_as(uid: int) -> bool:
    """`kill(-1, SIGKILL)` as `uid`, from a fork of this process that takes the uid, until it finds none to
    signal; whether /proc then shows none left. No program is run: only system calls."""
    pid = os.fork()
    if pid == 0:  # only system calls here: the grader's threads are gone in the fork, their locks may be held
        found_none = False
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for _ in range(KILL_ROUNDS):
                try:
                    os.kill(-1, signal.SIGKILL)  # every process this uid may signal, but this one
                except ProcessLookupError:
                    found_none = True
                    break
                time.sleep(0.01)
        finally:
            os._exit(0 if found_none else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0 and not processes_of(uid)
