"""A case's time limit, counted in the time the case had: its wall time, less the time the job's threads waited for
a core that other work held. On a loaded machine (a course's batch beside other work, a container given half a
core) a case that needs 3 s of CPU may take 30 s of wall time; it had 3 s, and a correct submission loses no
point for the machine's load. An endless loop and code that waits (a sleep, a lock) are charged every second,
as before. Code kept from a core that long, by the machine or by its own threads outnumbering the cores, is
stopped once CASE_WALL_TIMES its limit has passed.

The wait is the grader's own reading (Worker.seconds_waiting_for_a_core: the run queue's delay of the job uid's
threads, in /proc), never what the job says; a thread that ended takes its wait out of the sum, which only
charges the case more. Where the grader cannot read it (no uid of the job's own, macOS, Windows), the limit is
wall time. It is read only once a case has run for LOOK_AFTER seconds: the cases that end sooner (nearly all)
cost nothing."""

from __future__ import annotations

from collections.abc import Callable

LOOK_AFTER = 0.25  # a case's first reading of the job's wait, in seconds after it started: what it had until then
CASE_WALL_TIMES = 3  # a case is stopped once this many times its limit has passed, whatever it waited for
LEAST_WAIT = 0.05  # the shortest wait between two readings (a case just under its limit)


class CaseClock:
    """One case's clock: `first_look()` is when to look first; `look(now)` says when to look again, or None once
    the case is over its limit (`kept_waiting` then says it was the wall's bound: it waited for a core)."""

    def __init__(self, limit: float, started: float, seconds_waiting: Callable[[], float | None]):
        self.limit, self.started, self.seconds_waiting = limit, started, seconds_waiting
        self.mark: tuple[float, float] | None = None  # (wall seconds, the job's wait for a core) at the first reading
        self.had = 0.0  # the time the case had so far
        self.kept_waiting = False  # stopped at the wall's bound (CASE_WALL_TIMES), not at its limit

    def first_look(self) -> float:
        return self.started + min(LOOK_AFTER, self.limit)

    def look(self, now: float) -> float | None:
        wall = now - self.started
        self.had = self.time_had(wall)
        if wall >= self.limit * CASE_WALL_TIMES:
            self.kept_waiting = self.had < self.limit
            return None
        if self.had >= self.limit:
            return None
        # the earliest the case can reach its limit: it has at most one second a second
        return min(now + max(self.limit - self.had, LEAST_WAIT), self.started + self.limit * CASE_WALL_TIMES)

    def time_had(self, wall: float) -> float:
        """The wall time up to the first reading (every second of it counted: its wait has no baseline), then each
        second but those the job waited for a core (threads side by side may wait more than the wall: none then).
        Without a reading: the wall time."""
        waiting = self.seconds_waiting()
        if waiting is None:
            return wall
        if self.mark is None:
            self.mark = (wall, waiting)
        since = wall - self.mark[0]
        return self.mark[0] + min(max(since - (waiting - self.mark[1]), 0.0), since)
