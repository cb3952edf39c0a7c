"""The run of one submission's cases: children one after another until each case has a run, the public
phase before the hidden one, the outputs read back once every process of the job is gone."""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cs_basics.harness.cgroup import oom_kills
from cs_basics.harness.grading.pipeline.caseclock import CASE_WALL_TIMES, CaseClock
from cs_basics.harness.grading.pipeline.protocol import STAFF_ERROR, Protocol
from cs_basics.harness.grading.sandbox.attempts import ChildLog, child_module
from cs_basics.harness.grading.sandbox.limits import Limits, killed_for_memory, out_of_memory
from cs_basics.harness.grading.sandbox.litter import remove_tree
from cs_basics.harness.grading.sandbox.stopping import STOP, StaffError, stop_reason
from cs_basics.harness.portable import open_unfollowed
from cs_basics.harness.rule.evidence import Received

if TYPE_CHECKING:
    import torch

    from cs_basics.harness.grading.sandbox.worker import Worker
    from cs_basics.harness.rule.sightings import Record
# torch, and what imports it, only where a job's results are read: `cs-basics grade` starts the grading server
# (which imports torch) before it imports torch itself, so that the two imports run side by side

OUTPUT_FILE_LIMIT = 16 << 20  # the largest outputs file read back

UNREPORTED = "your code's result for this case never reached the grader (a line of its progress channel was lost)"


@dataclass
class CaseRun:
    outputs: dict | None = None
    error: str | None = None  # what went wrong, for the student
    seconds: float = 0.0
    record: Record | None = None  # the forbidden operators the case ran, as the child saw them
    printed: str = ""  # a hidden case's: what the code printed while it ran (not in the submission's output)


def run_once(worker: Worker, job: dict, cases: list[str], state: RunState) -> tuple[list[str], bool]:
    """One child over `cases`; fills `state.runs` for the cases it reached. Returns the unreached ones,
    and whether a fresh child should take them (not after an import failure, the total limit or a stop).
    Every line the child sends is checked against the protocol first (protocol.py): one that breaks it costs
    the problem it is charged to and is not acted on."""
    limits = worker.limits
    kills, job_kills = oom_kills(), worker.oom_kills()
    groups = [group for _, group in child_module().cases_by_rule(job | {"cases": cases})]  # the child's order
    protocol = Protocol(groups)
    if worker.spawns:  # a fresh Python per group has no way to wait for its inputs: they are written first
        state.hand_inputs(cases, Path(job["dir"]))
    attempt = worker.attempt(job | {"cases": cases}, state.log_for(cases[0]))
    current, started, clock = None, time.monotonic(), None
    deadline = min(started + limits.import_seconds, state.stop_at)
    remaining = list(cases)
    try:
        for event in attempt.events(lambda: deadline):  # noqa: B023 (late binding wanted: the deadline moves)
            if event is None and attempt.hoarded:
                return state.hoarded(remaining, current, attempt.hoard.limit >> 20)
            if event is None and clock is not None and not STOP.is_set() and time.monotonic() < state.stop_at:
                later = clock.look(time.monotonic())  # the case's own limit: the time it had (caseclock.py)
                if later is not None:
                    deadline = min(later, state.stop_at)
                    continue
            if event is None:  # a limit passed, or the grader is stopping
                return state.out_of_time(remaining, current, started, clock)
            wrong, act = protocol.check(event)
            if wrong is not None:
                state.tamper(protocol.blamed, wrong)
            if not act:
                continue
            kind, case = event.get("event"), event.get("case")
            if kind == STAFF_ERROR and state.hidden:  # every check for the staff passed before the public cases:
                why = f"the process running your code stopped: {event.get('message', '')}"  # this may hold hidden data
                state.halt(remaining, why)
                return [], False
            if kind == STAFF_ERROR:  # before any process of the job was armed: no byte of the submission ran
                raise StaffError(str(event.get("message", "")))
            if kind == "import_error":
                state.halt(remaining, f"your code failed to import:\n{event.get('message', '')}")
                return [], False
            if kind == "evidence":  # the rule's evidence, sent as it was seen (rule/evidence.py)
                state.evidence(event, cases)
            elif kind == "armed":
                deadline = min(time.monotonic() + limits.import_seconds, state.stop_at)
            elif kind == "ready":
                deadline = state.stop_at
                if not worker.spawns:  # the submission is imported: only now its group's inputs exist
                    state.hand_inputs(protocol.group_cases(), Path(job["dir"]))
                    attempt.go()
            elif kind == "start" and case in remaining and case != current:  # a repeated one (a twin the code forked
                # sends each line again: protocol.py charged it) starts nothing: each case runs and is reported once
                if current is not None:  # the case before never reported (a line lost: tampering, charged)
                    state.fail([current], UNREPORTED)
                    remaining.remove(current)
                attempt.drain()  # what was printed so far belongs to the case before (or to the import)
                attempt.log = state.log_for(case)
                current, started = case, time.monotonic()
                clock = CaseClock(state.seconds_for(case), started, worker.seconds_waiting_for_a_core)
                deadline = min(clock.first_look(), state.stop_at)
            elif kind in ("done", "error") and case == current:
                state.finish(case, event, time.monotonic() - started)
                remaining.remove(case)
                current, clock, deadline = None, None, state.stop_at
            elif kind == "finished" and protocol.group == len(groups) - 1:
                attempt.finished = True
                break
        attempt.end()
        flooded = attempt.lines.budget <= 0
        if flooded:
            why = (
                f"your code wrote over {limits.progress_mb} MiB to the grader's progress channel, "
                "which it stopped reading"
            )
            state.halt(remaining, why)
            return [], False
        # a job ends as a job told to stop does (status 0, or the signal's), the grading told to stop meanwhile: its
        # cases are not run, not failed (a moment's wait for the server, which the same signal ends a moment later)
        told_to_stop = attempt.how in (
            "exited with status 0",
            *(f"was killed by signal {s}" for s in ("SIGTERM", "SIGHUP")),
        )
        if remaining and (STOP.is_set() or (told_to_stop and attempt.stopped_from_outside(wait=0.5))):
            state.halt(remaining, f"not run: grading was stopped ({stop_reason()})")
            return [], False
        if remaining and current is not None:  # the channel closed mid-case: the interpreter died
            memory = worker.killed_for_memory(job_kills) or killed_for_memory(kills)  # its limit, else the machine's
            why = f"the Python process running your code {attempt.how} during this case{memory}"
            state.fail([current], why)
            state.cut_off(current, attempt.how)
            remaining.remove(current)
        elif remaining:
            state.halt(remaining, f"the Python process running your code {attempt.how} before it ran")
            return [], False
        return remaining, True
    finally:
        attempt.end()


def over_time(seconds: float) -> str:
    """A case stopped at its time limit, as every platform says it (a hidden case's entry too: no hidden data)."""
    return f"the case ran over its time limit of {seconds:g} s"


def why_over(clock: CaseClock | None) -> str:
    """What stopped a case: its limit (an endless loop, most often), or the wall's bound (caseclock.py)."""
    if clock is None or not clock.kept_waiting:
        return "(an endless loop?)"
    bound = clock.limit * CASE_WALL_TIMES
    return (
        f"(it did not return in {bound:g} s and had {clock.had:.1f} s of them: it waited for a core the rest of the "
        "time, as the machine was busy or your code ran more threads or processes than there are cores)"
    )


STUCK = "not run: your function did not return on cases"  # a case left out after its problem's ran out of time
OVER_TIME = re.compile(rf"the case ran over its time limit of [\d.e+]+ s|{STUCK} \S+(?: and \S+)*")


NO_HIDDEN_RUN = "so no hidden case may run (no hidden input was written)"
# the grader's sentence where a process of the public phase was left (Worker.processes_left): pids and a count only
HIDDEN_REFUSED = re.compile(
    r"not run: (?:a process of your code \(pid \d+, uid \d+(?:, still ending after it was killed)?\)"
    rf"|\d+ process\(es\) of your code) could not be ended, {re.escape(NO_HIDDEN_RUN)}",
    re.ASCII,
)


def hidden_refused(message: str) -> str | None:
    """The sentence of hidden cases the grader did not run because a process of the public phase was left, when
    `message` is one: it names no hidden data, and without it neither the student nor the staff could tell why a
    correct submission lost its hidden cases."""
    return message if HIDDEN_REFUSED.fullmatch(message) else None


def stopped_for_time(message: str) -> str | None:
    """The sentence of a case stopped at its time limit, or left out after its problem's cases were, when `message`
    (the grader's: the code's own messages start otherwise) is one; what it names is no hidden data."""
    found = OVER_TIME.match(message)
    return found.group(0) if found else None


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
    write_inputs: Callable[[list[str], Path], None] = lambda cases, folder: None  # cases' inputs into a job folder
    case_seconds: dict[str, float] = field(default_factory=dict)  # case id -> its own time limit (the course's)

    def seconds_for(self, case: str) -> float:
        """The case's time limit: the course's for it, else the grader's."""
        return self.case_seconds.get(case, self.limits.case_seconds)

    def hand_inputs(self, cases: list[str], folder: Path) -> None:
        """The inputs of `cases`, and no other (those of a group before are gone), in `folder`/inputs."""
        for old in (folder / "inputs").iterdir():
            remove_tree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
        self.write_inputs(cases, folder)

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

    def tamper(self, cases: list[str], what: str) -> None:
        """A line that broke the channel's protocol (protocol.py): tampering, charged to `cases`; a case that has
        no record of its own by the end gets one (collect_tampering)."""
        self.evidence({"event": "evidence", "kind": "tampering", "what": what, "cases": cases}, cases)

    def collect_tampering(self) -> None:
        """Every case charged with tampering has it in its record, whether or not it ran."""
        from cs_basics.harness.rule.evidence import merged
        from cs_basics.harness.rule.sightings import Record

        for case, lines in self.received.lines.items():
            tampering = [line for line in lines if line.get("kind") == "tampering"]
            run = self.runs.get(case)
            if tampering and run is not None and run.record is None:
                run.record = merged(Record(), tampering)

    def cut_off(self, case: str, how: str | None) -> None:
        """The child ended while sending the rule's evidence (rule/evidence.py): the case's record is not whole."""
        from cs_basics.harness.rule.evidence import LOST_STATUS, merged
        from cs_basics.harness.rule.sightings import Record

        if how == f"exited with status {LOST_STATUS}":
            self.runs[case].record = merged(Record(), self.received.evidence(case), complete=False)

    def finish(self, case: str, event: dict, seconds: float) -> None:
        from cs_basics.harness.rule.evidence import merged
        from cs_basics.harness.rule.sightings import Record

        record = merged(Record.from_json(event.get("record", {})), self.received.evidence(case))
        if event.get("event") == "done":
            self.runs[case] = CaseRun(outputs={}, seconds=seconds, record=record)  # read once the child is gone
        else:
            error = f"your code raised {event.get('message')}\n{event.get('traceback', '')}"
            if hungry := out_of_memory(str(event.get("message")), self.limits.memory_mb):
                error = f"{hungry}\n{error}"
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

    def out_of_time(
        self, remaining: list[str], current: str | None, started: float, clock: CaseClock | None = None
    ) -> tuple[list[str], bool]:
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
        why = f"{over_time(self.seconds_for(current))} {why_over(clock)}"
        self.timeouts.setdefault(self.problems[current], []).append(current)
        self.runs[current] = CaseRun(error=why, seconds=time.monotonic() - started)
        return [c for c in remaining if c != current], True

    def skip_stuck_problems(self, cases: list[str]) -> list[str]:
        """Cases of a problem whose function already failed to return `timeouts_per_problem` times are not run."""
        left = []
        for case in cases:
            stuck = self.timeouts.get(self.problems[case], [])
            if len(stuck) >= self.limits.timeouts_per_problem:
                self.runs[case] = CaseRun(error=f"{STUCK} {' and '.join(stuck)}")
            else:
                left.append(case)
        return left


def run_cases(
    worker: Worker,
    job: dict,
    cases: list[str],
    problems: dict[str, str],
    hidden: Collection[str] = (),
    hand_over_hidden: Callable[[], dict] = dict,
    write_inputs: Callable[[list[str], Path], None] = lambda cases, folder: None,
) -> tuple[dict[str, CaseRun], str]:
    """Run every public case, then every hidden case, in children; read their outputs only once every child is
    gone. A child gets its cases' inputs (`write_inputs` into a job folder) only once it has imported the
    submission. The hidden phase starts only once no process of the public phase is left, in the folder
    `hand_over_hidden` makes then (what it returns replaces the job's settings: its folder, its case modules).
    Returns the runs and what the children printed before the first hidden input existed."""
    limits = worker.limits
    state = RunState(problems, limits, time.monotonic() + limits.total_seconds, ChildLog(limits.output_kb * 1024))
    state.write_inputs = write_inputs
    state.case_seconds = dict(job.get("case_seconds", {}))
    folders = [Path(job["dir"])]
    try:
        run_phase(worker, job, [c for c in cases if c not in hidden], state)
        later = [c for c in cases if c in hidden]
        if later:
            state.hidden = True
            left = worker.processes_left()
            if state.halted is not None:  # an import failure or a limit: the same for the hidden cases
                state.fail(later, state.halted)
            elif left:  # fail closed: a process of the public phase could read what the hidden phase is given
                state.fail(later, f"not run: {left}, {NO_HIDDEN_RUN}")
            else:
                hidden_job = job | hand_over_hidden()
                folders.append(Path(hidden_job["dir"]))
                run_phase(worker, hidden_job, later, state)
    finally:
        worker.clean_up(*folders)
    state.collect_tampering()
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
    with contextlib.suppress(OSError):  # read once: where the work folder is in memory (/dev/shm), what it held
        path.unlink()  # is no longer counted against the job's memory in the phases after
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
