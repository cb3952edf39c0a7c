"""What the from-scratch rule costs each graded case (issue 31): nothing that grows with torch's operator list.

The forbidden operators are replaced at torch's dispatcher for every graded case; which of torch's ~3,600
operators the course's patterns match is worked out once per process, not once per case. The replacement
itself is still made and undone around each case: none of it reaches a test that is not graded.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

from cs_basics.harness.rule import record
from cs_basics.harness.rule.fromscratch import FromScratch
from cs_basics.harness.rule.syntax import Unreadable

from .submissions import ROOT

SOFTMAX = "softmax"


def test_the_operator_list_is_read_once_per_process(assignment, monkeypatch):
    reads = []
    list_names = torch._C._dispatch_get_all_op_names

    def counted() -> list[str]:
        reads.append(1)
        return list_names()

    monkeypatch.setattr(torch._C, "_dispatch_get_all_op_names", counted)
    record._operator_overloads.cache_clear()
    rule = FromScratch(assignment, ROOT)
    x = torch.randn(3, 4)
    for _ in range(5):
        with rule.watch(SOFTMAX), pytest.raises(Exception, match=record.UNAVAILABLE):
            torch.softmax(x, -1)
    assert len(reads) == 1


def test_the_forbidden_operators_are_those_fnmatch_finds(assignment):
    """One expression for all the patterns means what fnmatchcase means for each, for every operator torch has."""
    names = torch._C._dispatch_get_all_op_names()
    odd = ("aten._soft*", "aten.?oftmax", "aten._[!s]*softmax", "aten.[a-c]*", "aten.softmax", "")
    for patterns in [tuple(assignment.problems[SOFTMAX].forbidden_ops), odd, ("aten._softmax",)]:
        expected = sorted(name for name in names if any(fnmatch.fnmatchcase(op_name(name), p) for p in patterns))
        assert record.operator_overloads(patterns) == expected, patterns
        assert expected  # each set of patterns matches some operator


def op_name(overload: str) -> str:
    """ "aten::_softmax.out" -> "aten._softmax", the name the course's patterns match."""
    namespace, _, rest = overload.partition("::")
    return f"{namespace}.{rest.split('.')[0]}"


def test_no_pattern_forbids_no_operator():
    """An empty list of patterns (a problem that forbids nothing) is not an expression that matches everything."""
    assert record.operator_overloads([]) == []
    assert not record.forbids([], "aten._softmax")


AFTER = """
import torch
import torch.nn.functional as F


def test_torch_softmax_and_attention_after_the_graded_cases():
    x = torch.randn(2, 3, 4)
    assert torch.allclose(F.softmax(x, -1).sum(-1), torch.ones(2, 3))
    assert F.scaled_dot_product_attention(x, x, x).shape == (2, 3, 4)
"""


def test_a_graded_cases_override_does_not_reach_a_test_that_is_not_graded(tmp_path):
    """In one pytest run, the graded softmax cases (each with the operators replaced), then a plain test that
    calls torch's softmax and attention: they are back for it."""
    after = tmp_path / "test_after.py"
    after.write_text(textwrap.dedent(AFTER))
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-c",
        "pyproject.toml",
        "--rootdir",
        ".",
        "tests/test_softmax.py",
        str(after),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


PROBE = """
import pytest
from cs_basics.harness.pytest_plugin import STARTED_RULE


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("points") and not hasattr(item.config, "_probed"):
        item.config._probed = True
        rule = item.config.stash.get(STARTED_RULE, None)
        started = rule is not None and (rule._reading is not None or "scanned" in rule.__dict__)
        print("SCAN STARTED BEFORE THE FIRST GRADED TEST:", started)
"""


def test_pytest_starts_the_rules_scan_once_collection_finishes(tmp_path):
    """The scan's process (a fresh Python) reads while pytest sets up, not after the first graded test began."""
    (tmp_path / "scan_probe.py").write_text(PROBE)
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "scan_probe", "tests/test_softmax.py"]
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "SCAN STARTED BEFORE THE FIRST GRADED TEST: True" in done.stdout, done.stdout[-3000:]


FREEZE_PROBE = """
import gc

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("points") and not hasattr(item.config, "_probed"):
        item.config._probed = True
        print("OBJECTS FROZEN BEFORE THE FIRST GRADED TEST:", gc.get_freeze_count())
"""


def test_pytest_takes_what_collection_left_out_of_the_collectors_reach(tmp_path):
    """torch's and pytest's objects, there for the whole run, are frozen once collection finishes: the full
    collections that the graded cases' allocations set off walk only what the cases made, not torch's heap
    (they cost the student's loop about 0.8 s of CPU a run, issue 31)."""
    (tmp_path / "freeze_probe.py").write_text(FREEZE_PROBE)
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "freeze_probe", "tests/test_softmax.py"]
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    frozen = re.search(r"OBJECTS FROZEN BEFORE THE FIRST GRADED TEST: (\d+)", done.stdout)
    assert frozen and int(frozen.group(1)) > 100_000, done.stdout[-3000:]  # torch alone makes several hundred thousand


def test_the_scan_read_in_the_background_says_what_the_scan_says(assignment, tmp_path):
    """Its verdict, and its refusal: code it cannot read is Unreadable in the caller's thread."""
    background = FromScratch(assignment, ROOT)
    background.read_in_background()
    assert background.scanned == FromScratch(assignment, ROOT).scanned
    code = tmp_path / "code"
    shutil.copytree(ROOT / "cs_basics", code / "cs_basics", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", code / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    (code / "cs_basics" / "nn" / "deep.py").write_text("_DEEP = " + "+".join(["1"] * 200_000) + "\n")
    unreadable = FromScratch(assignment, code)
    unreadable.read_in_background()
    with pytest.raises(Unreadable):
        unreadable.scanned  # noqa: B018


def test_the_scan_read_in_the_background_starts_its_process_in_the_callers_thread(assignment, monkeypatch):
    """Before any case's record is on (pytest: once collection finishes), never later from the waiting thread,
    where a case's record would take it for the student's code starting a process."""
    threads = []
    popen = subprocess.Popen

    def noted(*args, **kwargs):
        threads.append(threading.current_thread())
        return popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", noted)
    rule = FromScratch(assignment, ROOT)
    rule.read_in_background()
    assert threads == [threading.current_thread()]
    assert rule.static == FromScratch(assignment, ROOT).static
