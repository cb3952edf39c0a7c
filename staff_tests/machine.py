"""The machine as the suite's parallel workers share it: a test marked `alone` runs while no other does.

Under pytest-xdist every staff test holds a share of the machine while it runs (staff_tests/conftest.py),
and so does a set-up that changes the machine for longer than one test (the Slurm cluster's apt-get); a
test marked `alone` waits until no share is held and keeps the others waiting until it ends. It is for a
test that watches the whole machine (`find / -newer`): what the other tests write meanwhile is not the
grader's. Two flock(2)s in the run's shared temporary folder: the turnstile lets a waiting `alone` test in
before shares that come after it (else back-to-back tests on the other workers would keep it out), and a
share already held by this process is taken again without waiting (a test inside the Slurm module).
Outside xdist one process runs one test at a time, and nothing is locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


class Machine:
    def __init__(self, folder: Path | None):
        """`folder`: the temporary folder every worker of this run sees; None outside xdist."""
        self.turnstile = self.main = None
        if folder is not None:
            self.turnstile = os.open(folder / "machine.turnstile", os.O_RDWR | os.O_CREAT, 0o600)
            self.main = os.open(folder / "machine.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self.shares = 0  # shares this process holds (nested: a module's set-up, then its tests)

    @contextlib.contextmanager
    def share(self) -> Iterator[None]:
        if self.main is not None and self.shares == 0:
            fcntl.flock(self.turnstile, fcntl.LOCK_EX)
            fcntl.flock(self.main, fcntl.LOCK_SH)
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        self.shares += 1
        try:
            yield
        finally:
            self.shares -= 1
            if self.main is not None and self.shares == 0:
                fcntl.flock(self.main, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        if self.shares:
            raise RuntimeError("this worker holds a share of the machine; a test that runs alone cannot wait for it")
        if self.main is None:
            yield
            return
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.main, fcntl.LOCK_EX)
        finally:
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self.main, fcntl.LOCK_UN)
