"""Why grading stops before its end: a stop signal from outside (SIGTERM, SIGINT, SIGHUP), which winds
grading down with its results still written, or a sandbox that cannot run the submission fairly (the staff's)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

STOP = threading.Event()  # set when the grader is told to stop (SIGTERM, SIGINT, SIGHUP)


class StaffError(Exception):
    """The sandbox cannot run the submission fairly (before any student code ran): the staff must act."""


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
