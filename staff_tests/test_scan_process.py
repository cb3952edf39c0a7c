"""The static scan's bounded process (rule/scanprocess.py), both ways: a fresh Python per scan (the students'
pytest run, and the grader where it cannot fork) and a fresh fork of a grading worker's warm scan process.

Each bound gives the same verdict both ways (too deep, too large for its memory, over its time, killed by a
signal, a failed scan); the warm process goes on after a scan is killed, starts anew after one runs out of
time, never holds a submission's code itself, and ends with its worker and with the grader.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cs_basics.harness.grading.pipeline.grade import static_breaches
from cs_basics.harness.grading.sandbox.worker import Worker
from cs_basics.harness.rule.fromscratch import FromScratch
from cs_basics.harness.rule.scanprocess import SCAN_SECONDS, Scanner, scan_bounded, scan_result, start_scan
from cs_basics.harness.rule.syntax import Unreadable

from .probes import alive
from .submissions import ROOT, submission

LARGE = "X = [" + ",".join(['(1, 2.5, "a")'] * 100_000) + "]\n"  # 1.4 MB: a second or more, and ~500 MiB, to parse
DEEP = "_DEEP = " + "+".join(["1"] * 200_000) + "\n"  # test_bounds.py's HOSTILE["200000_terms"]
SMALL_MEMORY = 64 << 20  # too little to parse LARGE (the scan thread's stack comes on top)


@pytest.fixture(params=["fresh", "warm"])
def scanner(request):
    """None (a fresh Python per scan) or a warm scan process, ended after the test."""
    if request.param == "fresh":
        yield None
        return
    warm = Scanner()
    yield warm
    warm.close()


def job_with(assignment, tmp_path: Path, name: str, source: str) -> dict:
    """The scan's job for the reference solution with one more module of the student's, `name`.py."""
    code = submission(tmp_path / name)
    shutil.copytree(ROOT / "tests", code / "tests", ignore=shutil.ignore_patterns("__pycache__"))  # the adapters
    (code / "cs_basics" / "nn" / f"{name}.py").write_text(source)
    return FromScratch(assignment, code)._job()


def reference_job(assignment) -> dict:
    return FromScratch(assignment, ROOT)._job()


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def wait_for(condition, seconds: float = 120.0):  # a bound for a hang: on a loaded machine a fork may wait
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.005)
    raise AssertionError(f"still not so after {seconds} s")


def peak_memory(pid: int) -> int:
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmHWM"))
    return int(line.split()[1]) << 10


# ---------------------------------------------------------------- the same verdicts both ways


def test_the_scan_finds_the_same_both_ways(assignment, scanner):
    assert scan_bounded(reference_job(assignment), scanner=scanner) == scan_bounded(reference_job(assignment))


def test_code_nested_too_deeply_is_unreadable(assignment, tmp_path, scanner):
    with pytest.raises(Unreadable, match=r"^cs_basics/nn/deep\.py is nested too deeply to read$"):
        scan_bounded(job_with(assignment, tmp_path, "deep", DEEP), scanner=scanner)


def test_code_needing_more_memory_than_the_scan_has_is_unreadable(assignment, tmp_path, scanner):
    """Its address space is bounded in the process that parses, whichever it is; with the default 1 GiB the
    same code parses (in the same warm process: one scan's limit is not the next one's)."""
    job = job_with(assignment, tmp_path, "large", LARGE)
    with pytest.raises(Unreadable, match=r"^cs_basics/nn/large\.py needs more memory to read than the grader gives$"):
        scan_bounded(job, memory=SMALL_MEMORY, scanner=scanner)
    assert scan_bounded(job, scanner=scanner) == scan_bounded(reference_job(assignment))


def test_a_scan_over_its_time_is_unreadable_and_killed(assignment, tmp_path, scanner):
    """The warm process is killed with its child; the next scan starts a new one."""
    job = job_with(assignment, tmp_path, "large", LARGE)
    with pytest.raises(Unreadable, match=r"^reading it took the grader over 0 s$"):
        scan_bounded(job, seconds=0.2, scanner=scanner)
    if scanner is not None:
        assert scanner.process is None
        assert scan_bounded(reference_job(assignment), scanner=scanner) == scan_bounded(reference_job(assignment))


def test_a_failed_scan_is_the_staffs_error_with_its_traceback(assignment, scanner):
    """A bug in the scan (here: a job without its problems) is no verdict on the student's code."""
    job = reference_job(assignment)
    del job["problems"]
    with pytest.raises(RuntimeError, match=r"(?s)^the grader's scan failed:\n.*KeyError: 'problems'"):
        scan_bounded(job, scanner=scanner)
    assert scan_bounded(reference_job(assignment), scanner=scanner) == scan_bounded(reference_job(assignment))


def test_a_fresh_scan_killed_by_a_signal_is_unreadable(assignment):
    process, request = start_scan(reference_job(assignment))
    process.kill()
    with pytest.raises(Unreadable, match=r"^the grader's reader of it was killed by signal 9$"):
        scan_result(process, request)


# ---------------------------------------------------------------- the warm process


def scan_in_thread(scanner: Scanner, job: dict) -> tuple[threading.Thread, dict]:
    answer: dict = {}

    def work() -> None:
        try:
            answer["found"] = scanner.scan(job)
        except Exception as err:
            answer["error"] = err

    thread = threading.Thread(target=work)
    thread.start()
    return thread, answer


def test_a_warm_scan_killed_by_a_signal_is_unreadable_and_the_next_scan_reads(assignment, tmp_path):
    """The child scanning is killed (as a stack overflow or the kernel would): the same verdict as a fresh
    Python's, and the same warm process reads the next submission."""
    warm = Scanner()
    try:
        assert scan_bounded(reference_job(assignment), scanner=warm) == scan_bounded(reference_job(assignment))
        server = warm.process.pid
        thread, answer = scan_in_thread(warm, job_with(assignment, tmp_path, "large", LARGE))
        (scanning,) = wait_for(lambda: children(server))
        os.kill(scanning, signal.SIGKILL)
        thread.join(60)
        assert isinstance(answer.get("error"), Unreadable), answer
        assert str(answer["error"]) == "the grader's reader of it was killed by signal 9"
        assert scan_bounded(reference_job(assignment), scanner=warm) == scan_bounded(reference_job(assignment))
        assert warm.process.pid == server
    finally:
        warm.close()


def fd_target(pid: int, fd: int) -> str | None:
    """What a process's descriptor is open on ("pipe:[123]"), None where it cannot be read."""
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None


def test_a_warm_process_that_dies_mid_scan_is_the_staffs_error_not_a_hang(assignment, tmp_path):
    """The warm process killed (the kernel's OOM killer, say) while its child scans: the grader hears its end at
    once, not at the scan's time limit, and the next scan starts a new one. The child is stopped first, so it
    never ends by itself: a grader that waited for the child (its copy of the reply pipe) would report the
    scan's time limit instead."""
    warm = Scanner()
    try:
        scan_bounded(reference_job(assignment), scanner=warm)
        server = warm.process.pid
        thread, answer = scan_in_thread(warm, job_with(assignment, tmp_path, "large", LARGE))
        (scanning,) = wait_for(lambda: children(server))
        # stopped only once it has set its parent-death signal and put its own pipe over the reply pipe it
        # inherited (its fd 1): stopped before, it would hold the reply open with no signal to end it, which no
        # grader can tell from a slow scan (a loaded machine stopped it there once)
        wait_for(lambda: fd_target(scanning, 1) not in (None, fd_target(server, 1)))
        os.kill(scanning, signal.SIGSTOP)
        os.kill(server, signal.SIGKILL)
        thread.join(SCAN_SECONDS + 60)
        assert isinstance(answer.get("error"), RuntimeError), answer
        assert str(answer["error"]) == "the grader's scan failed: its warm process ended (exit code -9)"
        assert scan_bounded(reference_job(assignment), scanner=warm) == scan_bounded(reference_job(assignment))
        assert warm.process.pid != server
    finally:
        warm.close()


def test_each_scan_runs_in_a_fork_the_warm_process_never_parses(assignment, tmp_path):
    """The warm process's own peak memory stays where it was while a file that takes hundreds of MiB to parse
    is scanned: the syntax tree lived in a child, gone with it, so nothing of it reaches the next scan."""
    warm = Scanner()
    try:
        scan_bounded(reference_job(assignment), scanner=warm)
        before = peak_memory(warm.process.pid)
        scan_bounded(job_with(assignment, tmp_path, "large", LARGE), scanner=warm)
        grown = peak_memory(warm.process.pid) - before
        assert grown < 16 << 20, f"the warm process's peak memory rose by {grown >> 20} MiB"
    finally:
        warm.close()


GRADER = """
import sys
from cs_basics.harness.rule.scanprocess import Scanner
warm = Scanner()
warm.scan({"code": "/", "files": [], "adapters": "a", "adapters_path": "/a.py", "problems": {}})
print(warm.process.pid, flush=True)
warm.scan(eval(sys.stdin.read()))
"""


def test_the_warm_process_and_its_child_end_with_the_grader(assignment, tmp_path):
    """A grader killed mid-scan (SIGKILL: nothing of it runs after) leaves no scan process behind: both end
    without the scan being done (the child scanning is stopped first, so it never finishes by itself)."""
    job = job_with(assignment, tmp_path, "large", LARGE)
    grader = subprocess.Popen(
        [sys.executable, "-c", GRADER], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        server = int(grader.stdout.readline())
        grader.stdin.write(repr(job))
        grader.stdin.close()
        (scanning,) = wait_for(lambda: children(server))
        # stopped only once it has set its parent-death signal and put its own pipe over the reply pipe it
        # inherited (its fd 1): stopped before, it would hold the reply open with no signal to end it, which no
        # grader can tell from a slow scan (a loaded machine stopped it there once)
        wait_for(lambda: fd_target(scanning, 1) not in (None, fd_target(server, 1)))
        os.kill(scanning, signal.SIGSTOP)
    finally:
        grader.kill()
        grader.wait()
    wait_for(lambda: not alive(server) and not alive(scanning))


def test_a_worker_scans_in_its_warm_process_and_ends_it(assignment, tmp_path):
    """The grader's static breaches through a worker's warm scan process: the same as a fresh Python's, one
    warm process for every submission, gone once the worker closes."""
    worker = Worker("fallback")
    try:
        code = submission(tmp_path / "right")
        found = static_breaches(assignment, code, [], scanner=worker.scanner)
        assert found == static_breaches(assignment, code, [])
        server = worker.scanner.process.pid
        static_breaches(assignment, code, [], scanner=worker.scanner)
        assert worker.scanner.process.pid == server
    finally:
        worker.close()
    assert not alive(server)
