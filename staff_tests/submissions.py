"""Build student submissions in temporary folders and grade them, for the grading tests."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import shutil
import textwrap
from pathlib import Path

import torch

from cs_basics.harness.grading.pipeline.grade import Grade, GradingError, grade
from cs_basics.harness.grading.sandbox.bubblewrap import choose_sandbox
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.stopping import StaffError
from cs_basics.harness.grading.sandbox.worker import Worker

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONAL = Path("cs_basics/nn/functional.py")
# both functions start with `raise NotImplementedError`, as in the handout
STUBBED = {"    # BEGIN SOLUTION\n": "    raise NotImplementedError\n    # BEGIN SOLUTION\n"}


def submission(tmp: Path, append: str = "", replace: dict[str, str] | None = None, name: str = "student") -> Path:
    """A copy of the reference package, with `functional.py` edited: `replace` old->new, then `append`."""
    folder = tmp / name
    shutil.copytree(ROOT / "cs_basics", folder / "cs_basics", ignore=shutil.ignore_patterns("__pycache__"))
    path = folder / FUNCTIONAL
    text = path.read_text()
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text + "\n" + textwrap.dedent(append))
    return folder


def wrap_attention(body: str) -> str:
    """Append a scaled_dot_product_attention that runs `body` (which may return) before the reference."""
    return (
        "_reference_attention = scaled_dot_product_attention\n\n\n"
        "def scaled_dot_product_attention(Q, K, V, mask=None):\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
        + "\n    return _reference_attention(Q, K, V, mask)\n"
    )


def softmax_fails_if(found: str) -> str:
    """Code that makes the submission's softmax raise, naming `found`, where the variable `found` is not empty."""
    return f"""
_reference_softmax = softmax


def softmax(in_features, dim):
    if {found}:
        raise RuntimeError(f"found {{{found}}}")
    return _reference_softmax(in_features, dim)
"""


SPY = """
_found = []
for _path in {paths!r}:
    try:
        with open(_path, "rb") as _f:
            _found.append((_path, _f.read(64)))
    except OSError:
        pass
"""


# the workers `run` grades in, by sandbox and limits, the most recent last: a test process keeps a few, as a batch
# keeps its workers for one submission after another (a fresh one cost each test a grading server's start, its
# torch import, and the course's overlay: about 4 CPU seconds of the suite's, per grading)
SHARED_WORKERS: collections.OrderedDict[tuple[str, str | None, Limits], Worker] = collections.OrderedDict()
SHARED_AT_MOST = 3  # each holds a grading server (torch: about 300 MB) and a job uid's lease


def run(assignment, folder: Path, sandbox: str | None = None, **limits) -> Grade:
    """`folder` graded as `cs-basics grade` grades one submission of a batch: in a worker this test process keeps
    for the same sandbox and limits, whose earlier submissions (other tests') can reach nothing of this one, as
    in a course (the isolation between a batch's submissions, which the batteries check, is the product's)."""
    # the sandbox chosen now (a test may have changed what runs here), and as asked (the grade's notes say which)
    asked = Limits(**limits)
    # what the staff released is the grade's alone (the rule's holds), not the worker's: one worker serves both
    key = (choose_sandbox(sandbox), sandbox, dataclasses.replace(asked, released=()))
    worker = shared_worker(key)
    worker.limits = asked
    try:
        return grade(assignment, folder, torch.device("cpu"), worker=worker)
    except BaseException as err:  # a worker that failed is not kept (as grade() says a staff error of its own)
        SHARED_WORKERS.pop(key, None)
        worker.close()
        if isinstance(err, StaffError):
            raise GradingError(str(err)) from None
        raise


def shared_worker(key: tuple[str, str | None, Limits]) -> Worker:
    """The kept worker for (the sandbox, as asked, the limits), a new one where there is none; now the most recent."""
    worker = SHARED_WORKERS.pop(key, None) or Worker(key[1], key[2])
    SHARED_WORKERS[key] = worker
    while len(SHARED_WORKERS) > SHARED_AT_MOST:
        SHARED_WORKERS.popitem(last=False)[1].close()
    return worker


def close_shared_workers() -> None:
    """Every kept worker closed: its server ended, its uid's processes killed, its lease and folder given back."""
    while SHARED_WORKERS:
        SHARED_WORKERS.popitem()[1].close()


def scores(result: Grade) -> dict[str, float]:
    by_problem: dict[str, float] = {}
    for t in result.tests:
        by_problem[t.case.problem] = by_problem.get(t.case.problem, 0.0) + t.score
    return by_problem


def outputs_of(result: Grade, problem: str | None = None) -> list[str]:
    return [t.output for t in result.tests if problem in (None, t.case.problem)]


def said(data: dict, entry: dict) -> str:
    """What the grader said of a test as the staff read it in a Gradescope results file: a hidden case's entry says
    passed or failed only, its message is kept in `extra_data` (shown to nobody)."""
    kept = data.get("extra_data", {}).get("cs_basics", {}).get("hidden_messages", {})
    return kept.get(entry["name"], entry.get("output", ""))


def fingerprint(*folders: Path) -> dict[str, str]:
    """Every file's SHA-256 under the folders: the course's files, to compare before and after."""
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for folder in folders
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def keeps_memory(tmp: Path, mb: int = 300, name: str = "hungry", shared: bool = False) -> Path:
    """A submission whose attention keeps `mb` MiB more at each call (an inefficient honest one does the
    same): past a container's memory its problem must lose, and the grader still finish with a verdict.
    Its softmax is the reference's, and the attention's memory never reaches it: softmax must score.
    `shared`: in a shared mapping, written page by page, which RLIMIT_DATA does not count (only the
    container's limit does, and the kernel's OOM killer enforces it)."""
    if shared:
        body = (
            f"import mmap\nkept = mmap.mmap(-1, {mb} << 20)  # MAP_SHARED\n"
            "for page in range(0, len(kept), 4096):\n    kept[page] = 1\n_kept.append(kept)\n"
        )
    else:
        body = f"_kept.append(torch.ones({mb} << 18))  # {mb} MiB of float32, kept for good\n"
    return submission(tmp, "_kept = []\n\n\n" + wrap_attention(body), name=name)


def course_shipping_a_from_scratch_mistake(tmp: Path) -> Path:
    """A copy of this course whose tests/mistakes.py holds `sum_over_everything`'s code again, as before issue 37:
    a softmax from an exp over a sum, which a student reading the handout could copy."""
    from cs_basics.harness.course.handout import repository_files

    copy = tmp / "course"
    for rel in repository_files(ROOT):
        if rel.parts[0] not in ("examples", "benchmarks", "staff_tests"):
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, copy / rel)
    mistakes = copy / "tests" / "mistakes.py"
    text = mistakes.read_text()
    assert 'staff("sum_over_everything")' in text
    moved_back = "lambda x, dim: torch.exp(x - x.amax(dim, True)) / torch.exp(x - x.amax(dim, True)).sum()"
    mistakes.write_text(text.replace('staff("sum_over_everything")', moved_back))
    return copy


SHARED_MEMORY = """
import mmap, os
kept = []
if Q.dim() == 4 and Q.shape[2] % 3 == 0:  # memfds of 32 MiB each (RLIMIT_FSIZE bounds one), mapped shared
    for _ in range({mb} // 32):
        fd = os.memfd_create("kept")
        os.ftruncate(fd, 32 << 20)
        kept.append(mmap.mmap(fd, 32 << 20))
elif Q.dim() == 4 and Q.shape[2] % 3 == 1:  # /dev/zero mapped shared: shared memory too
    kept = [mmap.mmap(os.open("/dev/zero", os.O_RDWR), {mb} << 20)]
elif Q.dim() == 4:  # shared anonymous memory (MAP_SHARED | MAP_ANONYMOUS)
    kept = [mmap.mmap(-1, {mb} << 20)]
for mapping in kept:
    for page in range(0, len(mapping), 4096):
        mapping[page] = 1
"""


def maps_shared_memory(tmp: Path, mb: int = 1536) -> Path:
    """A submission whose attention, in each case whose Q has 4 dimensions, maps `mb` MiB of memory that
    RLIMIT_DATA does not count (shared anonymous, memfd, /dev/zero shared) and touches it page by page; its
    other cases and its softmax are the reference's."""
    return submission(tmp, wrap_attention(SHARED_MEMORY.format(mb=mb)), name="shares")


def memory_cgroup_problem() -> str | None:
    """Why no memory cgroup can be made below this process's here (None: one can), decided by making one, as the
    grader does for its jobs (grading/sandbox/jobcgroup.py)."""
    import os
    import uuid

    from cs_basics.harness.cgroup import own_memory

    memory = own_memory()
    if memory is None:
        return "no memory cgroup is mounted here"
    probe = memory.folder / f"cs-basics-probe-{uuid.uuid4().hex[:8]}"
    limit = "memory.limit_in_bytes" if (memory.folder / "memory.limit_in_bytes").exists() else "memory.max"
    try:
        probe.mkdir()
    except OSError as err:
        return f"no cgroup can be made in {memory.folder} ({os.strerror(err.errno or 0)})"
    try:
        (probe / limit).write_text(str(64 << 20))
    except OSError as err:
        return f"a cgroup made in {memory.folder} has no memory limit to set ({os.strerror(err.errno or 0)})"
    finally:
        probe.rmdir()
    return None


# kept for the next grading: a System V segment and message queue (key {key} and {key} + 1) that anyone may read,
# holding what the job read; `_found` is what a grading before kept there
SYSTEM_V = """
import ctypes as _ctypes

_libc = _ctypes.CDLL(None, use_errno=True)
_libc.shmat.restype = _ctypes.c_void_p
_SECRET = b"the hidden inputs"


class _Message(_ctypes.Structure):
    _fields_ = [("kind", _ctypes.c_long), ("text", _ctypes.c_char * 64)]


_found = []  # what a grading before left
_segment = _libc.shmget({key}, 0, 0)
if _segment >= 0:
    _at = _libc.shmat(_segment, None, 0o10000)  # SHM_RDONLY
    if _at not in (None, 2**64 - 1):
        _found.append(_ctypes.string_at(_at, len(_SECRET)))
_queue = _libc.msgget({key} + 1, 0)
_message = _Message()
if _queue >= 0 and _libc.msgrcv(_queue, _ctypes.byref(_message), 64, 0, 0o4000) > 0:  # IPC_NOWAIT
    _found.append(_message.text)
_segment = _libc.shmget({key}, 4096, 0o1666)  # kept for the next grading: IPC_CREAT, anyone may read it
if _segment >= 0:
    _ctypes.memmove(_libc.shmat(_segment, None, 0), _SECRET, len(_SECRET))
_queue = _libc.msgget({key} + 1, 0o1666)
if _queue >= 0:
    _libc.msgsnd(_queue, _ctypes.byref(_Message(1, _SECRET)), 64, 0)
"""


# a daemon in a session of its own, left at import (an orphan of the job: its parent exits at once)
DAEMON = """
import os as _os, time as _time
if _os.fork() == 0:  # a daemon in a session of its own, whose parent exits: only its uid finds it
    _os.setsid()
    if _os.fork() == 0:
        _null = _os.open(_os.devnull, _os.O_RDWR)
        for _fd in (0, 1, 2):
            _os.dup2(_null, _fd)
        _time.sleep(120)
    _os._exit(0)
"""
