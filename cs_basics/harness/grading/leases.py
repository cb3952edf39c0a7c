"""The jobs' uids: one leased to each worker for its life (no other grader on the machine takes it), the
processes that run as it, and killing every one of them."""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
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
