"""The scan never fails on valid Python (issue 36): programs generated from Python's grammar and from LibCST's
node types (hypothesmith), raw text inside f-strings' expressions, and every real solution and student folder
in this repository, each read whole.

A scan that raised on any of them would be "the grader's scan failed" for the staff, 0 on every problem; the scan
must instead give a verdict. It does, even for its own bugs (a problem it cannot describe is held for a reading),
and these tests ask more: that it describes every one of them, without that fallback. Bounded and derandomized:
the same examples on every run, in a few seconds.
"""

from __future__ import annotations

import ast
import shutil
import tempfile
import warnings
from pathlib import Path

import hypothesmith
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cs_basics.harness.rule.constructs import constructs
from cs_basics.harness.rule.fromscratch import FromScratch
from cs_basics.harness.rule.program import Module, Program
from cs_basics.harness.rule.scan import scan
from cs_basics.harness.rule.syntax import references

from .submissions import ROOT

FUZZ = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
UNJUDGED = "code this scan could not read"


def read_whole(source: str) -> None:
    """Every part of the scan on `source` as a student module: its names, what it reaches, its constructs."""
    module = Module("cs_basics.nn.functional", "cs_basics/nn/functional.py", source)
    program = Program([module])
    list(references(module.tree))
    program.uses(program.reachable((module.name, name) for name in module.defs), ["torch.softmax"])
    program.runs([(module.name, name) for name in module.defs], [module.name])
    constructs(module, program, [module.tree])


def scanned_as_a_submission(assignment, source: str) -> dict:
    """scan.scan on a copy of this package whose functional.py is `source` (as the grader's scan process runs it)."""
    with tempfile.TemporaryDirectory() as folder:
        code = Path(folder)
        shutil.copytree(ROOT / "cs_basics" / "nn", code / "cs_basics" / "nn", ignore=shutil.ignore_patterns("__py*"))
        (code / "cs_basics" / "__init__.py").write_text("")
        (code / "cs_basics" / "nn" / "functional.py").write_text(source)
        (code / "tests").mkdir()
        shutil.copy(ROOT / "tests" / "adapters.py", code / "tests" / "adapters.py")
        return scan(FromScratch(assignment, code)._job())


def assert_judged(found: dict) -> None:
    for problem, (_, held) in found.items():
        assert not any(UNJUDGED in str(c) for c in held), (problem, held)


def generated(source: str) -> bool:
    """Whether CPython's own parser takes it (hypothesmith's grammar is a little wider than 3.11's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences in the generated strings
        try:
            ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False
    return True


@FUZZ
@given(source=hypothesmith.from_grammar())
def test_programs_from_pythons_grammar_are_read_whole(source):
    if generated(source):
        read_whole(source)


@settings(FUZZ, max_examples=5)
@given(source=hypothesmith.from_node(auto_target=False))
def test_programs_from_libcsts_nodes_are_read_whole(source):
    if generated(source):
        read_whole(source)


@settings(FUZZ, max_examples=3)
@given(source=hypothesmith.from_node(auto_target=False))
def test_generated_submissions_get_a_verdict_from_the_scan(assignment, source):
    if generated(source):
        assert_judged(scanned_as_a_submission(assignment, source))


# text with the characters a source file may hold raw inside an f-string's expression part (control characters
# among them), none that would end the string or the expression
RAW_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="'\"{}\\\n\r\x00"), max_size=4)


@FUZZ
@given(text=RAW_TEXT)
def test_strings_in_an_f_strings_expression_are_read_whole(text):
    """Where ast.unparse fails (a raw control character it must escape inside an expression part)."""
    for source in (f"x = getattr(f\"{{'{text}'}}\", name)\n", f"def f(n):\n    setattr(f'{{\"{text}\"!r}}', n, 1)\n"):
        if generated(source):
            read_whole(source)


def test_the_scans_own_worst_cases_are_read_whole(assignment):
    """What the fuzzing found, and its neighbours: expressions ast.unparse cannot write back."""
    for source in [
        "x = getattr(f\"{'\x01'}\", name)\n",
        "x = getattr(f\"{'\x1b'}{y!r:>{w}}\", name)\n",
        "def softmax(x, dim):\n    return setattr(f'''{'\x7f'}''', n, 1)\n",
    ]:
        read_whole(source)
        assert_judged(scanned_as_a_submission(assignment, source))


def folders() -> list[Path]:
    """Every real solution and student folder in this repository: the reference, the example course's, and
    staff_tests/students (honest or not)."""
    found = [ROOT / "cs_basics" / "nn", ROOT / "cs_basics" / "study", ROOT / "examples" / "multihead_attention"]
    return found + sorted(p.parent / "cs_basics" for p in (ROOT / "staff_tests" / "students").glob("*/expected.toml"))


@pytest.mark.parametrize("folder", folders(), ids=lambda f: f.parent.name if f.name == "cs_basics" else f.name)
def test_every_solution_in_the_repository_is_read_whole(folder):
    files = [p for p in sorted(folder.rglob("*.py")) if not {"__pycache__", ".venv"} & set(p.parts)]
    assert files, folder
    for path in files:
        read_whole(path.read_text())
