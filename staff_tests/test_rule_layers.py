"""The from-scratch rule does not rest on the student's process's word about itself (issue 24.1, 20.4).

Each attack below would keep every point if the grader believed the record the student's own process
sends. Three layers stop them, and each test says which: the forbidden operators are not there (torch's
dispatcher raises for them), code that reaches into the interpreter is held for the staff's review, and
torch's private code is a forbidden name. Starting a process while a case runs breaks the rule too.
Honest code, in the styles students write, is held by none of it.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import torch

from cs_basics.harness.rule.constructs import constructs
from cs_basics.harness.rule.fromscratch import HELD, FromScratch
from cs_basics.harness.rule.glue import GLUE
from cs_basics.harness.rule.library import LibraryCalls
from cs_basics.harness.rule.program import Module, Program
from cs_basics.harness.rule.record import Watch
from cs_basics.harness.rule.sightings import StudentFrames

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
from .test_sandbox import SANDBOXES

STUDENTS = Path(__file__).parent / "students"
CHILD = ROOT / "cs_basics" / "harness" / "grading" / "job" / "child.py"  # loaded by path, as the grading server does
# Where a test's attack could behave differently in each sandbox (a process started inside a pid namespace or
# not), it runs in both; a record forged or library code called inside the child is the same in either, and
# runs in the default one (bubblewrap where it runs). Where bubblewrap does not run (not installed, or no
# namespaces), its cases skip and say why.

# the built-in attention reached through a name built at run time: invisible to the names scan
BUILTIN_ATTENTION = 'getattr(F, "scaled_dot_product_" + "attention")(Q, K, V, attn_mask=mask)'
DECOMP_SOFTMAX = """
def softmax(in_features, dim):
    from torch._decomp import decompositions  # a module the course does not allow: softmax's import alone

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
    semaphores = set(Path("/dev/shm").glob("sem.mp-*"))
    in_pytest = pytest_messages(assignment, student(tmp_path, functional, name="pytest"), released=both)
    # a spawning pool opens its queues' named semaphores before it starts the resource tracker, whose start the rule
    # refuses: in this process (pytest's run) they would be left in the machine's /dev/shm
    for left in set(Path("/dev/shm").glob("sem.mp-*")) - semaphores:
        left.unlink(missing_ok=True)
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
    own = Module(
        "cs_basics.nn.functional", "cs_basics/nn/functional.py", (ROOT / "cs_basics/nn/functional.py").read_text()
    )
    program = Program([module, own])  # implementations.py imports the reference, its own module as a student's
    held["implementations.py"] = {"all": [str(c) for c in constructs(module, program, [module.tree])]}
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
        ("getattr(torch, name)", "getattr with a name built at run time on torch"),
        ("setattr(torch, name, None)", "setattr with a name built at run time on torch"),
        ("getattr(x, name)", "getattr with a name built at run time on x"),
        ("getattr(softmax, '__glob' 'als__')", ".__globals__ (by getattr)"),
        ("object.__setattr__(x, 'dim', 0)", ".__setattr__"),
        ("vars(x)", "vars()"),
        ("x.__module__ = 'torch'", ".__module__"),
        ("operator.attrgetter(name)(F)", "operator.attrgetter"),
        ("concurrent.futures.ProcessPoolExecutor(1)", "concurrent.futures.ProcessPoolExecutor"),
        ("multiprocessing.Pool(1)", "multiprocessing.Pool"),
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
    # the modules imported in softmax: the course allows none of them, so that their imports hold softmax alone
    functional = f"""
    def softmax(x, dim, name="softmax"):
        import concurrent.futures, ctypes, gc, importlib, inspect, multiprocessing, operator, sys

        _ = {code}
        return x
    """
    found = held_in(tmp_path, assignment, textwrap.dedent(functional))
    assert what in found[SOFTMAX] and not found[ATTENTION], found


OWN_OBJECTS = """
import concurrent.futures
import dataclasses
import functools
import multiprocessing.dummy
import operator
from multiprocessing.pool import ThreadPool

_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2)
_THREADS = (multiprocessing.dummy.Pool, ThreadPool, multiprocessing.cpu_count)


class Options:
    def __init__(self, **kwargs):
        for key, value in kwargs.items():
            setattr(self, key, value)
        self.__dict__.update(kwargs)

    def get(self, name):
        return getattr(self, name), vars(self), hasattr(self, name)

    def drop(self, name):
        delattr(self, name)

    @classmethod
    def default(cls, name):
        return cls(**{name: None})

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)

    def __repr__(self):
        return f"{type(self).__name__} from {type(self).__module__} ({self.__class__.__module__})"


@dataclasses.dataclass(frozen=True)
class Frozen:
    d: int

    def __post_init__(self):
        object.__setattr__(self, "scale", self.d**-0.5)
        for f in dataclasses.fields(self):
            getattr(self, f.name)


_DEFAULTS = Options(dim=-1)


def softmax(x, dim, name="dim"):
    made = Options(dim=dim)
    getattr(made, name), getattr(_DEFAULTS, name), made.get(name), made.drop(name), Options.default(name)
    helpers = {"x": [getattr(made, key) for key in vars(made)]}
    functools.reduce(operator.mul, x.shape, 1), operator.getitem(helpers, "x")
    _POOL.submit(lambda: x).result()
    return x
"""


def test_the_students_own_objects_by_run_time_names_and_thread_pools_are_ordinary_python(tmp_path, assignment):
    """What the issue found held (a thread pool made at import, setattr(self, key, value) over **kwargs) and the
    other idioms on the student's own objects: none reaches an object the student's code did not make."""
    assert held_in(tmp_path, assignment, textwrap.dedent(OWN_OBJECTS)) == {SOFTMAX: [], ATTENTION: []}


BODY_LINE = "\n        "  # the next line of a function body in the snippets below
RUN_TIME_NAME = "getattr with a name built at run time"


@pytest.mark.parametrize(
    ("code", "what"),
    [
        (["x = Options()", "x = torch", "getattr(x, name)"], f"{RUN_TIME_NAME} on x"),
        (["def inner(self):", "    return getattr(self, name)", "inner(F)"], f"{RUN_TIME_NAME} on self"),
        (["getattr(Options().__class__, name)"], f"{RUN_TIME_NAME} on Options().__class__"),
        (["Options = torch", "getattr(Options, name)"], f"{RUN_TIME_NAME} on Options"),
        (["getattr(Options, name)"], f"{RUN_TIME_NAME} on Options"),  # a class: its methods, unbound
        (["getattr(type(Options()), name)"], f"{RUN_TIME_NAME} on type(Options())"),
        (["def inner(o: Options):", "    return getattr(o, name)", "inner(F)"], f"{RUN_TIME_NAME} on o"),
    ],
    ids=[
        "rebound_to_a_module",
        "self_of_a_plain_function",
        "an_attribute_of_an_instance",
        "a_shadowing_local",
        "a_class",
        "the_type_of_an_instance",
        "a_parameter_annotated_with_a_class",
    ],
)
def test_a_name_that_is_not_plainly_the_students_own_object_still_holds(tmp_path, assignment, code, what):
    functional = f"""
    class Options:
        pass


    def softmax(x, dim, name="dim"):
        {BODY_LINE.join(code)}
        return x
    """
    assert what in held_in(tmp_path, assignment, textwrap.dedent(functional))[SOFTMAX]


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
    from cs_basics.harness.rule.record import Watch
    from cs_basics.harness.rule.sightings import StudentFrames

    rule = FromScratch(assignment, ROOT)
    x = torch.randn(3, 4)
    with rule.watch(SOFTMAX) as removed, pytest.raises(Exception, match="not available in graded code"):
        torch.softmax(x, -1)
    assert [s.op for s in removed.record.sightings] == ["aten.softmax"]
    with Watch(["aten._softmax"], StudentFrames(ROOT, lambda relative: True)) as plain:
        out = torch.softmax(x, -1)
    assert [s.op for s in plain.record.sightings] == ["aten._softmax"]
    assert torch.allclose(out.sum(-1), torch.ones(3))


# ---------------------------------------------------------------- library code that computes on the student's behalf

# this file's lines stand for the student's: what they call is library code called by graded code
THIS_FILE = StudentFrames(ROOT, lambda relative: relative.as_posix() == "staff_tests/test_rule_layers.py")


def _flex_attention_math_path(q):
    flex = importlib.import_module("torch.nn.attention.flex_attention")
    higher_order = importlib.import_module("torch._higher_order_ops.flex_attention")
    block_mask = flex._create_empty_block_mask(q, q).as_tuple()
    return higher_order.math_attention(q, q, q, lambda s, b, h, m, n: s, block_mask, q.shape[-1] ** -0.5, {})[0]


def _private(module: str, name: str):
    return getattr(importlib.import_module(module), name)


def _softmax(x):
    return torch.exp(x - torch.logsumexp(x, -1, keepdim=True))


def _attention(q):
    scores = q @ q.transpose(-2, -1) * q.shape[-1] ** -0.5
    return _softmax(scores) @ q


# each computes softmax or attention from primitives inside a library: no forbidden operator runs, and the
# watch below forbids none; (the call, what it computes, the function the hold names)
LIBRARY_SOFTMAX = {
    "torch._decomp softmax": (
        lambda x: _private("torch._decomp.decompositions", "_softmax")(x, -1, False),
        _softmax,
        "torch._decomp.decompositions._softmax",
    ),
    "torch._decomp log_softmax": (
        lambda x: _private("torch._decomp.decompositions", "_log_softmax")(x, -1, False).exp(),
        _softmax,
        "torch._decomp.decompositions._log_softmax",
    ),
    "torch._refs softmax": (lambda x: _private("torch._refs", "softmax")(x, -1), _softmax, "torch._refs.softmax"),
    "torch._refs.nn.functional softmax": (
        lambda x: _private("torch._refs.nn.functional", "softmax")(x, -1),
        _softmax,
        "torch._refs.nn.functional.softmax",
    ),
    "flex attention's math path": (
        _flex_attention_math_path,
        _attention,
        "torch._higher_order_ops.flex_attention.math_attention",
    ),
    "a distribution's logits": (
        lambda x: torch.distributions.Categorical(logits=x).logits.exp(),
        _softmax,
        "torch.distributions.categorical.Categorical.__init__",
    ),
    "the gradient of logsumexp": (
        lambda x: torch.autograd.grad(torch.logsumexp(x, -1).sum(), x)[0],
        _softmax,
        "torch.autograd.grad",
    ),
    "einx's multi-axis softmax": (
        lambda x: importlib.import_module("einx").softmax("... [k]", x),
        _softmax,
        "einx.softmax",
    ),
}


@pytest.mark.parametrize("route", LIBRARY_SOFTMAX)
def test_library_code_that_computes_softmax_from_primitives_is_held_whatever_its_names(route):
    """The record alone, with no forbidden operator and no name read: the function that computed is named,
    with the line that called it."""
    call, computes, function = LIBRARY_SOFTMAX[route]
    x = torch.randn(1, 2, 5, 8, requires_grad=True)
    with Watch([], THIS_FILE) as watch:
        out = call(x)  # the library's softmax
    torch.testing.assert_close(out, computes(x))
    assert function in [c.function for c in watch.record.library], watch.record
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# the library's" in text)
    called = next(c for c in watch.record.library if c.function == function)
    assert called.where.startswith("staff_tests/test_rule_layers.py:"), called  # the lambda's line, then this one
    assert f"staff_tests/test_rule_layers.py:{line} in test_library_code" in called.where, called


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


@dataclasses.dataclass
class _Pair:
    a: torch.Tensor


@torch.no_grad()
def _no_grad_mask(x):
    return x > 0


def _in_a_thread_pool(x):
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(torch.exp, x).result()


# glue: library code that runs operators without computing anything on the student's behalf
GLUE_CALLS = {
    "Tensor's Python operators": lambda x: (1 - x) ** 2 / 2 + x.__rpow__(2),
    "iteration, split, broadcast_tensors": lambda x: [*x, *torch.split(x, 1), *torch.broadcast_tensors(x, x[0])],
    "einsum": lambda x: torch.einsum("b...qd,b...kd->b...qk", x, x),
    "F.pad, normalize, linear, dropout": lambda x: torch.nn.functional.dropout(
        torch.nn.functional.normalize(torch.nn.functional.pad(x, (1, 1))), 0.0
    ),
    "nn.Linear, Module.to, nn.Dropout": lambda x: torch.nn.Dropout(0.0)(torch.nn.Linear(8, 3).to(x.dtype)(x)),
    "a no_grad decorator": _no_grad_mask,
    "einops": lambda x: importlib.import_module("einops").reduce(x, "b h q d -> b q", "max"),
    "einx's dot and reductions": lambda x: importlib.import_module("einx").max(
        "... [k]", importlib.import_module("einx").dot("... q d, ... k d -> ... q k", x, x)
    ),
    "autograd.Function.apply": lambda x: _Double.apply(x),
    "printing": lambda x: repr(x) + f"{x.sum():.3f}",
    "a dataclass's __eq__": lambda x: _Pair(x) == _Pair(x),
    "a thread pool": _in_a_thread_pool,
}


@pytest.mark.parametrize("call", GLUE_CALLS)
def test_glue_runs_operators_without_holding_anything(call):
    x = torch.randn(2, 1, 4, 8)
    with Watch([], THIS_FILE) as watch:
        GLUE_CALLS[call](x)
    assert not watch.record.library, watch.record


def test_a_course_adds_its_own_glue(assignment):
    """`library_glue` in [tool.cs-basics] adds to the harness's list; what is not on either still holds."""
    course = dataclasses.replace(assignment, table=assignment.table | {"library_glue": ["torch.distributions.*"]})
    assert FromScratch(course, ROOT).library.is_glue("torch.distributions.categorical.Categorical.__init__")
    assert not FromScratch(assignment, ROOT).library.is_glue("torch.distributions.categorical.Categorical.__init__")
    x = torch.randn(3, 5)
    with Watch([], THIS_FILE, library=LibraryCalls(THIS_FILE, (*GLUE, *course.library_glue))) as watch:
        torch.distributions.Categorical(logits=x)
        _private("torch._refs", "softmax")(x, -1)
    assert [c.function for c in watch.record.library] == ["torch._refs.softmax"], watch.record


CATEGORICAL_SOFTMAX = """
def softmax(in_features, dim):
    logits = torch.distributions.Categorical(logits=in_features.movedim(dim, -1)).logits
    return logits.exp().movedim(-1, dim)
"""


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_softmax_a_distribution_computed_is_held_naming_the_function_and_the_line(assignment, tmp_path, sandbox):
    """`logits - logsumexp` computed inside torch, exponentiated: a softmax that torch computed, which passed as
    from scratch before (it lost only the 1e4 cases, by rounding). Held in the grader and in pytest alike;
    released, it is graded as any other."""
    functional = source(CATEGORICAL_SOFTMAX, attention_with(INLINE_WEIGHTS))
    line = functional.splitlines().index(CATEGORICAL_SOFTMAX.splitlines()[2]) + 1
    named = (
        "computed by torch.distributions.categorical.Categorical.__init__, "
        f"called from cs_basics/nn/functional.py:{line} in softmax"
    )
    got, first = graded(assignment, tmp_path, functional, sandbox)
    assert got == pytest.approx({SOFTMAX: 0.0, ATTENTION: 5.0}), first
    assert HELD in first[SOFTMAX] and named in first[SOFTMAX], first[SOFTMAX]
    in_pytest = pytest_messages(assignment, student(tmp_path, functional, name="pytest"))
    assert HELD in in_pytest[SOFTMAX] and named in in_pytest[SOFTMAX], in_pytest
    released, first = graded(assignment, tmp_path, functional, sandbox, released=[SOFTMAX])
    assert released[SOFTMAX] > 0.5 and HELD not in first.get(SOFTMAX, ""), first


def test_the_correct_implementations_run_no_library_arithmetic(assignment):
    """The other calibration set: staff_tests/implementations.py's correct variants and the reference, every case
    (hidden ones included), the backward pass too, under the record with their files as the student's."""
    from cs_basics.harness.cases import run_call

    from .implementations import CORRECT

    students = {"staff_tests/implementations.py", "cs_basics/nn/functional.py"}
    frames = StudentFrames(ROOT, lambda relative: relative.as_posix() in students)
    computed = {}
    for name, adapters in CORRECT.items():
        for case in assignment.cases:
            inputs, _ = assignment.store_for(case).load(case.id)
            with Watch([], frames) as watch:
                run_call(case, adapters, inputs, torch.device("cpu"))
            if watch.record.library:
                computed[f"{name} {case.id}"] = watch.record.library
    assert not computed, computed


def test_code_a_library_generated_is_the_librarys_and_held_when_called_straight():
    """A torch.fx graph traced outside any case: called as a module, torch.fx's call is named; its generated
    `forward` called straight from the student's line is held as code generated at run time."""
    make_fx = importlib.import_module("torch.fx.experimental.proxy_tensor").make_fx
    x = torch.randn(3, 5)
    graph = make_fx(lambda t: t - t.logsumexp(-1, keepdim=True))(x)  # log-softmax, as aten calls
    for call, named in ((graph, "torch.fx.graph_module._WrappedCall.__call__"), (graph.forward, "code generated")):
        with Watch([], THIS_FILE) as watch:
            call(x).exp()
        assert [c.function[: len(named)] for c in watch.record.library] == [named], watch.record


WRAPPED = ("construct_graph_with_cache", "einx")  # einx's API wrapper: the local that names its operation


def test_an_einx_operation_the_harness_cannot_name_is_no_glue():
    """einx's API wrapper is named by the operation it runs; a later einx that hides it fails closed."""
    from functools import partial

    from cs_basics.harness.rule.library import wrapped_name

    def wrapper_frame(construct_graph_with_cache):
        return sys._getframe()

    library = LibraryCalls(THIS_FILE)
    dot = wrapped_name(wrapper_frame(partial(print, func=importlib.import_module("einx").dot)), *WRAPPED)
    softmax = wrapped_name(wrapper_frame(partial(print, func=importlib.import_module("einx").softmax)), *WRAPPED)
    hidden = wrapped_name(wrapper_frame(object()), *WRAPPED)
    assert (dot, softmax) == ("einx.dot", "einx.softmax")
    assert [library.is_glue(name) for name in (dot, softmax, hidden)] == [True, False, False], hidden
