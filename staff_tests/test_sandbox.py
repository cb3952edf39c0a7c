"""Grading that holds when the submission fights back or the grader is killed, in both sandboxes.

Each hostile submission is graded with bubblewrap and with the fallback (`--sandbox fallback`, what
runs where bubblewrap does not): the scores and what is left afterwards are checked, never the time it
took (a loaded machine is no failure; benchmarks/ measure the costs). A worker (a grading server and a
uid) is shared by the tests of one sandbox, so each test also shows that nothing of the submission
before it leaks into the next. The defences that need a root grader (the jobs' own uid, namespaces) run
when the tests run as root, and say so otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import cs_basics.harness.grading.sandbox.bubblewrap as bubblewrap
import cs_basics.harness.grading.sandbox.leases as leases
import cs_basics.harness.grading.sandbox.server as server
from cs_basics.harness import portable
from cs_basics.harness.grading.pipeline.grade import GradingError, grade
from cs_basics.harness.grading.sandbox.bubblewrap import bubblewrap_runs
from cs_basics.harness.grading.sandbox.folderlock import (
    UNLOCKED_PREFIX,
    WORK_PREFIX,
    held_work_folder,
    left_work_folders,
)
from cs_basics.harness.grading.sandbox.leases import (
    LEASE_PREFIX,
    UID_BASE,
    UID_COUNT,
    UIDS_ENV,
    kill_uid,
    lease_uid,
    process_uids,
    processes_of,
    take_lease,
)
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.litter import Hoard, remove_litter, remove_tree
from cs_basics.harness.grading.sandbox.stopping import StaffError
from cs_basics.harness.grading.sandbox.worker import Worker
from cs_basics.harness.grading.writers.results import results_json

from .probes import alive
from .submissions import ROOT, SPY, outputs_of, scores, softmax_fails_if, submission, wrap_attention

ATTENTION, SOFTMAX = "scaled_dot_product_attention", "softmax"
FULL = {SOFTMAX: 1.0, ATTENTION: 5.0}
RELEASED = (SOFTMAX, ATTENTION)
OUTLIVES_THE_TEST = 900  # seconds a submission's process would run on its own: past any test's time limit
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the jobs' own uid and namespaces need a root grader")
needs_bubblewrap = pytest.mark.skipif(not bubblewrap_runs(), reason="bubblewrap does not run here: only the fallback")
SANDBOXES = [pytest.param("bubblewrap", marks=needs_bubblewrap), "fallback"]
# the tests that take the last uids of the jobs' range by number run one after the other (under xdist, on one
# worker): two at once would sweep or lease each other's uid
LAST_UIDS = pytest.mark.xdist_group("the-last-job-uids")
NO_NAMESPACES = "the kernel refuses the job's namespaces here (root in a container without CAP_SYS_ADMIN?)"


@pytest.fixture(scope="module", params=SANDBOXES)
def worker(request):
    # released from the from-scratch rule's holds: these attacks reach into the machine, which the
    # sandbox must stand whatever runs (a subprocess at import, a fork chain)
    with Worker(request.param, Limits(case_seconds=10, released=RELEASED)) as shared:
        yield shared


def graded(assignment, worker, folder):
    return grade(assignment, folder, torch.device("cpu"), worker=worker)


def left_running(worker) -> list[int]:
    return processes_of(worker.uid) if worker.uid is not None else []


def job_uids() -> set[int]:
    return {uid for uid in process_uids().values() if UID_BASE <= uid < UID_BASE + UID_COUNT}


def job_uids_under(pid: int) -> set[int]:
    """The job uids of the processes descended from `pid`: this test's grader's jobs, not those of a grader
    that another test (another pytest worker, another checkout) runs meanwhile."""
    below = processes_under(pid)
    return {uid for found, uid in process_uids().items() if found in below and UID_BASE <= uid < UID_BASE + UID_COUNT}


def processes_under(pid: int) -> set[int]:
    """The processes descended from `pid`."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = parent_of(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    below, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            below.add(child)
            todo.append(child)
    return below


SLEEPS_IN_ITS_FIRST_ATTENTION = """
import time as _time

_slept = []
_reference_attention = scaled_dot_product_attention


def scaled_dot_product_attention(Q, K, V, mask=None):
    if not _slept:
        _slept.append(_time.sleep(3))
    return _reference_attention(Q, K, V, mask)
"""


@needs_root
def test_the_student_process_is_the_servers_own_child_one_copy_of_the_server_a_phase(assignment, worker, tmp_path):
    """The server makes each job's PID namespace, its keeper first: the child it forks next is the student's process
    itself, the only copy of the server (and of torch's page tables, copied at the fork and freed at the end) in a
    phase. Before, the child forked the student's process: two copies a phase. Seen from outside while the first
    attention case sleeps: the process of the job's uid is a child of the server."""
    if not worker.isolated:
        pytest.skip(NO_NAMESPACES)
    found: list[tuple[int, int]] = []
    grading = threading.Thread(
        target=graded, args=(assignment, worker, submission(tmp_path, SLEEPS_IN_ITS_FIRST_ATTENTION)), daemon=True
    )
    grading.start()
    end = time.monotonic() + 120
    while grading.is_alive() and not found and time.monotonic() < end:
        below = processes_under(worker.server.process.pid)
        server = min(below | {worker.server.process.pid}, key=lambda pid: (not is_server(pid), pid))
        found = [(pid, parent_of(pid)) for pid in below if process_uids().get(pid) == worker.uid]
        time.sleep(0.05)
    grading.join(timeout=120)
    assert found, "no process of the job's uid was seen while the case slept"
    assert all(parent == server for _, parent in found), (found, server)


READS_THE_FIRST_PROCESS = """
_found = []
for _path in ("/proc/1/mountinfo", "/proc/1/net/unix", "/proc/1/net/tcp", "/proc/1/environ"):
    try:
        with open(_path, "rb") as _f:
            _found.append((_path, len(_f.read())))
    except OSError:
        pass
"""


@needs_root
def test_the_job_reads_nothing_of_its_namespaces_first_process(assignment, worker, tmp_path):
    """The keeper (the job's PID namespace's first process) is started by the server, in the server's mount and
    network namespaces: /proc/1/mountinfo and /proc/1/net would show the job the machine's mounts and sockets (the
    fallback's server runs in the machine's). The job's /proc shows only its own uid's processes (hidepid=2)."""
    if not worker.isolated:
        pytest.skip(NO_NAMESPACES)
    result = graded(assignment, worker, submission(tmp_path, READS_THE_FIRST_PROCESS + softmax_fails_if("_found")))
    assert scores(result) == pytest.approx(FULL), outputs_of(result, SOFTMAX)[0]


def is_server(pid: int) -> bool:
    """Whether `pid` runs zygote.py (the server, or a copy of it), not bubblewrap starting it."""
    with contextlib.suppress(OSError):
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return any(arg.endswith(b"zygote.py") for arg in args) and not args[0].endswith(b"bwrap")
    return False


def parent_of(pid: int) -> int | None:
    """The parent of `pid` (None: it ended), from /proc/PID/stat, after the name (which may hold spaces)."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return None


# ---------------------------------------------------------------- what the submission leaves behind


@needs_root
def test_a_chain_of_processes_that_fork_and_exit_leaves_nothing_running(assignment, worker, tmp_path):
    # it would run past any test's time limit: left alone it is still running when grading returns, and a grader
    # that waited for it never returns
    chain = f"""
    import os, time
    if os.fork() == 0:
        os.setsid()
        end = time.time() + {OUTLIVES_THE_TEST}
        while time.time() < end:  # each process forks and exits: a /proc walker never catches it
            if os.fork():
                os._exit(0)
        os._exit(0)
    """
    result = graded(assignment, worker, submission(tmp_path, chain))
    assert scores(result) == pytest.approx(FULL)
    assert left_running(worker) == []


def test_files_left_in_the_temporary_folders_are_gone_after_grading(assignment, worker, tmp_path):
    """What the job wrote to /tmp, /dev/shm and /var/tmp is gone once grading returns. Where the job has no
    namespaces of its own, Landlock (where the kernel offers it) refuses those writes: then nothing was left,
    and the job says so; elsewhere every write must have been made, or this test would show nothing."""
    token = uuid.uuid4().hex
    litter = [f"/tmp/cs-basics-litter-{token}", f"/dev/shm/cs-basics-litter-{token}", f"/var/tmp/litter-{token}"]
    code = f"""
    for _path in {litter!r}:
        try:
            with open(_path, "w") as _f:
                _f.write("left behind")
            print("wrote", _path, flush=True)
        except PermissionError:
            print("refused", _path, flush=True)
    """
    result = graded(assignment, worker, submission(tmp_path, code))
    assert scores(result) == pytest.approx(FULL)
    wrote = [p for p in litter if f"wrote {p}" in result.output]
    refused = [p for p in litter if f"refused {p}" in result.output]
    assert sorted(wrote + refused) == sorted(litter), result.output
    assert wrote == litter or (worker.landlock and not worker.isolated), f"refused without Landlock: {refused}"
    assert not [p for p in litter if os.path.exists(p)]


# Writes up to 4 GiB to the four folders, each until a write fails, and keeps what it wrote: its softmax raises
# unless every folder refused more and what it holds in all is within the limit, yet not far below it (the bound
# is the limit, one for the four folders). Measured from inside the job: the machine's free memory, which every
# other process on a shared machine moves, is no measure of it.
FILL_TEMPORARY_FOLDERS = """
import errno as _errno, os as _os

_LIMIT = {limit_mb} << 20
_SEEN, _HELD = {{}}, 0
for _folder in ("/tmp", "/var/tmp", "/dev/shm", "."):  # "." is the job's working folder
    _SEEN[_folder] = None
    for _n in range(64):  # up to 1 GiB in each, in files under the per-file limit
        _path = _os.path.join(_folder, f"fill-{{_os.getpid()}}-{{_n}}")
        try:
            with open(_path, "wb") as _f:
                for _ in range(2):
                    _f.write(b"x" * (8 << 20))
        except OSError as _err:
            _SEEN[_folder] = _errno.errorcode.get(_err.errno, str(_err.errno))
            break
        finally:
            if _os.path.exists(_path):
                _HELD += _os.stat(_path).st_blocks * 512
_reference_softmax = softmax


def softmax(in_features, dim):
    if not all(_seen in ("ENOSPC", "EFBIG") for _seen in _SEEN.values()):
        raise RuntimeError(f"wrote on: {{_SEEN}}")
    if not _LIMIT // 2 < _HELD <= _LIMIT:
        raise RuntimeError(f"held {{_HELD >> 20}} MiB in the four folders, the limit being {{_LIMIT >> 20}} MiB")
    return _reference_softmax(in_features, dim)
"""


@needs_root
def test_what_a_job_writes_to_its_temporary_folders_is_bounded_in_all(assignment, worker, tmp_path):
    """4 GiB written to /tmp, /var/tmp, /dev/shm and the working folder (each memory-backed in the job's view):
    the writes past 64 MiB in all fail with ENOSPC, what the job holds in the four is within the 64 MiB, and
    the submission is graded in full."""
    limit_mb = 64
    # released, as the staff would after reading it: its module-level `os` and `errno` are no modules the course
    # allows (every problem held before any code runs), and it is the temporary folders' bound that is tested
    released = (SOFTMAX, ATTENTION)
    with Worker(worker.sandbox, Limits(case_seconds=20, tmp_mb=limit_mb, released=released)) as bounded:
        if not bounded.isolated:  # as the grading server found by trying (a container may refuse namespaces)
            pytest.skip(f"{NO_NAMESPACES}: the bound is then the watch on the job's uid (a test below)")
        fill = FILL_TEMPORARY_FOLDERS.format(limit_mb=limit_mb)
        result = graded(assignment, bounded, submission(tmp_path, fill))
    assert scores(result) == pytest.approx(FULL), outputs_of(result, SOFTMAX)[0]


@needs_root
def test_the_submission_reaches_no_network(assignment, worker, tmp_path):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        code = f"""
        import socket
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=3).sendall(b"the hidden inputs")
        except OSError:
            pass
        """
        result = graded(assignment, worker, submission(tmp_path, code))
        with pytest.raises(TimeoutError):
            listener.accept()
    assert scores(result) == pytest.approx(FULL)


def test_signals_sent_to_the_grader_change_nothing(assignment, worker, tmp_path):
    """SIGSTOP and SIGTERM to the grader's pid, to the job's parent and to its process group."""
    code = f"""
    import os, signal
    for _target in ({os.getpid()}, os.getppid(), -os.getpgid(0)):
        for _sig in (signal.SIGSTOP, signal.SIGTERM):
            try:
                if _target not in (0, 1, -1):
                    os.kill(_target, _sig)
            except OSError:
                pass
    """
    result = graded(assignment, worker, submission(tmp_path, code))
    assert scores(result) == pytest.approx(FULL)
    assert left_running(worker) == []


STOPS_ITS_PARENT = """
import os, signal
for _sig in (signal.SIGSTOP, signal.SIGTERM):  # its parent, whatever getppid() says (0 in the job's PID namespace)
    try:
        os.kill(os.getppid(), _sig)
    except OSError:
        pass


def scaled_dot_product_attention(Q, K, V, mask=None):
    return V * 0
"""


def test_a_submission_that_stops_its_parent_at_import_keeps_its_softmax(assignment, worker, tmp_path):
    """SIGSTOP, then SIGTERM, to os.getppid() at import: the grader's processes are out of its reach, and in the
    job's PID namespace, where getppid() is 0, kill(0, ...) would have stopped the submission's own process (the
    import then took over 120 s, and every problem got 0): its right softmax keeps its point."""
    result = graded(assignment, worker, submission(tmp_path, STOPS_ITS_PARENT))
    assert scores(result) == pytest.approx({SOFTMAX: 1.0, ATTENTION: 0.0}), outputs_of(result, SOFTMAX)[0]
    assert "shape mismatch" in outputs_of(result, ATTENTION)[0] + outputs_of(result, ATTENTION)[1]


LOOKS_AT_IMPORT = """
import os as _os
from pathlib import Path as _Path

_code = _Path(__file__).resolve().parents[2]  # the job's code; its inputs beside it
_seen = [p.name for p in (_code.parent / "inputs").iterdir()]
_seen += [str(p) for p in _code.rglob("cases.py") if p.parent.name == "hidden"]
_reference_softmax = softmax


def softmax(in_features, dim):
    if _seen:
        raise RuntimeError(f"at import the code saw {_seen}")
    return _reference_softmax(in_features, dim)
"""


def test_code_run_at_import_finds_no_input_and_no_hidden_cases_code(assignment, worker, tmp_path):
    """Each group of cases gets its inputs only once its process has imported the submission, and the public
    phase's code holds no hidden cases' code: the public softmax cases pass. The hidden phase's code holds it
    (its own folder, made after the public phase): its softmax cases fail, which shows the code looked."""
    result = graded(assignment, worker, submission(tmp_path, LOOKS_AT_IMPORT))
    public = [t for t in result.tests if t.case.problem == SOFTMAX and not t.case.hidden]
    hidden = [t for t in result.tests if t.case.problem == SOFTMAX and t.case.hidden]
    assert public and all(t.passed for t in public), public[0].output
    assert hidden and all("hidden" in t.output and "cases.py" in t.output for t in hidden), hidden[0].output
    assert not any("safetensors" in t.output for t in hidden), hidden[0].output


def test_an_endless_line_on_the_progress_pipe_is_not_kept(assignment, worker, tmp_path):
    """The grader reads at most Limits.progress_mb of it (a line longer than progress_line_kb is dropped),
    then stops reading it and ends the job."""
    flood = """
    import os
    for _fd in map(int, os.listdir("/proc/self/fd")):
        _link = os.readlink(f"/proc/self/fd/{_fd}") if os.path.exists(f"/proc/self/fd/{_fd}") else ""
        if _fd > 2 and _link.startswith(("pipe:", "socket:")):  # the progress channel among them
            try:
                for _ in range(64 << 4):  # 1 GiB, never a newline
                    os.write(_fd, b"x" * (1 << 20))
            except OSError:  # a pipe's reading end
                pass
    """
    # released: its reading of /proc and writing to a descriptor are no names the course allows (held before any
    # code runs), and it is the channel's bound that is tested
    released = Limits(released=(SOFTMAX, ATTENTION))
    with Worker(worker.sandbox, released) as own:  # a grader that kept reading would end only at the import's limit
        own.ensure_server()
        tracemalloc.start()
        try:
            result = grade(assignment, submission(tmp_path, flood), torch.device("cpu"), worker=own)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert left_running(own) == []
    assert result.score == 0 and peak < 32 << 20
    assert all("wrote over 16 MiB to the grader's progress channel" in out for out in outputs_of(result))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the child's start-up would not fail")
def test_a_failure_of_the_childs_own_after_the_channel_moved_reaches_the_staff(assignment, worker, tmp_path):
    """The child moves the channel to a high descriptor first (child.out_of_reach); a failure of its own after
    that, here CUDA asked for where there is none when the child starts the device, is said on the channel as it
    now is, and grading stops for the staff naming it (written on the old number, it went nowhere, or into a
    file the submission had opened there)."""
    with pytest.raises(GradingError, match=r"RuntimeError: .*(NVIDIA|CUDA)"):
        grade(assignment, submission(tmp_path), torch.device("cuda"), worker=worker)


STANDARD_LIBRARY = """
import colorsys, csv, decimal, difflib, fractions, socket, sqlite3, tarfile, uuid, wave, zoneinfo, xml.dom.minidom

_db = sqlite3.connect(":memory:")
_db.execute("create table t (x)")
assert colorsys.rgb_to_hsv(1, 0, 0) and difflib.SequenceMatcher(None, "ab", "ac").ratio()
assert "bücher.example".encode("idna")
try:
    socket.getaddrinfo("bücher.example", 80)
except OSError:
    pass  # no network: the lookup fails, the codec did not
"""
WRITES_TO_DEVNULL = """
import contextlib, os

with open(os.devnull, "w") as _null, contextlib.redirect_stdout(_null):  # no program: graded code starts none
    print("quiet")
"""


@pytest.mark.parametrize("code", [STANDARD_LIBRARY, WRITES_TO_DEVNULL], ids=["standard_library", "devnull"])
def test_legitimate_code_is_graded_normally_wherever_python_lives(assignment, worker, tmp_path, code):
    """Modules nothing else imports (one needs the idna codec), or output sent to /dev/null, at import: as root
    the job runs under its own uid, and this machine's Python is under /root."""
    result = graded(assignment, worker, submission(tmp_path, code))
    assert scores(result) == pytest.approx(FULL), outputs_of(result)[0]


@pytest.fixture
def batch_folder():
    """A folder of submissions outside the temporary folders (which a job sees fresh anyway), readable by all."""
    top = Path("/srv") if os.access("/srv", os.W_OK) else Path.home()
    folder = Path(tempfile.mkdtemp(prefix="cs-basics-batch-", dir=top))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_submission_in_a_batch_cannot_read_the_others(assignment, worker, batch_folder):
    other = submission(batch_folder, name="other")
    spy = f"""
    try:
        open({str(other / "cs_basics" / "nn" / "functional.py")!r}).read()
        raise RuntimeError("read another submission")
    except OSError:
        pass
    """
    worker.hide.append(str(batch_folder))
    try:
        result = graded(assignment, worker, submission(batch_folder, spy, name="spy"))
    finally:
        worker.hide.remove(str(batch_folder))
    assert scores(result) == pytest.approx(FULL), outputs_of(result)[0]


TAMPER = """
import os as _os
from pathlib import Path as _Path

_code = _Path(__file__).resolve().parents[2]  # the job's code: the grader's files are laid over it
for _target in (_code / "cs_basics" / "harness" / "rule" / "record.py", _code / "tests" / "cases.py"):
    for _attempt in (
        lambda: _target.write_text("raise SystemExit"),  # through a link, every later job's copy
        lambda: _os.chmod(_target, 0o666),
        lambda: _os.utime(_target, (0, 0)),
        lambda: _target.unlink(),
    ):
        try:
            _attempt()
        except OSError:
            pass
"""


def test_a_job_cannot_alter_the_files_laid_over_the_next_jobs_code(assignment, worker, tmp_path):
    """The grader's harness and the course's test modules are made once per worker and laid over each job's
    code (linked where the job has a uid of its own): a job that tries to write, chmod, touch or remove them
    leaves them as they were, and the next submission is graded with the grader's own files."""
    graded(assignment, worker, submission(tmp_path, TAMPER, name="tamper"))
    overlay = worker.overlays[assignment.root]
    for rel in (Path("cs_basics/harness/rule/record.py"), Path("tests/cases.py")):
        laid = overlay.folder / rel
        assert laid.read_bytes() == (ROOT / rel).read_bytes(), rel
        assert stat.S_IMODE(laid.stat().st_mode) == 0o644 and laid.stat().st_mtime > 0, rel
    result = graded(assignment, worker, submission(tmp_path, name="next"))
    assert scores(result) == pytest.approx(FULL), outputs_of(result)[0]


# ---------------------------------------------------------------- the grader killed from outside


def grading_process(folder: Path, results: Path, sandbox: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "cs_basics.cli", "grade", "--quiet", "--submission", str(folder)]
    command += ["--results", str(results), "--sandbox", sandbox]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# the waits below end with the event or with the grader (pytest-timeout bounds the test): however loaded the
# machine, a grader that starts slowly is no failure
def wait_for_new_job(grader: subprocess.Popen) -> set[int]:
    while grader.poll() is None:
        new = job_uids_under(grader.pid)
        if new:
            return new
        time.sleep(0.2)
    raise AssertionError("the grader started no job")


def worker_folders() -> set[Path]:
    """The work folders graders of this user made, in /dev/shm and in the temporary folder (folderlock.work_parent)."""
    return set(left_work_folders())


def wait_for_output(case: str, before: set[Path], uids: set[int], grader: subprocess.Popen) -> Path:
    """Until a new worker's job folder, of a job of `uids`, holds the outputs of `case`: that worker's folder."""
    while grader.poll() is None:
        for folder in worker_folders() - before:
            with contextlib.suppress(OSError):
                if any(out.parent.stat().st_uid in uids for out in folder.glob(f"jobs/*/out/{case}.safetensors")):
                    return folder
        time.sleep(0.1)
    raise AssertionError(f"the grader never wrote the outputs of {case}")


# how long the jobs of a grader that was killed may take to die (the kernel ends them once their parent is gone):
# a bound for a hang, not a measure of speed
DEATH_SECONDS = 120


def gone_within(uids: set[int], seconds: float = DEATH_SECONDS) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not job_uids() & uids:
            return True
        time.sleep(0.2)
    return False


@needs_root
@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("kill", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_grader_killed_mid_case_leaves_nothing_running_and_a_valid_results_file(tmp_path, sandbox, kill):
    killed_mid_case(tmp_path, sandbox, kill)


@needs_root
@pytest.mark.parametrize(
    "sandbox, stop",
    [
        pytest.param("bubblewrap", signal.SIGINT, marks=needs_bubblewrap, id="SIGINT-bubblewrap"),
        pytest.param("fallback", signal.SIGHUP, id="SIGHUP-fallback"),
    ],
)
def test_ctrl_c_and_a_hang_up_wind_grading_down_as_sigterm_does(tmp_path, sandbox, stop):
    """The same handler as SIGTERM's, so each of the other two stop signals runs in one sandbox."""
    killed_mid_case(tmp_path, sandbox, stop)


@needs_root
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_stop_signal_to_every_process_of_the_grading_costs_the_code_nothing(tmp_path, sandbox):
    """As Slurm's `scancel` does, SIGTERM to every process below the grader (its grading server, the job's), the
    grader's own never coming or coming late: the case running is not charged to the code (it was "stopped with the
    grading server"), the grading winds down as on the grader's own stop signal and says why."""
    results = tmp_path / "results.json"
    grader, _, _ = grading_mid_attention(tmp_path, results, sandbox)
    try:
        for pid in processes_under(grader.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
        err = grader.communicate(timeout=DEATH_SECONDS)[1]
    finally:
        grader.kill()
    outputs = [t["output"] for t in json.loads(results.read_text())["tests"]]
    assert grader.returncode == 128 + signal.SIGTERM, err[-3000:]  # as a stop signal of its own would end it
    assert not any("stopped with the grading server" in said for said in outputs), outputs
    assert any("not run: grading was stopped (SIGTERM to the grading server)" in said for said in outputs), outputs


def grading_mid_attention(tmp_path, results: Path, sandbox: str) -> tuple[subprocess.Popen, set[int], Path]:
    """A grader of a looping attention, once its public softmax cases are done and attention loops: the grader, its
    jobs' uids and its worker's folder."""
    loop = wrap_attention("while True:\n    pass")
    folders = worker_folders()
    grader = grading_process(submission(tmp_path, loop), results, sandbox)
    try:
        uids = wait_for_new_job(grader)
        work = wait_for_output("softmax-float64", folders, uids, grader)
    except BaseException:
        grader.kill()
        raise
    time.sleep(1)
    return grader, uids, work


def killed_mid_case(tmp_path, sandbox, kill):
    results = tmp_path / "results.json"
    grader, uids, work = grading_mid_attention(tmp_path, results, sandbox)
    try:
        grader.send_signal(kill)
        grader.wait(timeout=DEATH_SECONDS)
        assert gone_within(uids), f"processes of uids {uids} still run {DEATH_SECONDS} s after the grader ended"
    finally:
        grader.kill()
    if kill == signal.SIGKILL:  # it could not remove its work folder (hidden inputs, outputs): the next grader that
        Worker(sandbox, Limits()).close()  # starts does (this one, or one another test started meanwhile)
    end = time.monotonic() + DEATH_SECONDS  # another test's grader may be removing it as this one starts
    while work.exists() and time.monotonic() < end:
        time.sleep(0.1)
    assert not work.exists(), f"{work} is left"
    data = json.loads(results.read_text())  # valid JSON either way
    if kill != signal.SIGKILL:
        assert grader.returncode == 128 + kill
        public = [t for t in data["tests"] if "hidden" not in t["name"]]
        assert all(t["status"] == "passed" for t in public if t["tags"] == [SOFTMAX]), [t["output"] for t in public]
        assert any(f"not run: grading was stopped ({kill.name})" in t["output"] for t in data["tests"])
    else:
        assert data["score"] == 0 and "grading did not finish" in data["output"]


@needs_root
def test_a_new_worker_removes_the_work_folders_only_of_graders_that_died(tmp_path):
    """A work folder whose lock no process holds (its grader died) goes as the next worker starts; one a live
    grader holds (here this process, through another open file: flock refuses it as it refuses another's), one of
    another user, a link named as a work folder, and the unlocked folder of a grader that holds no lock (Windows,
    an earlier release) stay, and the folder the link points to is untouched."""
    temporary = Path(tempfile.gettempdir())
    left = Path(tempfile.mkdtemp(prefix=WORK_PREFIX))
    (left / "jobs" / "1" / "inputs").mkdir(parents=True)
    (left / "jobs" / "1" / "inputs" / "hidden.safetensors").write_text("a hidden case's input")
    live, held = held_work_folder(remove_tree)
    unlocked = Path(tempfile.mkdtemp(prefix=UNLOCKED_PREFIX))
    made = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=tmp_path))  # given away before it is in the shared folder,
    os.chown(made, 65534, 65534)  # where a worker another test starts would sweep it as root's
    others = temporary / made.name
    made.rename(others)
    target = tmp_path / "target"
    target.mkdir()
    (target / "kept").touch()
    link = temporary / f"{WORK_PREFIX}link-{uuid.uuid4().hex}"
    link.symlink_to(target)
    try:
        Worker("fallback", Limits()).close()
        assert not left.exists()
        assert live.is_dir() and unlocked.is_dir() and others.is_dir() and link.is_symlink()
        assert (target / "kept").exists()
    finally:
        remove_tree(live)
        os.close(held)
        link.unlink()
        for folder in (others, left, unlocked):
            shutil.rmtree(folder, ignore_errors=True)


@needs_root
def test_a_worker_that_fails_to_start_gives_back_its_folder_its_lock_and_its_uid(monkeypatch):
    """A worker whose start fails after it took its uid's lease, its job cgroup and its locked work folder (here
    its scan process) gives them all back at once, not when the grader exits."""
    import cs_basics.harness.grading.sandbox.worker as worker_module

    taken, lease_uid = {}, worker_module.lease_uid

    def leased(*args):
        taken["uid"], taken["lease"] = lease_uid(*args)
        return taken["uid"], taken["lease"]

    def held(remove, **where):
        taken["folder"], taken["lock"] = held_work_folder(remove, **where)
        return taken["folder"], taken["lock"]

    def no_scanner():
        raise OSError("no scan process today")

    monkeypatch.setattr(worker_module, "lease_uid", leased)
    monkeypatch.setattr(worker_module, "held_work_folder", held)
    monkeypatch.setattr(worker_module, "Scanner", no_scanner)
    with pytest.raises(OSError, match="no scan process today"):
        Worker("fallback", Limits())
    assert taken["lease"].fileno() == -1, "the uid's lease is still held"
    assert not taken["folder"].exists()
    with pytest.raises(OSError):
        os.fstat(taken["lock"])


# ---------------------------------------------------------------- many graders on one machine

SLOW_ATTENTION = wrap_attention("import time\ntime.sleep(0.3)")  # correct, and 7 s of jobs in all
GRADERS, UIDS = 3, 2  # more graders than uids: without leases, two of them take the same uid at once


@needs_root
@LAST_UIDS
@pytest.mark.waits  # graders waiting for a uid and for slow correct code
@pytest.mark.timeout(900)  # three graders at once, one waiting for another's uid: minutes on a loaded 2-core machine
def test_graders_started_at_once_never_share_a_job_uid(tmp_path):
    """Three graders of two slow correct submissions each, started at once with the jobs' uids narrowed to
    two: each worker leases its uid for its life (one waits for a lease), so every submission gets full
    marks. Without leases two graders share a uid, and one's sweep (`kill -9 -1` as the uid after each
    job) kills the other's running job."""
    last = UID_BASE + UID_COUNT - 1
    env = os.environ | {UIDS_ENV: f"{last - UIDS + 1}-{last}"}
    graders = []
    for i in range(GRADERS):
        course = tmp_path / f"course-{i}"
        for name in ("alice", "bob"):
            submission(course, SLOW_ATTENTION, name=name)
        command = [sys.executable, "-m", "cs_basics.cli", "grade", "--submission", str(course), "--workers", "1"]
        command += ["--results", str(tmp_path / f"results-{i}")]
        graders.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    try:
        said = [grader.communicate(timeout=840)[0].decode(errors="replace") for grader in graders]
    finally:
        for grader in graders:
            grader.kill()
    assert [grader.returncode for grader in graders] == [0] * GRADERS, said
    results = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("results-*/*.json"))]
    uids = {data["extra_data"]["cs_basics"]["sandbox"]["uid"] for data in results}
    assert len(results) == 2 * GRADERS and uids <= set(range(last - UIDS + 1, last + 1))
    killed = [t["output"] for data in results for t in data["tests"] if t["status"] != "passed"]
    assert [data["score"] for data in results] == [6.0] * 2 * GRADERS, killed[:3]


@LAST_UIDS
def test_a_leased_uid_is_taken_by_no_one_else_until_its_holder_lets_go_or_dies(monkeypatch):
    """The lease is an abstract socket: no file, held by one process at a time, freed by the kernel on death."""
    uid = UID_BASE + UID_COUNT - 1
    monkeypatch.setenv(UIDS_ENV, str(uid))
    taken, lease = lease_uid()
    assert taken == uid and take_lease(uid) is None
    lease.close()
    holder = f"""
import socket, time
lease = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
lease.bind(b"\\0{LEASE_PREFIX}{uid}")
print("held", flush=True)
time.sleep(60)
"""
    other = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE)
    try:
        assert other.stdout.readline() == b"held\n"
        with pytest.raises(StaffError, match=f"every uid from {uid} to {uid} is leased"):
            lease_uid(wait=0.5)
    finally:
        other.kill()
        other.wait()
    taken, lease = lease_uid(wait=5)
    lease.close()
    assert taken == uid


# ---------------------------------------------------------------- defaults, shown once


@pytest.mark.waits  # 40 s of a case's sleeps
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_looping_attention_costs_minutes_with_the_default_limits_and_softmax_keeps_its_point(
    assignment, tmp_path, sandbox
):
    """With the defaults, in each sandbox (the other tests set short limits): the problem's first cases run out
    of their time, the others are not run, and the submission's total limit is never reached. What that costs
    is counted in cases, not measured (benchmarks/grading_phases.py times a grading). The loop sleeps: a case's
    clock charges a sleep as it charges a computation (pipeline/caseclock.py), and the suite's other tests get the
    cores meanwhile (test_grading's endless loop computes)."""
    folder = submission(tmp_path, wrap_attention("import time\n\nwhile True:\n    time.sleep(0.5)"))
    result = grade(assignment, folder, torch.device("cpu"), sandbox=sandbox)
    defaults = Limits()
    assert scores(result) == pytest.approx({SOFTMAX: 1.0, ATTENTION: 0.0})
    sandbox_used = results_json(result)["extra_data"]["cs_basics"]["sandbox"]
    assert sandbox_used["name"] == sandbox and isinstance(sandbox_used["namespaces"], bool)
    messages = outputs_of(result, ATTENTION)
    ran_out = sum("ran over its time limit of 20 s" in m for m in messages)
    assert ran_out == defaults.timeouts_per_problem
    assert sum("not run: your function did not return on cases" in m for m in messages) == len(messages) - ran_out
    assert not any("total time limit" in m for m in outputs_of(result)), outputs_of(result)


# ---------------------------------------------------------------- the machine as it was


@needs_root
@pytest.mark.alone  # what other tests write meanwhile is not the grader's (staff_tests/machine.py)
def test_grading_as_root_changes_nothing_outside_its_own_folder(assignment, tmp_path):
    """/dev/null stays the character device 1:3, and no file outside the grader's temporary folder and the
    results file changes (`find / -xdev -newer STAMP`, leaving out what other processes write)."""
    stamp = tmp_path / "stamp"
    stamp.touch()
    time.sleep(1.1)
    results = tmp_path / "results.json"
    for sandbox in ("bubblewrap", "fallback") if bubblewrap_runs() else ("fallback",):
        command = [sys.executable, "-m", "cs_basics.cli", "grade", "--quiet", "--results", str(results)]
        done = subprocess.run([*command, "--sandbox", sandbox], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and json.loads(results.read_text())["score"] == pytest.approx(6.0), done.stderr
    null = os.stat("/dev/null")
    assert stat.S_ISCHR(null.st_mode) and os.major(null.st_rdev) == 1 and os.minor(null.st_rdev) == 3
    assert stat.S_IMODE(null.st_mode) == 0o666
    # what other processes write: the kernel's, the caches, other checkouts, and a container engine's state (the
    # platform lab's containers and their removal may outlive the tests that started them; the grader runs none)
    engines = ["/var/lib/containers", "/var/cache/cs-basics-lab"]
    elsewhere = ["/proc", "/sys", "/dev", "/run", "/tmp", "/var/tmp", str(Path.home() / ".cache"), *engines]
    elsewhere += other_checkouts()
    prune = [arg for path in elsewhere for arg in ("-path", path, "-o")][:-1]
    find = ["find", "/", "-xdev", "(", *prune, ")", "-prune", "-o", "-newer", str(stamp), "-print"]
    changed = subprocess.run(find, capture_output=True, text=True).stdout.split()
    assert [p for p in changed if "__pycache__" not in p] == []


def other_checkouts() -> list[str]:
    """Other worktrees of this repository, where other work may be going on meanwhile."""
    listed = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
    trees = [line.split(" ", 1)[1] for line in listed.stdout.splitlines() if line.startswith("worktree ")]
    return [t for t in trees if Path(t).resolve() != ROOT]


# ---------------------------------------------------------------- where the kernel refuses namespaces


def closed_folder() -> str | None:
    """The highest folder on the way to this Python that other users may not enter (/root here), if any."""
    return next((str(p) for p in reversed(Path(sys.base_prefix).parents) if not p.stat().st_mode & 0o001), None)


@needs_root
def test_without_namespaces_a_python_the_jobs_uid_cannot_enter_is_reached_and_graded_in_full(assignment, tmp_path):
    """Here Python lives under /root (mode 700), as in a root container with the checkout under /root: without
    namespaces the grader opens the environment's folders before the uid changes and the job imports through
    them (reach.reach_python), under Landlock; the submission is graded in full, with no chmod."""
    if closed_folder() is None:
        pytest.skip("every folder on the way to this Python is open to other users")
    with Worker("fallback", Limits(case_seconds=20), namespaces=False) as worker:
        if not worker.landlock:
            pytest.skip("no Landlock here: the grader opens no way into a closed folder without it (next test)")
        result = grade(assignment, submission(tmp_path), torch.device("cpu"), worker=worker)
    assert scores(result) == pytest.approx(FULL), outputs_of(result)[:2]


@needs_root
def test_without_namespaces_or_landlock_a_python_the_jobs_uid_cannot_enter_stops_grading_for_the_staff(
    assignment, tmp_path, monkeypatch
):
    """Without Landlock to confine the job, ".." from an opened folder would reach the folders between it and the
    closed one (a checkout's .venv: the checkout): the grader opens none, and says so before any student code runs,
    naming the folder and the fixes."""
    blocked = closed_folder()
    if blocked is None:
        pytest.skip("every folder on the way to this Python is open to other users")
    monkeypatch.setattr(Worker, "landlock", property(lambda worker: 0))
    with Worker("fallback", namespaces=False) as worker, pytest.raises(GradingError) as stopped:
        grade(assignment, submission(tmp_path), torch.device("cpu"), worker=worker)
    said = str(stopped.value)
    assert f"cannot enter {blocked} (mode 700)" in said and "chmod o+x" in said and "Landlock" in said, said


@needs_root
@pytest.mark.parametrize(
    ("sandbox", "namespaces"),
    [pytest.param("bubblewrap", True, marks=needs_bubblewrap), ("fallback", True), ("fallback", False)],
    ids=["bubblewrap", "fallback", "fallback-without-namespaces"],
)
def test_a_grader_whose_temporary_folder_is_in_dev_shm_grades_in_full_and_its_job_sees_nothing_else_there(
    assignment, tmp_path, monkeypatch, sandbox, namespaces
):
    """A cluster may set TMPDIR to a folder of /dev/shm, where the grader then keeps its work folder; a job's own
    view mounts a fresh folder over /dev/shm (view.build_view), which hid the job's folder: every grading stopped
    for the staff. Now the submission is graded in full and opens nothing of that folder but its own job's (here
    another grader's file beside the work folder), with namespaces and without them (Landlock)."""
    top = Path(tempfile.mkdtemp(prefix="cs-basics-test-tmpdir-", dir="/dev/shm"))
    try:
        top.chmod(0o755)
        other = top / "another-graders-file"
        other.write_text("another grader's")
        other.chmod(0o644)
        monkeypatch.setenv("TMPDIR", str(top))  # the staff's: the work folders go there (folderlock.work_parent)
        monkeypatch.setattr(tempfile, "tempdir", str(top))
        spy = submission(tmp_path, SPY.format(paths=[str(other)]) + softmax_fails_if("_found"))
        with Worker(sandbox, Limits(case_seconds=20), namespaces=namespaces) as worker:
            if not namespaces and not worker.landlock:
                pytest.skip("no Landlock here: without namespaces the job could read the shared /dev/shm")
            assert worker.root.is_relative_to(top), worker.root
            result = grade(assignment, spy, torch.device("cpu"), worker=worker)
            assert worker.isolated == namespaces, "the kernel refused the job's namespaces here"
    finally:
        shutil.rmtree(top, ignore_errors=True)
    assert scores(result) == pytest.approx(FULL), outputs_of(result)[:2]


# ---------------------------------------------------------------- bubblewrap, the way this machine lets it run


def without_sys_admin(command: list[str], masked_proc: bool = False) -> list[str]:
    """`command` as root without CAP_SYS_ADMIN, as in a rootful podman or Docker container: root may not make
    namespaces, but may make a user namespace. With `masked_proc`, a file of /proc covered first (in a mount
    namespace of its own), as those containers cover /proc/keys and others: a user namespace may then not mount
    a /proc of its own."""
    command = ["setpriv", "--bounding-set", "-sys_admin", *command]
    if masked_proc:
        covered = next(
            p for p in ("/proc/keys", "/proc/timer_list", "/proc/kcore", "/proc/sysrq-trigger") if Path(p).exists()
        )
        cover = f"mount --bind /dev/null {covered} && exec {shlex.join(command)}"
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", cover]
    return command


def user_namespaces_without_sys_admin() -> str | None:
    """Why the tests of bubblewrap without CAP_SYS_ADMIN cannot run here, found by trying; None where they can."""
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("setpriv", "unshare", "bwrap")):
        return "needs root, setpriv, unshare and bwrap"
    tried = subprocess.run(without_sys_admin(["unshare", "--user", "true"]), capture_output=True, text=True)
    if tried.returncode != 0:
        return f"root without CAP_SYS_ADMIN may not make a user namespace here: {tried.stderr.strip()}"
    return None


@pytest.mark.parametrize("masked_proc", [False, True], ids=["own-proc", "container-proc"])
def test_where_root_may_not_make_namespaces_bubblewrap_grades_in_a_user_namespace(tmp_path, masked_proc):
    """`--sandbox bubblewrap` as root without CAP_SYS_ADMIN (a rootful podman container, where `bwrap --unshare-user`
    works and plain bwrap as root does not): bubblewrap runs in a user namespace in which root and the jobs' uids
    are themselves, each job has its namespaces and uid, and the submission gets full marks; where the container
    covers parts of /proc, the jobs see the container's, and the notes say so."""
    problem = user_namespaces_without_sys_admin()
    if problem:
        pytest.skip(problem)
    results = tmp_path / "results.json"
    grade_here = [sys.executable, "-m", "cs_basics.cli", "grade", "--quiet", "--sandbox", "bubblewrap"]
    command = without_sys_admin([*grade_here, "--results", str(results)], masked_proc)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    data = json.loads(results.read_text())
    said = data["output"]
    assert data["score"] == pytest.approx(6.0) and "a bubblewrap sandbox in a user namespace" in said, said[:800]
    assert "as uid 6" in said and "its own namespaces" in said, said[:800]
    assert ("the container's /proc" in said) == masked_proc, said[:800]


KILLED_WHILE_MAPPING = """
import os, signal, sys
from pathlib import Path
import cs_basics.harness.grading.sandbox.bubblewrap as bubblewrap

fork, read = os.fork, os.read
def fork_and_say():
    pid = fork()
    if pid:
        Path(sys.argv[1]).write_text(str(pid))
    return pid
def read_then_die(fd, n):  # the grader killed once the fork has made its namespace, before the maps
    read(fd, n)
    os.kill(os.getpid(), signal.SIGKILL)
os.fork, os.read = fork_and_say, read_then_die
bubblewrap.user_namespace(range(61000, 61010))
"""


@needs_root
def test_the_user_namespaces_fork_ends_with_a_grader_killed_while_it_waits(tmp_path):
    """The fork that makes bubblewrap's user namespace waits for the grader to write the maps and kill it; a grader
    killed meanwhile takes it along (else it would wait for ever, holding the worker's locks and descriptors)."""
    if subprocess.run(["unshare", "--user", "true"], capture_output=True).returncode != 0:
        pytest.skip("root may not make a user namespace here")
    said, log = tmp_path / "pid", tmp_path / "stderr"
    with log.open("wb") as stderr:  # a file, not a pipe: a fork left alive would hold a pipe open
        done = subprocess.run([sys.executable, "-c", KILLED_WHILE_MAPPING, str(said)], stderr=stderr, timeout=120)
    assert done.returncode == -signal.SIGKILL, log.read_text()[-2000:]
    pid = int(said.read_text())
    deadline = time.monotonic() + 10  # the kernel's death signal is at once; its end may take a moment
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)
    left = alive(pid)
    if left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"the fork {pid} outlived its grader"


@pytest.fixture
def fresh_probe():
    """bubblewrap's probe run again in the test, and again after it (its answers are kept for the process)."""
    bubblewrap.bubblewrap_runs.cache_clear()
    bubblewrap.bubblewrap_sizes_tmpfs.cache_clear()
    yield
    bubblewrap.bubblewrap_runs.cache_clear()
    bubblewrap.bubblewrap_sizes_tmpfs.cache_clear()


FAILING_BWRAP = """#!/bin/sh
echo "bwrap: Creating new namespace failed: Operation not permitted" >&2
exit 1
"""


def test_why_bubblewrap_does_not_run_is_said_by_its_request_and_the_grades_note(tmp_path, monkeypatch, fresh_probe):
    """Not installed: the message says so and how to install it. Installed but refused each way the grader tries:
    bwrap's own words for each, in `--sandbox bubblewrap`'s error and in the note of a grade in the fallback."""
    if not portable.fork_server_runs():
        pytest.skip("bubblewrap needs Linux")
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    monkeypatch.setenv("PATH", str(bin_folder))
    with pytest.raises(ValueError, match=r"`bwrap` is not installed \(Debian, Ubuntu: apt-get install bubblewrap\)"):
        bubblewrap.choose_sandbox("bubblewrap")
    bubblewrap.bubblewrap_runs.cache_clear()
    (bin_folder / "bwrap").write_text(FAILING_BWRAP)
    (bin_folder / "bwrap").chmod(0o755)
    with pytest.raises(ValueError) as refused:
        bubblewrap.choose_sandbox("bubblewrap")
    said = str(refused.value)
    ways = ["as root", "in a user namespace of root and the jobs' uids"] if os.geteuid() == 0 else ["as this user"]
    assert said.startswith("bubblewrap was asked for, but `bwrap` cannot run here (")
    for way in ways:
        assert f"{way}: bwrap: Creating new namespace failed: Operation not permitted" in said, said
    monkeypatch.delenv(bubblewrap.SANDBOX_ENV, raising=False)
    with Worker(None, Limits()) as worker:
        assert worker.sandbox == "fallback"
        assert "the fallback sandbox (no bubblewrap: `bwrap` cannot run here (" in worker.describe()


# ---------------------------------------------------------------- killing by uid, without a PID namespace


def hidden_survivor(uid: int) -> int:
    """A process of `uid` in a session of its own whose parent has exited (not the test's child: only its uid
    finds it), as a submission's daemon; its pid."""
    script = "sleep 120 </dev/null >/dev/null 2>&1 & echo $!"
    shell = subprocess.Popen(
        ["sh", "-c", script], user=uid, group=uid, extra_groups=[], start_new_session=True, stdout=subprocess.PIPE
    )
    return int(shell.communicate(timeout=60)[0])


@pytest.fixture
def kills(monkeypatch) -> list[str]:
    """Each process kill_uid starts to signal as the uid: ("run", program) or ("fork",)."""
    started: list[str] = []
    run, fork = leases.subprocess.run, leases.os.fork
    monkeypatch.setattr(leases.subprocess, "run", lambda args, **kw: started.append(args[0]) or run(args, **kw))
    monkeypatch.setattr(leases.os, "fork", lambda: started.append("fork") or fork())
    return started


@needs_root
@LAST_UIDS
def test_killing_a_uid_with_no_process_says_none_is_left_and_starts_nothing(leased_uid, kills):
    """Where the uid has no process (each grading's clean-up, most often), /proc says so: no kill(-1) is sent,
    no process started, and kill_uid answers that none is left (kill(-1)'s own answer cannot say it: it succeeds
    wherever any other process exists, and fails where none does, whatever the uid had)."""
    assert processes_of(leased_uid) == []
    assert kill_uid(leased_uid) is True
    assert kills == []


@needs_root
@LAST_UIDS
@pytest.mark.parametrize("way", ["setpriv", "fork"])
def test_killing_a_uid_ends_a_hidden_survivor_and_says_none_is_left(leased_uid, kills, monkeypatch, way):
    """A daemon of the uid, in a session of its own (only its uid finds it): killed, with or without setpriv
    (debian:bookworm-slim has no `kill` program: the shell's own signals), and kill_uid says none is left."""
    if way == "setpriv" and shutil.which("setpriv") is None:
        pytest.skip("no setpriv here")
    which, gone = shutil.which, {"kill", "setpriv"} if way == "fork" else {"kill"}  # bookworm-slim has no `kill`
    monkeypatch.setattr(leases.shutil, "which", lambda name: None if name in gone else which(name))
    pid = hidden_survivor(leased_uid)
    try:
        assert processes_of(leased_uid) == [pid]
        assert kill_uid(leased_uid) is True
        assert processes_of(leased_uid) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert kills and set(kills) == ({"fork"} if way == "fork" else {shutil.which("setpriv")}), kills


def system_python() -> str:
    """The system's python3, which the job's uid may run (the suite's own Python may lie where it cannot go)."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 to run as the job's uid")
    return python


@needs_root
@LAST_UIDS
def test_a_process_whose_first_thread_ended_while_another_runs_is_found_and_killed(leased_uid):
    """A submission's `pthread_exit` in its main thread leaves its process "Z" in /proc while a thread of it runs
    on: taken for a zombie, it was no process of the uid, so kill_uid said none was left and the hidden phase could
    start beside it (where no PID namespace ends the job's processes)."""
    python = system_python()
    script = (
        "import ctypes, os, sys, threading, time\n"
        "threading.Thread(target=lambda: time.sleep(120)).start()\n"
        "print(os.getpid(), flush=True)\n"
        "ctypes.CDLL(None).pthread_exit(None)\n"
    )
    process = subprocess.Popen(
        [python, "-c", script], user=leased_uid, group=leased_uid, extra_groups=[], stdout=subprocess.PIPE, cwd="/"
    )
    try:
        pid = int(process.stdout.readline())
        for _ in range(1000):  # until its first thread has ended
            if leases.state(f"/proc/{pid}/stat") == b"Z":
                break
            time.sleep(0.01)
        assert leases.state(f"/proc/{pid}/stat") == b"Z"
        assert processes_of(leased_uid) == [pid]
        assert kill_uid(leased_uid) is True
        assert processes_of(leased_uid) == []
        assert process.wait(timeout=60) == -signal.SIGKILL
    finally:
        process.kill()
        process.wait()


@needs_root
@LAST_UIDS
def test_the_wait_for_a_core_of_a_uids_processes_counts_the_run_queue_not_a_sleep(leased_uid):
    """A case's clock (caseclock.py) reads by the job's uid how long its threads waited for a core: a process of the
    uid that computes for half a second on a core two busy processes share waits about a second for it, and none
    of the sleep that follows is counted."""
    python = system_python()
    script = (
        "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.5:\n    pass\n"
        "print('computed', flush=True)\ntime.sleep(120)\n"
    )
    before = leases.seconds_waiting_for_a_core(leased_uid)
    assert before is not None, "this kernel keeps no run queue delays (/proc/PID/schedstat)"
    mine, core = os.sched_getaffinity(0), min(os.sched_getaffinity(0))
    busy, process = [], None
    os.sched_setaffinity(0, {core})  # this thread's: the processes it starts inherit it
    try:
        busy = [subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"], start_new_session=True)]
        busy.append(subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"], start_new_session=True))
        process = subprocess.Popen(
            [python, "-c", script], user=leased_uid, group=leased_uid, extra_groups=[], stdout=subprocess.PIPE, cwd="/"
        )
        assert process.stdout.readline() == b"computed\n"
        waited = leases.seconds_waiting_for_a_core(leased_uid) - before
        for spinning in busy:
            spinning.kill()
        time.sleep(1.0)
        assert waited >= 0.4, waited  # a third of the core at most: a second's wait, give or take the scheduler
        assert leases.seconds_waiting_for_a_core(leased_uid) - before == pytest.approx(waited, abs=0.1)
    finally:
        for spinning in busy:
            spinning.kill()
            spinning.wait()
        if process is not None:
            process.kill()
            process.wait()
        os.sched_setaffinity(0, mine)


FREEZER = Path("/sys/fs/cgroup/freezer")  # cgroup v1's: a frozen task keeps SIGKILL pending until it is thawed


@needs_root
@LAST_UIDS
@pytest.mark.skipif(not (FREEZER / "tasks").exists(), reason="no cgroup v1 freezer here (v2's kills frozen tasks)")
def test_killing_a_uid_waits_for_a_killed_process_that_has_not_ended_yet(leased_uid):
    """A process that SIGKILL reached but that cannot end yet (here: frozen, and thawed after kill_uid's second of
    kills; on a grading machine: killed while it waits on a busy disk) is dying, and kill_uid waits for it instead
    of saying that a process could not be ended, which fails every hidden case of a correct submission."""
    group = FREEZER / f"cs-basics-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    pid = hidden_survivor(leased_uid)
    thaw = threading.Timer(2 * leases.KILL_SECONDS, lambda: (group / "freezer.state").write_text("THAWED"))
    try:
        (group / "tasks").write_text(str(pid))
        (group / "freezer.state").write_text("FROZEN")
        for _ in range(1000):
            if (group / "freezer.state").read_text().strip() == "FROZEN":
                break
            time.sleep(0.01)
        assert (group / "freezer.state").read_text().strip() == "FROZEN"
        os.kill(pid, signal.SIGKILL)
        assert leases.dying(pid) is True and processes_of(leased_uid) == [pid]
        thaw.start()
        assert kill_uid(leased_uid) is True
        assert processes_of(leased_uid) == []
    finally:
        thaw.cancel()
        (group / "freezer.state").write_text("THAWED")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        for _ in range(1000):  # the group can be removed once its task is gone
            with contextlib.suppress(OSError):
                group.rmdir()
                break
            time.sleep(0.01)


def test_killing_a_uid_waits_for_a_process_that_is_dying_and_gives_up_on_one_that_resists(monkeypatch):
    """A killed process that is still ending (the kernel holds it a while) is waited for: taken for one that could
    not be ended, it fails every hidden case of a correct submission. One that is not dying after the kills is given
    up on, as before; and a dying one, after DYING_SECONDS."""
    signals: list[int] = []
    monkeypatch.setattr(leases, "signal_all_as", signals.append)
    ends_at = time.monotonic() + 2 * leases.KILL_SECONDS
    monkeypatch.setattr(leases, "processes_of", lambda uid: [4242] if time.monotonic() < ends_at else [])
    monkeypatch.setattr(leases, "dying", lambda pid, uid: True)
    assert kill_uid(61999) is True
    assert signals and set(signals) == {61999}

    monkeypatch.setattr(leases, "processes_of", lambda uid: [4242])
    monkeypatch.setattr(leases, "dying", lambda pid, uid: False)
    signals.clear()
    assert kill_uid(61999) is False
    assert signals  # and given up on: it is not dying

    monkeypatch.setattr(leases, "dying", lambda pid, uid: True)
    monkeypatch.setattr(leases, "DYING_SECONDS", 2 * leases.KILL_SECONDS)
    assert kill_uid(61999) is False


@pytest.mark.parametrize(
    ("flags", "pending", "expected"),
    [(0, "0000000000000000", False), (leases.PF_EXITING, "0000000000000000", True), (0, "0000000000000100", True)],
)
def test_a_task_is_dying_when_it_exits_or_sigkill_is_pending(tmp_path, flags, pending, expected):
    """task_dying reads the flags after the task's name (which may hold ") ") and SIGKILL's bit in either pending
    mask, each on its own: a task that only has SIGTERM pending is not dying."""
    (tmp_path / "stat").write_text(f"4242 (a) b ) c) R 1 4242 4242 0 -1 {flags} 0 0 0 0\n")
    (tmp_path / "status").write_text(f"Name:\ta\nSigPnd:\t0000000000004000\nShdPnd:\t{pending}\n")
    assert leases.task_dying(str(tmp_path)) is expected


def test_a_live_process_is_not_dying_and_a_killed_one_is():
    """What kill_uid's wait reads from /proc: a process that runs is not dying; one that SIGKILL ended, while its
    pid is still there (not reaped: the kernel's exit flag is what /proc shows), is; so is a pid that is gone."""
    process = subprocess.Popen(["sleep", "60"])
    try:
        assert leases.dying(process.pid) is False
        os.kill(process.pid, signal.SIGKILL)
        os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: its pid stays in /proc
        assert Path(f"/proc/{process.pid}").exists()
        assert leases.dying(process.pid) is True
    finally:
        process.kill()
        process.wait()
    assert leases.dying(process.pid) is True  # gone


@pytest.fixture
def leased_uid(monkeypatch) -> Iterator[int]:
    """One of the last uids of the range, leased while the test runs: another grader on the machine (another
    checkout's tests) may have jobs as the others, whose files these tests' clean-up would delete."""
    last = UID_BASE + UID_COUNT - 1
    monkeypatch.setenv(UIDS_ENV, f"{last - 3}-{last}")
    uid, lease = lease_uid(wait=120)
    yield uid
    lease.close()


@needs_root
@LAST_UIDS
def test_without_namespaces_the_grader_deletes_what_the_jobs_uid_left(tmp_path, leased_uid):
    uid = leased_uid
    litter = Path(tempfile.mkdtemp(prefix="cs-basics-litter-"))
    (litter / "deep").mkdir()
    (litter / "deep" / "file").write_text("x")
    for path in (litter / "deep" / "file", litter / "deep"):
        os.chown(path, uid, uid)
    remove_litter(uid)
    assert litter.exists() and not (litter / "deep").exists()
    litter.rmdir()


@needs_root
@LAST_UIDS
def test_without_namespaces_the_grader_measures_what_the_jobs_uid_holds_in_the_temporary_folders(leased_uid):
    """The bound where a job has no tmpfs of its own (measured here on its own; test_fallback.py grades without
    namespaces end to end)."""
    uid = leased_uid
    hoard = Hoard(uid, limit_mb=8)
    files = [Path(f"/dev/shm/cs-basics-hoard-{uuid.uuid4().hex}"), Path(tempfile.mkdtemp()) / "deep"]
    try:
        for path, size in zip(files, (6 << 20, 4 << 20), strict=True):
            path.write_bytes(b"x" * size)
            os.chown(path, uid, uid)
        assert hoard.over() and not hoard.over()  # over the 8 MiB in all; measured again a second later
        files[0].unlink()
        hoard.due = 0.0
        assert not hoard.over()
    finally:
        remove_litter(uid)
        files[1].parent.rmdir()
    assert not any(path.exists() for path in files)


@needs_root
def test_a_job_whose_uid_holds_too_much_in_temporary_folders_fails_its_case(assignment, worker, tmp_path, monkeypatch):
    """The watch on the uid, as where a job has no namespaces, run here on the one folder a job with namespaces
    writes on the machine's /tmp (its outputs): the case that filled it fails, the cases after it are not run
    (what it wrote stays until the submission ends), and grading ends with a verdict."""
    hoard = functools.partial(Hoard, worker.uid, 16, (str(worker.root),))  # not all of this machine's busy /tmp
    monkeypatch.setattr(worker, "watch_hoard", hoard)
    fill = """
    if Q.shape == (2, 10, 16):
        import os, time
        for _n in range(64):
            with open(os.path.join(os.getcwd(), "..", "out", f"fill-{_n}"), "wb") as _f:
                _f.write(b"x" * (8 << 20))
            time.sleep(0.1)
    """
    result = graded(assignment, worker, submission(tmp_path, wrap_attention(fill)))
    ran = [t.output for t in result.tests if t.case.id == "scaled_dot_product_attention-causal_mask"]
    assert ran and "your code wrote over 16 MiB to /tmp" in ran[0]
    after = [t for t in result.tests if "not run: your code wrote over 16 MiB" in t.output]
    assert after and not any(t.passed for t in after) and result.score > 0


# ---------------------------------------------------------------- a grader that is not root


def test_without_a_uid_to_kill_by_the_server_ends_what_a_job_left_as_its_subreaper():
    """What a grader that is not root relies on: a job's double-forked, setsid daemon becomes the grading
    server's child (its subreaper), and the sweep after the job ends it. Runs as any user."""
    script = """
import os, socket, time
from cs_basics.harness.grading.job import zygote

ours, _theirs = socket.socketpair()
server = zygote.ForkServer(ours)
r, w = os.pipe()
if os.fork() == 0:  # the job: it leaves a daemon in a session of its own and exits
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(w, str(os.getpid()).encode())
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # the test's pipes are not held open by it
                os.dup2(null, fd)
            time.sleep(600)
        os._exit(0)
    os._exit(0)
daemon = int(os.read(r, 16))
time.sleep(0.2)
server.sweep()
try:
    os.kill(daemon, 0)
    print("left running", daemon)
except ProcessLookupError:
    print("gone")
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if done.stdout.startswith("left running"):
        os.kill(int(done.stdout.split()[-1]), signal.SIGKILL)
    assert done.stdout.strip() == "gone", done.stdout + done.stderr


@needs_root  # root lets this test run a job with no uid and no namespaces of its own, as a user's grader does
def test_a_grader_with_no_uid_to_kill_by_leaves_nothing_running_through_the_servers_sweep(assignment, tmp_path):
    daemon = f"""
    import os as _os, time as _time
    if _os.fork() == 0:  # a daemon in a session of its own, whose parent exits
        _os.setsid()
        if _os.fork() == 0:
            print("daemon", _os.getpid(), flush=True)  # Landlock lets the job write only in its own folder
            _null = _os.open(_os.devnull, _os.O_RDWR)
            for _fd in (0, 1, 2):
                _os.dup2(_null, _fd)
            _time.sleep({OUTLIVES_THE_TEST})  # alive when grading returns, unless the sweep ended it
        _os._exit(0)
    """
    with Worker("fallback", Limits(case_seconds=10, released=RELEASED), namespaces=False) as worker:
        worker.uid = None  # as for a grader that is not root: no uid to kill by, the server's sweep instead
        result = graded(assignment, worker, submission(tmp_path, daemon))
        pid = int(result.output.split("daemon ", 1)[1].split()[0])
        try:
            os.kill(pid, 0)
            left = True
        except ProcessLookupError:
            left = False
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert scores(result) == pytest.approx(FULL)
    assert not left, f"the daemon {pid} was still running when grading returned"


# ---------------------------------------------------------------- an environment reached through a link


@needs_bubblewrap
def test_a_venv_reached_through_a_link_grades_in_bubblewrap(tmp_path):
    """A CI runner restores the checkout's `.venv` as a link to its cache (the platform lab's GitHub Actions job): the
    sandbox binds the environment where the link leads, and the server is started from there, not through a path
    the sandbox does not have (bwrap: execvp ...: No such file or directory, and 0 points after 120 s)."""
    venv = tmp_path / "checkout" / ".venv"
    venv.parent.mkdir()
    venv.symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    python = venv / "bin" / Path(sys.executable).name
    results = tmp_path / "results.json"
    command = [str(python), "-m", "cs_basics.cli", "grade", "--quiet", "--sandbox", "bubblewrap"]
    done = subprocess.run([*command, "--results", str(results)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(results.read_text())["score"] == pytest.approx(6.0)


# ---------------------------------------------------------------- nothing left to a container's init

UNDER_AN_INIT_THAT_NEVER_REAPS = """
import ctypes, os, subprocess, sys

ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # a child subreaper, as a container's init is to all it holds
status = subprocess.run(sys.argv[1:]).returncode  # waits for its one child alone, as such an init does
zombies = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        continue
    state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
    if state == "Z" and parent == str(os.getpid()):
        zombies.append(stat[: stat.rindex(")") + 1])
print("status", status, "zombies", zombies)
"""


@needs_bubblewrap
def test_the_grade_command_leaves_no_zombie_to_a_containers_init(tmp_path):
    """Under an init that adopts orphans and never reaps them (PrairieLearn's and Kubernetes' containers, the
    platform lab's watch), `cs-basics grade` leaves no zombie: the probe of bubblewrap, before any worker, leaves
    its PID namespace's init an orphan, which the grader adopts as it starts and reaps."""
    command = [sys.executable, "-m", "cs_basics.cli", "grade", "--quiet", "--results", str(tmp_path / "results.json")]
    done = subprocess.run(
        [sys.executable, "-c", UNDER_AN_INIT_THAT_NEVER_REAPS, *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.stdout.splitlines()[-1:] == ["status 0 zombies []"], done.stdout[-2000:] + done.stderr[-3000:]


@needs_bubblewrap
def test_a_server_that_cannot_start_says_it_ended_not_that_time_ran_out(tmp_path, monkeypatch, capfd):
    """bwrap that cannot run the server's Python (a link the sandbox lacks) ends at once: the staff read that it ended
    and bwrap's own words, not that it "did not start in 120 s"."""
    monkeypatch.setattr(server, "interpreter", lambda: str(tmp_path / "no-such-python"))
    tmp_path.chmod(0o711)
    started = server.Server("bubblewrap", tmp_path, Limits())
    with pytest.raises(StaffError, match=r"ended as it started \(status 1; its own error is printed above\)"):
        started.ready()
    assert "no-such-python" in capfd.readouterr().err
