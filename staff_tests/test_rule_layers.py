"""The from-scratch rule does not rest on the student's process's word about itself (issue 24.1, 20.4).

Each attack below would keep every point if the grader believed the record the student's own process
sends. Three layers stop them, and each test says which: the forbidden operators are not there (torch's
dispatcher raises for them), code that reaches into the interpreter is held for the staff's review, and
torch's private code is a forbidden name. Starting a process while a case runs breaks the rule too.
Honest code, in the styles students write, is held by none of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import torch

from cs_basics.harness.rule.fromscratch import HELD, FromScratch
from cs_basics.harness.rule.scan import Module, Program, constructs

from .submissions import ROOT, run, scores
from .test_from_scratch import (
    ATTENTION,
    INLINE_WEIGHTS,
    SOFTMAX,
    SOFTMAX_FROM_SCRATCH,
    attention_with,
    pytest_verdicts,
    source,
    student,
)

STUDENTS = Path(__file__).parent / "students"
CHILD = ROOT / "cs_basics" / "harness" / "grading" / "child.py"  # loaded by path, as the grading server does
# Where a test's attack could behave differently in each sandbox (a process started inside a pid namespace or
# not), it runs in both; a record forged or library code called inside the child is the same in either, and
# runs in the default one (bubblewrap where it runs).
SANDBOXES = ["bubblewrap", "fallback"]

# the built-in attention reached through a name built at run time: invisible to the names scan
BUILTIN_ATTENTION = 'getattr(F, "scaled_dot_product_" + "attention")(Q, K, V, attn_mask=mask)'
DECOMP_SOFTMAX = """
from torch._decomp import decompositions


def softmax(in_features, dim):
    return decompositions._softmax(in_features, dim, False)
"""
# each forges what the child reports, then calls the built-in
FORGERIES = {
    "record_to_json": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    for name, module in list(sys.modules.items()):
        if name.endswith("harness.record"):
            module.Record.to_json = lambda self: {"sightings": [], "tampering": [], "processes": []}
    return BUILTIN
""",
    "watch_exit": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    watch = sys.modules["cs_basics.harness.rule.record"].Watch
    if not hasattr(watch, "_forged"):
        original = watch.__exit__

        def forged_exit(self, *exc):
            original(self, *exc)
            self.record.sightings.clear()

        watch.__exit__, watch._forged = forged_exit, True
    return BUILTIN
""",
    "reporter": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    frame = sys._getframe()
    while frame is not None:
        reporter = frame.f_locals.get("report")
        if reporter is not None and hasattr(reporter, "send") and not hasattr(type(reporter), "_forged"):
            send = type(reporter).send

            def quiet(self, **event):
                event.pop("record", None)
                return send(self, **event)

            type(reporter).send, type(reporter)._forged = quiet, True
        frame = frame.f_back
    return BUILTIN
""",
}
FORGED_NAMES = {"record_to_json": "sys.modules", "watch_exit": "sys.modules", "reporter": "sys._getframe"}

# the built-in computed in another process and read back through a pipe
FORK_SOFTMAX = """
import numpy as np


def softmax(in_features, dim):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        out = getattr(torch, "soft" + "max")(in_features.detach(), dim)
        os.write(write, out.double().numpy().tobytes())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.waitpid(pid, 0)
    values = np.frombuffer(data, dtype=np.float64).reshape(in_features.shape)
    return torch.from_numpy(values.copy()).to(in_features.dtype)
"""
POOL_ATTENTION = """
import multiprocessing


def _builtin(args):
    Q, K, V, mask = args
    return getattr(F, "scaled_dot_product_" + "attention")(Q, K, V, attn_mask=mask)


def scaled_dot_product_attention(Q, K, V, mask=None):
    with multiprocessing.get_context("{context}").Pool(1) as pool:
        args = (Q.detach(), K.detach(), V.detach(), mask)
        return pool.map(_builtin, [args])[0]
"""
HEADER_SYS = "import os\nimport sys\n"


def graded(assignment, tmp_path, functional: str, sandbox: str | None = None, released=()) -> tuple[dict, dict]:
    """(scores by problem, the first failure message by problem)."""
    folder = student(tmp_path, functional, name=f"student-{sandbox}-{'-'.join(released)}")
    result = run(assignment, folder, sandbox=sandbox, released=tuple(released))
    first = {}
    for t in result.tests:
        if not t.passed:
            first.setdefault(t.case.problem, t.output)
    return scores(result), first


def pytest_messages(assignment, folder: Path, released=()) -> dict[str, str]:
    """The first failure message per problem in the students' pytest run (the same rule, in-process)."""
    first, problems = {}, {case.id: case.problem for case in assignment.cases}
    for case_id, message in pytest_verdicts(
        assignment, folder, released, catch=(Exception, pytest.fail.Exception)
    ).items():
        if message is not None:
            first.setdefault(problems[case_id], message)
    return first


# ---------------------------------------------------------------- library code, forged records, processes


def test_a_softmax_from_torch_decompositions_gets_0_naming_it(assignment, tmp_path):
    got, first = graded(assignment, tmp_path, source(DECOMP_SOFTMAX, attention_with(INLINE_WEIGHTS)))
    assert got == pytest.approx({SOFTMAX: 0.0, ATTENTION: 5.0}), first
    assert "uses torch._decomp.decompositions._softmax at cs_basics/nn/functional.py:" in first[SOFTMAX]


@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_record_forged_from_inside_is_held_naming_the_construct(assignment, tmp_path, forgery):
    functional = HEADER_SYS + source(SOFTMAX_FROM_SCRATCH, FORGERIES[forgery].replace("BUILTIN", BUILTIN_ATTENTION))
    got, first = graded(assignment, tmp_path, functional)
    assert got == pytest.approx({SOFTMAX: 1.0, ATTENTION: 0.0}), first
    assert HELD in first[ATTENTION] and FORGED_NAMES[forgery] in first[ATTENTION], first[ATTENTION]
    assert HELD in pytest_messages(assignment, student(tmp_path, functional, name="pytest"))[ATTENTION]


@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_forged_record_released_by_the_staff_still_gets_0_from_the_dispatcher(assignment, tmp_path, forgery):
    """Released from the hold, the forgery works: the child reports nothing. The built-in raised anyway."""
    functional = HEADER_SYS + source(SOFTMAX_FROM_SCRATCH, FORGERIES[forgery].replace("BUILTIN", BUILTIN_ATTENTION))
    got, first = graded(assignment, tmp_path, functional, released=[ATTENTION])
    assert got == pytest.approx({SOFTMAX: 1.0, ATTENTION: 0.0}), first
    assert "aten.scaled_dot_product_attention" in first[ATTENTION], first[ATTENTION]
    assert "torch refused it" in first[ATTENTION] or "ran these operators" in first[ATTENTION], first[ATTENTION]


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_the_built_in_run_in_another_process_gets_0(assignment, tmp_path, context, sandbox):
    """Softmax forks and reads torch's softmax back through a pipe; attention asks a multiprocessing pool.
    Released from the hold (multiprocessing and runtime names), both break the rule by starting a process."""
    functional = HEADER_SYS + source(FORK_SOFTMAX, POOL_ATTENTION.format(context=context))
    both = [SOFTMAX, ATTENTION]
    got, first = graded(assignment, tmp_path, functional, sandbox, released=both)
    assert got == pytest.approx({SOFTMAX: 0.0, ATTENTION: 0.0}), first
    for problem, how in ((SOFTMAX, "os.fork"), (ATTENTION, "fork_exec" if context == "spawn" else "os.fork")):
        assert "started a process" in first[problem] and how in first[problem], first[problem]
        assert "graded code must compute in its own process" in first[problem]
    in_pytest = pytest_messages(assignment, student(tmp_path, functional, name="pytest"), released=both)
    assert all("started a process" in in_pytest[p] for p in both), in_pytest
    _, held = graded(assignment, tmp_path, functional, sandbox)  # not released: the constructs hold it first
    assert HELD in held[ATTENTION] and "multiprocessing" in held[ATTENTION], held


# ---------------------------------------------------------------- honest code is held by nothing


def honest_folders() -> list[Path]:
    """Every solution in staff_tests/students/ that is written from scratch (ours and the diagnosis set)."""
    found = []
    for expected in sorted(STUDENTS.glob("*/expected.toml")):
        if tomllib.loads(expected.read_text()).get("from_scratch") is True:
            found.append(expected.parent)
    return found


def as_submission(tmp_path: Path, folder: Path) -> Path:
    """A student folder with the course's adapters beside it, as the grader stages it."""
    copy = tmp_path / folder.name
    shutil.copytree(folder / "cs_basics", copy / "cs_basics", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "adapters.py", copy / "tests" / "adapters.py")
    return copy


def findings(assignment, folder: Path) -> dict[str, list[str]]:
    rule = FromScratch(assignment, folder)
    return {p: [str(x) for x in rule.held[p] + rule.static[p]] for p in assignment.problems}


def test_no_honest_solution_is_held(assignment, tmp_path):
    """The rule's layers over every honest solution here: the student set, the reference, the in-process
    implementations. The README reports the count held (0)."""
    folders = honest_folders()
    assert len([f for f in folders if f.name.startswith("honest_")]) >= 20
    held = {f.name: findings(assignment, as_submission(tmp_path, f)) for f in folders}
    held["reference"] = findings(assignment, ROOT)
    text = (Path(__file__).parent / "implementations.py").read_text()
    module = Module("staff_tests.implementations", "staff_tests/implementations.py", text)
    held["implementations.py"] = {"all": [str(c) for c in constructs(module, Program([module]), [module.tree])]}
    flagged = {name: found for name, found in held.items() if any(found.values())}
    assert not flagged, flagged


@pytest.mark.parametrize("folder", honest_folders(), ids=lambda f: f.name)
def test_honest_solutions_keep_every_point_with_the_operators_removed(assignment, tmp_path, folder):
    """In pytest's run (the dispatcher's override on, the audit hook on) each honest solution passes every case."""
    expected = tomllib.loads((folder / "expected.toml").read_text())["points"]
    failures = pytest_messages(assignment, as_submission(tmp_path, folder))
    lost = {p: m for p, m in failures.items() if expected.get(p) == assignment.problems[p].points}
    assert not lost, lost


# ---------------------------------------------------------------- the construct scan on its own


def held_in(tmp_path, assignment, functional: str, **modules: str) -> dict[str, list[str]]:
    folder = student(tmp_path, source(functional), **modules)
    return {p: [c.what for c in found] for p, found in FromScratch(assignment, folder).held.items()}


@pytest.mark.parametrize(
    ("code", "what"),
    [
        ("sys.modules['torch']", "sys.modules"),
        ("gc.get_objects()", "gc.get_objects"),
        ("inspect.currentframe()", "inspect.currentframe"),
        ("ctypes.CDLL(None)", "ctypes.CDLL"),
        ("getattr(torch, name)", "getattr with a name built at run time"),
        ("setattr(torch, name, None)", "setattr with a name built at run time"),
        ("__import__(name)", "__import__()"),
        ("importlib.import_module(name)", "importlib.import_module"),
        ("eval(name)", "eval()"),
        ("globals()[name]", "globals()"),
        ("vars(F)[name]", "vars()"),
        ("F.__dict__[name]", ".__dict__"),
        ("softmax.__globals__", ".__globals__"),
        ("().__class__.__bases__[0].__subclasses__()", ".__subclasses__"),
        ("torch.sys.modules", "torch.sys.modules"),
    ],
)
def test_each_construct_that_reaches_into_the_interpreter_is_held_with_its_line(tmp_path, assignment, code, what):
    functional = f"""
    import ctypes
    import gc
    import inspect
    import sys


    def softmax(x, dim, name="softmax"):
        _ = {code}
        return x
    """
    found = held_in(tmp_path, assignment, textwrap.dedent(functional))
    assert what in found[SOFTMAX] and not found[ATTENTION], found


def test_code_that_runs_at_import_is_scanned_wherever_it_is(tmp_path, assignment):
    """A patch in a package's __init__, in a module imported for its side effects, or in a function that
    module-level code calls, runs before any case: it is held for every problem."""
    functional = """
    from . import patches  # noqa: F401


    def softmax(x, dim):
        return x
    """
    patches = "import sys\n\n\ndef _patch():\n    sys.modules.clear\n\n\n_patch()\n"
    init = "import gc\n\ngc.collect()\n"
    found = held_in(tmp_path, assignment, textwrap.dedent(functional), patches=patches, __init__=init)
    for problem in (SOFTMAX, ATTENTION):
        assert "sys.modules.clear" in found[problem] and "gc.collect" in found[problem], found


def test_the_release_option_grades_a_held_problem_normally(tmp_path, assignment):
    functional = source(SOFTMAX_FROM_SCRATCH, attention_with(INLINE_WEIGHTS)).replace(
        "def softmax(in_features, dim):", "def softmax(in_features, dim):\n    getattr(torch, 'exp')\n    vars(torch)"
    )
    folder = student(tmp_path, functional)
    assert HELD in (FromScratch(assignment, folder).static_breach(SOFTMAX) or "")
    assert FromScratch(assignment, folder, frozenset([SOFTMAX])).static_breach(SOFTMAX) is None


# ---------------------------------------------------------------- the child's own parts


def child_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_grading_child_test", CHILD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_problems_that_forbid_different_operators_run_in_processes_of_their_own():
    child = child_module()
    job = {"cases": ["a1", "s1", "a2"], "problems": {"a1": "A", "s1": "S", "a2": "A"}}
    different = job | {"rule": {"forbidden_ops": {"A": ["aten._softmax"], "S": ["aten.exp"]}}}
    assert child.cases_by_rule(different) == [(["aten._softmax"], ["a1", "a2"]), (["aten.exp"], ["s1"])]
    same = job | {"rule": {"forbidden_ops": {"A": ["aten._softmax"], "S": ["aten._softmax"]}}}
    assert child.cases_by_rule(same) == [(["aten._softmax"], ["a1", "s1", "a2"])]


SECCOMP_CHECK = """
import importlib.util, os, subprocess, sys, threading
import torch
spec = importlib.util.spec_from_file_location("child", sys.argv[1])
child = importlib.util.module_from_spec(spec)
spec.loader.exec_module(child)
if not child.forbid_new_processes():
    print("no filter"); sys.exit()
torch.set_num_threads(2)
(torch.randn(256, 256) @ torch.randn(256, 256)).sum()  # torch's thread pool starts
out = []
thread = threading.Thread(target=lambda: out.append("thread"))
thread.start()
thread.join()
try:
    os.fork() or os._exit(0)
    print("forked")
except PermissionError:
    try:
        subprocess.run(["true"])
        print("ran a program")
    except PermissionError:
        print("refused" if out == ["thread"] else "no thread")
"""


def test_under_the_childs_seccomp_filter_threads_start_and_processes_do_not():
    """In a fresh interpreter (the filter is for good, and a fork of this one could inherit OpenMP's state)."""
    script = [sys.executable, "-c", SECCOMP_CHECK, str(CHILD)]
    done = subprocess.run(script, capture_output=True, text=True, timeout=120)
    if done.stdout.strip() == "no filter":
        pytest.skip(f"no seccomp filter for {os.uname().machine}")
    assert done.stdout.strip() == "refused", done.stdout + done.stderr


def test_the_operators_come_back_whole_after_a_graded_case(assignment):
    """pytest removes them for each case and puts them back: after, torch.softmax runs and decomposes to
    aten._softmax as before (removing a CompositeExplicitAutograd kernel beside the implicit one did not)."""
    from cs_basics.harness.rule.record import StudentFrames, Watch

    rule = FromScratch(assignment, ROOT)
    x = torch.randn(3, 4)
    with rule.watch(SOFTMAX) as removed, pytest.raises(Exception, match="not available in graded code"):
        torch.softmax(x, -1)
    assert [s.op for s in removed.record.sightings] == ["aten.softmax"]
    with Watch(["aten._softmax"], StudentFrames(ROOT, lambda relative: True)) as plain:
        out = torch.softmax(x, -1)
    assert [s.op for s in plain.record.sightings] == ["aten._softmax"]
    assert torch.allclose(out.sum(-1), torch.ones(3))
