"""Run a submission's code in a child process, under limits, and collect what it computed.

The grader never imports student code. It stages the submission in a temporary folder,
starts `child.py` there with resource limits (memory, file size, processes, no stdin) and,
when it runs as root, an unprivileged uid of its own. It reads the child's progress from a
pipe, enforces a wall-clock limit per case and per submission, keeps a bounded prefix of
the child's output, and kills every process the child started (the grader is a child
subreaper, so even daemons that start their own session come back to it) before it reads
any result. A case that hangs or kills the interpreter fails alone: a fresh child takes
the remaining cases.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load

from cs_basics.harness.compare import Foreign
from cs_basics.harness.record import Record

CHILD = Path(__file__).with_name("child.py")
PR_SET_CHILD_SUBREAPER = 36
OUTPUT_FILE_LIMIT = 16 << 20  # the largest outputs file read back


@dataclass(frozen=True)
class Limits:
    case_seconds: float = 60.0
    import_seconds: float = 120.0  # starting the interpreter and importing torch and the submission
    total_seconds: float = 900.0
    memory_mb: int = 4096  # RLIMIT_DATA: torch imports in well under 1 GiB
    file_mb: int = 64  # the largest file the child may write
    output_kb: int = 64  # how much of the child's stdout and stderr is kept
    processes: int = 256  # RLIMIT_NPROC, when the child runs under its own uid


@dataclass
class Job:
    """Everything the child needs, all inside one staged folder."""

    root: Path  # the staging folder: code/, inputs/, out/, work/
    repo: Path  # the staff repository, kept off the child's import path
    adapters: str
    case_modules: list[str]
    student_packages: list[str]
    device: str
    uid: int | None = None  # run as this uid (the grader is root)
    rule: dict = field(default_factory=dict)  # what the child's record of operators looks for


@dataclass
class CaseRun:
    outputs: dict | None = None
    error: str | None = None  # what went wrong, for the student
    seconds: float = 0.0
    record: Record | None = None  # the forbidden operators the case ran, as the child saw them


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


def become_subreaper() -> None:
    """Orphans of the child (daemons included) are re-parented to us, where we can kill them."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def our_descendants() -> list[int]:
    """Processes whose parent is this process (after the child dies, its orphans are too)."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                found.append(int(entry.name))
    return found


def kill_everything(child: subprocess.Popen) -> None:
    """The child, its process group and every orphan it left, until none is left."""
    for _ in range(50):
        for pid in [child.pid, *our_descendants()]:
            for kill in (os.killpg, os.kill):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    kill(pid, signal.SIGKILL)
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            continue
        for pid in our_descendants():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if not our_descendants():
            return
        time.sleep(0.05)


def limit_resources(limits: Limits, own_uid: bool) -> None:
    """In the child, before exec: rlimits only (the uid is dropped later, after torch loads)."""
    if limits.memory_mb:
        size = limits.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_DATA, (size, size))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_mb << 20, limits.file_mb << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if own_uid:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))


def start_child(job: Job, cases: list[str], limits: Limits) -> tuple[subprocess.Popen, int]:
    read_end, write_end = os.pipe()
    settings = {
        "fd": write_end,
        "uid": job.uid,
        "code": str(job.root / "code"),
        "workdir": str(job.root / "work"),
        "repo": str(job.repo),
        "adapters": job.adapters,
        "case_modules": job.case_modules,
        "student_packages": job.student_packages,
        "device": job.device,
        "cases": cases,
        "rule": job.rule,
    }
    (job.root / "job.json").write_text(json.dumps(settings))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(job.root / "work"), "PYTHONHASHSEED": "0"}
    env |= {k: v for k, v in os.environ.items() if k.startswith(("CUDA_", "NVIDIA_")) or k == "LD_LIBRARY_PATH"}
    child = subprocess.Popen(
        [sys.executable, "-I", "-X", "utf8", str(CHILD), str(job.root)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=(write_end,),
        cwd=job.root / "work",
        env=env,
        start_new_session=True,
        preexec_fn=lambda: limit_resources(limits, job.uid is not None),
    )
    os.close(write_end)
    return child, read_end


def drain(stream, log: ChildLog) -> threading.Thread:
    def run() -> None:
        while chunk := stream.read1(65536):
            log.add(chunk)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def events(fd: int, deadline: Callable[[], float]) -> Iterator[dict | None]:
    """The child's JSON lines; None when `deadline()` passes first. Ends at end of file."""
    buffer = b""
    while True:
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            try:
                event = json.loads(line)
            except ValueError:
                continue  # not ours: something wrote to our pipe
            if isinstance(event, dict):
                yield event
        ready, _, _ = select.select([fd], [], [], max(deadline() - time.monotonic(), 0))
        if not ready:
            yield None
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        buffer += chunk


def how_it_ended(child: subprocess.Popen) -> str:
    code = child.poll()
    if code is None:
        return "was still running"
    if code < 0:
        return f"was killed by signal {signal.Signals(-code).name}"
    return f"exited with status {code}"


def run_once(job: Job, cases: list[str], limits: Limits, runs: dict[str, CaseRun], log: ChildLog, stop_at: float):
    """One child over `cases`; fills `runs` for the cases it reached. Returns the unreached ones,
    and whether a fresh child should take them (not after an import failure or the total limit)."""
    child, fd = start_child(job, cases, limits)
    reader = drain(child.stdout, log)
    current, started = None, time.monotonic()
    deadline = min(started + limits.import_seconds, stop_at)
    remaining = list(cases)
    try:
        for event in events(fd, lambda: deadline):  # noqa: B023 (late binding wanted: the deadline moves)
            if event is None:  # a limit passed
                total = time.monotonic() >= stop_at
                why = f"the submission's total time limit ({limits.total_seconds:.0f} s) ran out"
                if current is None:
                    why = why if total else f"importing the submission took over {limits.import_seconds:.0f} s"
                    for case in remaining:
                        runs[case] = CaseRun(error=why)
                    return [], False
                if not total:
                    why = f"the case ran over its time limit of {limits.case_seconds:.0f} s (an endless loop?)"
                runs[current] = CaseRun(error=why, seconds=time.monotonic() - started)
                remaining.remove(current)
                return remaining, not total
            kind, case = event.get("event"), event.get("case")
            if kind == "import_error":
                for name in remaining:
                    runs[name] = CaseRun(error=f"your code failed to import:\n{event.get('message', '')}")
                return [], False
            if kind == "start" and case in remaining:
                current, started = case, time.monotonic()
                deadline = min(started + limits.case_seconds, stop_at)
            elif kind in ("done", "error") and case == current:
                seconds = time.monotonic() - started
                record = Record.from_json(event.get("record", {}))
                if kind == "done":
                    runs[case] = CaseRun(outputs={}, seconds=seconds, record=record)  # read once the child is gone
                else:
                    error = f"your code raised {event.get('message')}\n{event.get('traceback', '')}"
                    runs[case] = CaseRun(error=error, record=record)
                remaining.remove(case)
                current = None
                deadline = stop_at
            elif kind == "finished":
                break
        if remaining and current is not None:  # the pipe closed mid-case: the interpreter died
            kill_everything(child)
            ended = how_it_ended(child)
            runs[current] = CaseRun(error=f"the Python process running your code {ended} during this case")
            remaining.remove(current)
        elif remaining:
            kill_everything(child)
            for name in remaining:
                runs[name] = CaseRun(error=f"the Python process running your code {how_it_ended(child)} before it ran")
            return [], False
        return remaining, True
    finally:
        kill_everything(child)
        os.close(fd)
        reader.join(timeout=5)


def run_cases(job: Job, cases: list[str], limits: Limits) -> tuple[dict[str, CaseRun], str]:
    """Run every case in children; read their outputs only once every child is gone."""
    become_subreaper()
    runs: dict[str, CaseRun] = {}
    log = ChildLog(limits.output_kb * 1024)
    stop_at = time.monotonic() + limits.total_seconds
    remaining, retry = list(cases), True
    while remaining and retry:
        remaining, retry = run_once(job, remaining, limits, runs, log, stop_at)
    for name in remaining:
        runs[name] = CaseRun(error="not run: an earlier failure stopped the submission's process")
    for name, run in runs.items():
        if run.error is None:
            run.outputs, run.error = read_outputs(job.root / "out" / f"{name}.safetensors")
    return runs, log.text()


def read_outputs(path: Path) -> tuple[dict | None, str | None]:
    """The child's outputs, rebuilt on their devices; never following links, never unbounded."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        return None, f"your code's outputs could not be read back ({err.strerror})"
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, "your code's outputs could not be read back (not a regular file)"
        data = f.read(OUTPUT_FILE_LIMIT + 1)
    if len(data) > OUTPUT_FILE_LIMIT:
        return None, f"your code's outputs are over {OUTPUT_FILE_LIMIT >> 20} MiB"
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
    if meta["kind"] == "tensor":
        return tensors[key].to(torch.device(meta["device"]))
    return Foreign(str(meta["describe"]), str(meta.get("sequence", "")))
