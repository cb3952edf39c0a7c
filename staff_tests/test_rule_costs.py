"""What the from-scratch rule costs each graded case (issue 31): nothing that grows with torch's operator list.

The forbidden operators are replaced at torch's dispatcher for every graded case; which of torch's ~3,600
operators the course's patterns match is worked out once per process, not once per case. The replacement
itself is still made and undone around each case: none of it reaches a test that is not graded.
"""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import textwrap

import pytest
import torch

from cs_basics.harness.rule import record
from cs_basics.harness.rule.fromscratch import FromScratch

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
