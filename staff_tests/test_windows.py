"""The student's side on a Python without Unix's modules (Windows's, as windows_like.py plays it): every
module imports, the handout's graded suite and `cs-basics grade` give the usual verdicts and messages.
Code that branches on `sys.platform` (which the played Python cannot change) is tested in-process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

import cs_basics.harness.grading.sandbox.worker as worker_module
from cs_basics.cli import main
from cs_basics.harness import portable
from cs_basics.harness.config import Assignment
from cs_basics.harness.course.handout import build
from cs_basics.harness.grading.pipeline.grade import grade
from cs_basics.harness.grading.sandbox.attempts import child_module, describe_exit
from cs_basics.harness.grading.sandbox.bubblewrap import bubblewrap_runs, choose_sandbox
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.worker import Worker
from cs_basics.harness.grading.writers.results import results_json
from cs_basics.study import bench

from .submissions import FUNCTIONAL, ROOT, said, submission
from .test_what_students_see import PRINTS_ITS_INPUTS, assert_hidden_stays_hidden
from .windows_like import MARK, windows_like_python

# the fork server: it runs only where portable.fork_server_runs() (Linux); elsewhere spawned.py takes its place
# the Linux fork server, and the job files only it loads (by path, never as part of `cs_basics`)
LINUX_ONLY = {"cs_basics.harness.grading.job.zygote", "cs_basics.harness.grading.job.reach"}
BUGS = {  # a softmax without the max subtracted, an attention without the scale: known mistakes of each problem
    "    exp = torch.exp(in_features - _max_along(in_features, dim))": "    exp = torch.exp(in_features)",
    "    P = softmax(S / math.sqrt(d_k), dim=-1)": "    P = softmax(S, dim=-1)",
}
NO_SCALE = "(known mistake: no_scale)"
SOFTMAX, ATTENTION = "softmax", "scaled_dot_product_attention"
# at import, a process in a session of its own (which ending the child's session misses) that prints once
# the hidden inputs exist: after every public case's process has ended
# a fork, not a program: graded code may start no program from before its first byte (child.forbid_exec)
LEAVES_A_PROCESS = """
import glob as _glob, os as _os, time as _time

if _os.fork() == 0:
    _os.setsid()
    for _ in range(1200):
        if _glob.glob("../inputs/hidden*"):
            print("LEFT BEHIND, SAW THE HIDDEN INPUTS", flush=True)
            break
        _time.sleep(0.05)
    _os._exit(0)
"""
CRASHES_ON_5D = """

def scaled_dot_product_attention(Q, K, V, mask=None):
    if Q.dim() == 5:
        import os

        os._exit(3)
    return _printing(Q, K, V, mask)
"""
PROBE = f"""
import os, select, signal, sys
for name in ("resource", "fcntl", "termios", "pwd", "grp", "_posixsubprocess"):
    try:
        __import__(name)
    except ImportError:
        pass
    else:
        sys.exit(name + " imported")
r, w = os.pipe()
try:
    select.select([r], [], [], 0)
except OSError:
    pass
else:
    sys.exit("select took a pipe")
print(hasattr(os, "fork"), hasattr(signal, "SIGHUP"), hasattr(os, "geteuid"), os.environ["{MARK}"])
"""
IMPORT_ALL = """
import importlib, json, pkgutil, sys
import cs_basics, tests
names, failed = [], {}
for package in (cs_basics, tests):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        names.append(info.name)
        try:
            importlib.import_module(info.name)
        except Exception as err:
            failed[info.name] = f"{type(err).__name__}: {err}"
print(json.dumps({"imported": names, "failed": failed}))
"""


@pytest.fixture(scope="module")
def windows_python(tmp_path_factory) -> Path:
    return windows_like_python(tmp_path_factory.mktemp("windows-like") / "venv")


@pytest.fixture(scope="module")
def handout(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("windows-handout") / "handout"
    build(Assignment.find(ROOT), out)
    return out


def student_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_PROJECT", "CS_BASICS"))}


def checkout(handout: Path, folder: Path, bugs: dict[str, str]) -> Path:
    """A student's copy of the handout with the reference solution, `bugs` (old -> new) put in."""
    shutil.copytree(handout, folder)
    text = (ROOT / FUNCTIONAL).read_text()
    for old, new in bugs.items():
        assert old in text, old
        text = text.replace(old, new)
    (folder / FUNCTIONAL).write_text(text)
    return folder


def start_pytest(python: Path, folder: Path) -> subprocess.Popen:
    command = [str(python), "-m", "pytest", "-m", "points", "-p", "no:cacheprovider", "--junitxml=report.xml"]
    return subprocess.Popen(command, cwd=folder, env=student_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def graded_verdicts(folder: Path) -> dict[str, str | None]:
    """Each graded test of the junit report: None if it passed, else its failure's message (the text after it
    has the traceback, whose reprs hold addresses)."""
    verdicts = {}
    for case in ET.parse(folder / "report.xml").getroot().iter("testcase"):
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        verdicts[case.get("name")] = None if failure is None else failure.get("message", "")
    return verdicts


def test_every_module_on_the_students_path_imports_without_unix(windows_python):
    """Every module of cs_basics (the pytest plugin, the rule, the grader, the CLI, the study) and tests/
    imports where `resource`, `fcntl`, `termios`, `pwd` and `grp` do not; only the Linux fork server (and reach.py,
    which only it loads) does not."""
    done = subprocess.run(
        [str(windows_python), "-c", IMPORT_ALL], cwd=ROOT, env=student_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert len(found["imported"]) > 40 and "cs_basics.harness.rule.scan" in found["imported"]
    assert {"cs_basics.harness.grading.job.spawned", "cs_basics.cli", "tests.adapters"} <= set(found["imported"])
    assert set(found["failed"]) == LINUX_ONLY, found["failed"]
    assert "fcntl" in found["failed"]["cs_basics.harness.grading.job.zygote"]  # the played Windows refused it


def test_the_played_windows_refuses_what_windows_lacks(windows_python):
    """The stand-in is faithful where it matters: no Unix modules, no fork, no SIGHUP, select on sockets only."""
    done = subprocess.run([str(windows_python), "-I", "-c", PROBE], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.split() == ["False", "False", "False", "1"], done.stdout + done.stderr


def test_the_handouts_graded_suite_passes_with_the_reference_without_unix(windows_python, handout, tmp_path):
    folder = checkout(handout, tmp_path / "student", {})
    run = start_pytest(windows_python, folder)
    output = run.communicate(timeout=600)[0].decode(errors="replace")
    verdicts = graded_verdicts(folder)
    graded = [c for c in Assignment.find(ROOT).cases if not c.hidden]  # the handout's: the public ones
    assert run.returncode == 0, output[-3000:]
    assert len(verdicts) == len(graded) and not any(verdicts.values()), output[-3000:]
    assert "cs_basics: the scan's memory limit needs Unix; on this machine it runs without it" in output


def test_a_buggy_solution_fails_in_pytest_and_grade_with_the_usual_messages_without_unix(
    windows_python, handout, tmp_path
):
    """Softmax without the max subtracted, attention without the scale: pytest gives the messages it gives
    on Linux, and `cs-basics grade` (the fallback sandbox, a fresh Python per group of cases) fails the same
    tests with the same first line; each attention test names the known mistake."""
    folder = checkout(handout, tmp_path / "student", BUGS)
    on_linux = checkout(handout, tmp_path / "linux", BUGS)
    tests, linux_tests = start_pytest(windows_python, folder), start_pytest(Path(sys.executable), on_linux)
    command = [str(windows_python), "-m", "cs_basics.cli", "grade", "--results", "results.json"]
    grade = subprocess.run(command, cwd=folder, env=student_env(), capture_output=True, text=True, timeout=600)
    output = tests.communicate(timeout=600)[0].decode(errors="replace")
    linux_tests.communicate(timeout=600)
    assert tests.returncode == 1, output[-3000:]
    assert grade.returncode == 0 and "Traceback" not in grade.stderr, grade.stdout[-2000:] + grade.stderr[-3000:]
    assert "a fresh Python per attempt (the fork server needs Linux)" in grade.stderr
    assert "limiting the memory and file size of the code's process needs Unix" in grade.stderr
    verdicts = graded_verdicts(folder)
    assert verdicts == {
        name: v and v.replace(str(on_linux), str(folder)) for name, v in graded_verdicts(on_linux).items()
    }
    data = json.loads((folder / "results.json").read_text())
    results = {t["name"]: t for t in data["tests"]}
    assert set(results) == set(verdicts)
    failed = {name for name, failure in verdicts.items() if failure}
    assert failed == {name for name, t in results.items() if t["status"] == "failed"}
    softmax = {name for name, t in results.items() if t["tags"] == ["softmax"]}
    assert softmax & failed and softmax - failed  # only the cases with inputs near 1e4 overflow
    assert len(failed - softmax) > len(results) // 2  # the scale matters to nearly every attention case
    for name in failed:
        message = said(data, results[name])  # a hidden case's as the staff read it
        assert message.splitlines()[0] in verdicts[name], name
        assert name in softmax or (NO_SCALE in verdicts[name] and NO_SCALE in message), name
    assert 0 < json.loads((folder / "results.json").read_text())["score"] < 1


@pytest.mark.parametrize("platform", ["win32", "darwin"])
def test_linux_only_defences_stay_off_elsewhere(monkeypatch, platform):
    """Where `sys.platform` decides: no fork server, no bubblewrap, no uid lease, no seccomp (never reached)."""
    child = child_module()

    def reached(machine: str) -> None:
        raise AssertionError(f"seccomp reached on {platform}")

    monkeypatch.setattr(child, "seccomp_program", reached)
    monkeypatch.setattr(sys, "platform", platform)
    bubblewrap_runs.cache_clear()
    try:
        assert not portable.fork_server_runs()
        assert child.forbid_new_processes() is False
        assert choose_sandbox() == "fallback"
        with pytest.raises(ValueError, match="bubblewrap was asked for, but it needs Linux"):
            choose_sandbox("bubblewrap")
        with Worker() as worker:
            assert worker.spawns and worker.uid is None and worker.lease is None and not worker.isolated
            assert (worker.root / "tool" / "spawned.py").is_file()
            assert "a fresh Python per attempt" in worker.describe()
            assert any("needs Linux" in note for note in worker.skipped())
    finally:
        monkeypatch.undo()
        bubblewrap_runs.cache_clear()


def test_how_a_spawned_child_ended_is_said_as_the_fork_server_says_it():
    assert describe_exit(0) == "exited with status 0"
    assert describe_exit(-9) == "was killed by signal SIGKILL"
    assert describe_exit(0xC00000FD) == "crashed (exception 0xC00000FD)"  # Windows: a stack overflow


def test_bench_on_a_cpu_without_proc_times_both_and_says_why_memory_is_empty(monkeypatch, capsys, tmp_path):
    """macOS and Windows have no /proc to read the CPU's peak from (the child that reads it fails, which
    once read as "out of memory" and skipped every implementation): the times are still measured."""
    monkeypatch.setattr(bench, "is_linux", lambda: False)
    monkeypatch.setattr(bench, "cpu_peak_mib", lambda *args: None)  # what the child gives without /proc
    args = ["bench", "--seq", "32", "--batch", "1", "--heads", "2", "--head-dim", "8", "--repeats", "1"]
    assert main([*args, "--device", "cpu", "--json", str(tmp_path / "b.json")]) == 0
    assert "measuring the CPU's peak memory needs Linux's /proc (WSL on Windows)" in capsys.readouterr().err
    rows = json.loads((tmp_path / "b.json").read_text())["measurements"]
    assert len(rows) == 4 and all(r["median_ms"] > 0 and r["peak_mib"] is None for r in rows)


@pytest.fixture(scope="module")
def spawning_worker():
    """A worker of the fallback sandbox as on a machine without the fork server (Windows, macOS)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(worker_module, "fork_server_runs", lambda: False)
        with Worker("fallback", Limits(case_seconds=20, released=(SOFTMAX, ATTENTION))) as worker:
            assert worker.spawns
            yield worker


def test_without_a_fork_server_hidden_stays_hidden_and_a_case_that_kills_python_fails_alone(
    assignment, spawning_worker, tmp_path
):
    """A fresh Python per group of cases keeps the hidden phase apart as the forked children do, and a case
    that ends the interpreter (5D inputs: one public case, one hidden) fails alone: a fresh one takes the rest."""
    crash = "\n_printing = scaled_dot_product_attention\n" + CRASHES_ON_5D
    result = grade(
        assignment, submission(tmp_path, PRINTS_ITS_INPUTS + crash), torch.device("cpu"), worker=spawning_worker
    )
    data = json.loads(json.dumps(results_json(result)))
    assert_hidden_stays_hidden(assignment, data, "the fallback without a fork server")
    assert data["extra_data"]["cs_basics"]["sandbox"] == {"name": "fallback", "uid": None, "namespaces": False}
    failed = {t.case.id: t.output for t in result.tests if not t.passed}
    five_d = {c.id for c in assignment.cases if "5d" in c.id}
    assert set(failed) == five_d and {c.hidden for c in assignment.cases if c.id in five_d} == {True, False}, failed
    crashed = "the Python process running your code exited with status 3 during this case"
    assert all(crashed in message for message in failed.values()), failed


def test_without_a_fork_server_what_a_process_left_behind_prints_later_reaches_no_public_field(
    assignment, spawning_worker, tmp_path
):
    """No uid to kill by there: a process that escaped the child's session outlives it. What it prints once
    the hidden inputs exist goes to no file (the public attempts' pipes are no longer read into any log)."""
    folder = submission(tmp_path, LEAVES_A_PROCESS)
    result = grade(assignment, folder, torch.device("cpu"), worker=spawning_worker)
    data = json.loads(json.dumps(results_json(result)))
    assert data["score"] == pytest.approx(6.0), data["output"]
    # the hidden phase's own left-behind processes print while its cases run: kept for the staff's API only
    assert "LEFT BEHIND" in "\n".join(t.printed for t in result.tests if t.case.hidden)
    assert "LEFT BEHIND" not in json.dumps(data)
