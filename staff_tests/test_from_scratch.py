"""The from-scratch rule on code as real students write it: fair verdicts, the same in the grader and in pytest.

Each submission is a whole `functional.py` (and sometimes a helper module). The grader's scores are
exact per problem; the students' pytest verdict comes from the function their graded tests call
(`run_graded`), run here in-process on the submission's own package.
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import importlib.util
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import cs_basics
from cs_basics.harness.pytest_plugin import run_graded
from cs_basics.harness.rule.fromscratch import FromScratch
from cs_basics.harness.rule.record import Watch
from cs_basics.harness.rule.sightings import StudentFrames

from .submissions import ROOT, run, scores

ATTENTION, SOFTMAX = "scaled_dot_product_attention", "softmax"
FULL = {SOFTMAX: 1.0, ATTENTION: 5.0}
RELEASED = (SOFTMAX, ATTENTION)  # released from the hold for code that reaches in: the record's own tests

SOFTMAX_FROM_SCRATCH = """
def softmax(in_features, dim):
    shifted = in_features - in_features.amax(dim=dim, keepdim=True)
    e = torch.exp(shifted)
    return e / e.sum(dim=dim, keepdim=True)
"""


def attention_with(weights: str) -> str:
    """A from-scratch attention whose weights come from the expression `weights` (of `scores`)."""
    return f"""
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = {weights}
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ V
"""


INLINE_WEIGHTS = (
    "torch.exp(scores - scores.amax(-1, keepdim=True))\n    weights = weights / weights.sum(-1, keepdim=True)"
)
HEADER = """import math

import torch
import torch.nn.functional as F
from torch import nn
"""


def source(*parts: str) -> str:
    """A whole functional.py: the usual imports, the modules the parts name that are no allowed ones (a route that
    needs them is about the record, and releases the hold they cost), then the parts."""
    body = "\n".join(textwrap.dedent(p) for p in parts)
    imported = {name for line in re.findall(r"^\s*import (.*)$", body, re.M) for name in re.split(r"[\s,]+", line)}
    used = [module for module in ("base64", "importlib") if f"{module}." in body and module not in imported]
    routes = "".join(f"import {module}\n" for module in used)
    return routes + HEADER + body


def student(tmp: Path, functional: str, name: str = "student", **modules: str) -> Path:
    """A submission: this package with `functional.py` replaced, plus helper modules under cs_basics/nn/."""
    folder = tmp / name
    shutil.copytree(ROOT / "cs_basics", folder / "cs_basics", ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "cs_basics" / "nn" / "functional.py").write_text(functional)
    for module, text in modules.items():
        (folder / "cs_basics" / "nn" / f"{module}.py").write_text(textwrap.dedent(text))
    (folder / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "adapters.py", folder / "tests" / "adapters.py")  # what a student's copy has
    return folder


@contextlib.contextmanager
def students_package(folder: Path):
    """Import the submission's `cs_basics.nn` in this process, then put ours back."""
    saved = {k: v for k, v in sys.modules.items() if k == "cs_basics.nn" or k.startswith("cs_basics.nn.")}
    path = list(cs_basics.__path__)
    for k in saved:
        del sys.modules[k]
    cs_basics.__path__[:] = [str(folder / "cs_basics")]
    try:
        yield importlib.import_module("cs_basics.nn.functional")
    finally:
        for k in [k for k in sys.modules if k == "cs_basics.nn" or k.startswith("cs_basics.nn.")]:
            del sys.modules[k]
        sys.modules.update(saved)
        cs_basics.__path__[:] = path


def pytest_verdicts(assignment, folder: Path, released=(), catch=(AssertionError, pytest.fail.Exception)) -> dict:
    """Each graded case's failure message in the students' pytest run (None: passed); `catch`: the failures
    taken as a verdict (others propagate)."""
    rule = FromScratch(assignment, folder, frozenset(released))
    verdicts, breaches = {}, {}  # one pytest session: a breach carries to the problem's later cases
    with students_package(folder):
        # the copy's own adapters module, so that the stack the messages give has the same frames as in pytest
        spec = importlib.util.spec_from_file_location("submission_adapters", folder / "tests" / "adapters.py")
        adapters = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(adapters)
        for case in assignment.cases:
            try:
                run_graded(case, adapters, assignment, torch.device("cpu"), rule, breaches)
                verdicts[case.id] = None
            except catch as err:
                verdicts[case.id] = str(err)
    return verdicts


def judged(assignment, tmp_path, functional: str, released=(), **modules: str):
    """(the grader's scores, its test outputs by case id, the pytest verdicts) for one submission; `released`:
    problems the staff released from a hold (code that reaches into the interpreter), to test the record."""
    folder = student(tmp_path, functional, **modules)
    result = run(assignment, folder, released=tuple(released))
    outputs = {t.case.id: (t.output if not t.passed else None) for t in result.tests}
    return scores(result), outputs, pytest_verdicts(assignment, folder, released)


def assert_same_verdicts(assignment, outputs, verdicts, zeroed: set[str]) -> None:
    """pytest fails a case with the grader's message exactly when the case ran a forbidden operator
    (or the problem's code uses a forbidden name); the problems the grader zeroed fail in pytest."""
    for case in assignment.cases:
        if case.problem in zeroed:
            assert outputs[case.id] and "must be written from scratch" in outputs[case.id]
            if verdicts[case.id] is not None:
                assert verdicts[case.id] == outputs[case.id] or "must be written from scratch" in verdicts[case.id]
        else:
            assert outputs[case.id] is None and verdicts[case.id] is None, (case.id, outputs[case.id])
    for problem in zeroed:
        assert any(verdicts[c.id] == outputs[c.id] for c in assignment.cases if c.problem == problem), problem
        # from the first case that breaks the rule on, every case of the problem fails as in the grader
        ordered = [verdicts[c.id] for c in assignment.cases if c.problem == problem]
        first = next(i for i, v in enumerate(ordered) if v and "must be written from scratch" in v)
        assert all(v and "must be written from scratch" in v for v in ordered[first:]), problem


def first_breach(assignment, tmp_path, functional: str, expected: dict[str, float], released=()) -> str:
    """Grade and run as pytest; the scores are `expected`, the zeroed problems fail alike in both;
    return the grader's message."""
    got, outputs, verdicts = judged(assignment, tmp_path, functional, released)
    assert got == pytest.approx(expected)
    assert_same_verdicts(assignment, outputs, verdicts, zeroed={p for p, score in expected.items() if score == 0})
    return next(o for o in outputs.values() if o)


# ---------------------------------------------------------------- correct code keeps its points

OWN_MODULE = """
class Softmax(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        e = torch.exp(x - x.amax(dim=self.dim, keepdim=True))
        return e / e.sum(dim=self.dim, keepdim=True)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.softmax = Softmax(dim=-1)

    def forward(self, Q, K, V, mask=None):
        scores = torch.einsum("...qd,...kd->...qk", Q, K) / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
        weights = torch.nan_to_num(self.softmax(scores), nan=0.0)
        return weights @ V


def softmax(in_features, dim):
    softmax = Softmax(dim)  # a local variable named softmax
    return softmax(in_features)


def scaled_dot_product_attention(Q, K, V, mask=None):
    layer = Attention()
    return layer.forward(Q, K, V, mask)
"""

REAL_PATTERNS = """
import einx

from .helpers import stable_softmax


def softmax(in_features, dim):
    return stable_softmax(in_features, dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = einx.dot("... q d, ... k d -> ... q k", Q, K) * (1.0 / math.sqrt(Q.shape[-1]))
    if mask is not None:
        fill = -1e4 if scores.dtype == torch.float16 else -1e9
        scores = torch.where(mask, scores, torch.tensor(fill, dtype=torch.float32).to(scores.dtype))
    weights = softmax(scores, dim=-1)
    if mask is not None:
        empty = ~mask.any(-1, keepdim=True)
        weights = weights.masked_fill(empty, 0.0)
    return weights @ V


def _compare_with_torch(x):  # a helper that no problem calls
    return (softmax(x, -1) - torch.softmax(x, -1)).abs().max()


if __name__ == "__main__":
    print(_compare_with_torch(torch.randn(3, 4)), F.scaled_dot_product_attention)
"""

HELPERS = """
import torch


def stable_softmax(x, dim):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True).detach())
    return e / e.sum(dim=dim, keepdim=True)
"""


@pytest.mark.parametrize(
    ("functional", "modules"),
    [(OWN_MODULE, {}), (REAL_PATTERNS, {"helpers": HELPERS})],
    ids=["own_softmax_module_called_as_self_softmax", "einx_where_fills_helper_module_unused_builtin"],
)
def test_correct_code_written_as_students_write_it_gets_full_marks(assignment, tmp_path, functional, modules):
    got, outputs, verdicts = judged(assignment, tmp_path, source(functional), **modules)
    assert got == pytest.approx(FULL), [o for o in outputs.values() if o]
    assert_same_verdicts(assignment, outputs, verdicts, zeroed=set())


# ---------------------------------------------------------------- a breach costs its own problem only


def test_torch_softmax_inside_attention_costs_attention_only(assignment, tmp_path):
    functional = source(SOFTMAX_FROM_SCRATCH, attention_with("torch.softmax(scores, dim=-1)"))
    message = first_breach(assignment, tmp_path, functional, {SOFTMAX: 1.0, ATTENTION: 0.0})
    assert "uses torch.softmax at cs_basics/nn/functional.py:" in message


def test_tensor_softmax_method_inside_attention_is_caught_by_what_it_runs(assignment, tmp_path):
    functional = source(SOFTMAX_FROM_SCRATCH, attention_with("scores.softmax(-1)"))
    message = first_breach(assignment, tmp_path, functional, {SOFTMAX: 1.0, ATTENTION: 0.0})
    line = functional.splitlines().index("    weights = scores.softmax(-1)") + 1
    assert re.search(r"ran these operators:\n  aten._?softmax, which is torch's softmax", message)
    assert f"called from cs_basics/nn/functional.py:{line} in scaled_dot_product_attention" in message


def test_a_forbidden_operator_before_a_crash_is_a_breach_named_with_the_students_stack(assignment, tmp_path):
    attention = """
def _weights(scores):
    return getattr(torch, "soft" + "max")(scores, -1)


def scaled_dot_product_attention(Q, K, V, mask=None):
    weights = _weights(Q @ K.transpose(-2, -1))
    raise RuntimeError("a crash after the forbidden call")
"""
    functional = source(SOFTMAX_FROM_SCRATCH, attention)
    message = first_breach(assignment, tmp_path, functional, {SOFTMAX: 1.0, ATTENTION: 0.0}, RELEASED)
    lines = functional.splitlines()
    inner = lines.index('    return getattr(torch, "soft" + "max")(scores, -1)') + 1
    outer = lines.index("    weights = _weights(Q @ K.transpose(-2, -1))") + 1
    stack = (
        f"functional.py:{inner} in _weights, from cs_basics/nn/functional.py:{outer} in scaled_dot_product_attention"
    )
    assert f"called from cs_basics/nn/{stack}" in message


EXEC_SOFTMAX = base64.b64encode(b"result = torch.softmax(x, dim)").decode()
# names built at run time: invisible to the scan, seen by the record
ROUTES = {
    "getattr_built_name": "getattr(torch, 'soft' + 'max')(x, dim)",
    "importlib": "importlib.import_module('torch.nn.' + 'functional').softmax(x, dim)",
    "exec_decoded": f"_run(base64.b64decode({EXEC_SOFTMAX!r}).decode(), x, dim)",
    "torch_ops_by_string": "getattr(getattr(torch, 'o' + 'ps').aten, '_soft' + 'max')(x, dim, False)",
    "functional_dict": "F.__dict__['soft' + 'max'](x, dim)",
}
EXEC_HELPER = """
def _run(code, x, dim):
    scope = {"torch": torch, "x": x, "dim": dim}
    exec(code, scope)
    return scope["result"]
"""


@pytest.mark.parametrize("route", ROUTES)
def test_a_softmax_reached_by_a_name_built_at_run_time_costs_softmax_only(assignment, tmp_path, route):
    functional = source(
        EXEC_HELPER, f"def softmax(x, dim):\n    return {ROUTES[route]}\n", attention_with(INLINE_WEIGHTS)
    )
    message = first_breach(assignment, tmp_path, functional, {SOFTMAX: 0.0, ATTENTION: 5.0}, RELEASED)
    assert re.search(r"aten\._?softmax", message), message


def test_attention_that_calls_a_forbidden_softmax_runs_it_too(assignment, tmp_path):
    functional = source(
        f"def softmax(x, dim):\n    return {ROUTES['getattr_built_name']}\n", attention_with("softmax(scores, -1)")
    )
    first_breach(assignment, tmp_path, functional, {SOFTMAX: 0.0, ATTENTION: 0.0})


def test_attention_reached_through_exec_costs_attention_only(assignment, tmp_path):
    code = base64.b64encode(
        b"import torch.nn.functional as F\nresult = F.scaled_dot_product_attention(Q, K, V)"
    ).decode()
    attention = f"""
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scope = {{"Q": Q, "K": K, "V": V}}
        exec(base64.b64decode({code!r}).decode(), scope)
        return scope["result"]
    """
    message = first_breach(
        assignment, tmp_path, source(SOFTMAX_FROM_SCRATCH, attention), {SOFTMAX: 1.0, ATTENTION: 0.0}, RELEASED
    )
    assert "(in code it ran with exec)" in message


@pytest.mark.parametrize(
    "switch_off",
    [
        "with getattr(importlib.import_module('torch.utils._python_' + 'dispatch'), '_disable_current_' + 'modes')():\n"
        "        weights = getattr(torch, 'soft' + 'max')(scores, -1)",
        "getattr(importlib.import_module('torch.utils._python_' + 'dispatch'), '_pop_' + 'mode')()\n"
        "    weights = getattr(torch, 'soft' + 'max')(scores, -1)",
    ],
    ids=["disabled_around_the_call", "popped_for_good"],
)
def test_switching_the_record_off_costs_the_problem_that_did_it(assignment, tmp_path, switch_off):
    attention = f"""
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    {switch_off}
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ V
"""
    message = first_breach(
        assignment, tmp_path, source(SOFTMAX_FROM_SCRATCH, attention), {SOFTMAX: 1.0, ATTENTION: 0.0}, RELEASED
    )
    assert "switches the record of operators off" in message


def test_the_students_pytest_run_fails_with_the_graders_message(assignment, tmp_path):
    """The real command, in a copy of the project with the submission's code."""
    functional = source(SOFTMAX_FROM_SCRATCH, attention_with("scores.softmax(-1)"))
    folder = student(tmp_path, functional)
    for name in ("tests", "fixtures"):
        shutil.rmtree(folder / name, ignore_errors=True)
        shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", folder)
    graded = run(assignment, folder)
    message = next(t.output for t in graded.tests if t.case.problem == ATTENTION)
    named = next(c for c in assignment.cases if f"case {c.id} " in message)  # the case the grader names
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"tests/test_attention.py::{named.test}[{named.param}]",
    ]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout
    assert all(line in done.stdout for line in message.splitlines()), (message, done.stdout)


# ---------------------------------------------------------------- the record: every route, no false alarm

ROUTE_CALLS = {
    "torch.softmax": lambda x: torch.softmax(x, -1),
    "F.softmax": lambda x: torch.nn.functional.softmax(x, -1),
    "Tensor.softmax": lambda x: x.softmax(-1),
    "nn.Softmax": lambda x: torch.nn.Softmax(dim=-1)(x),
    "torch.special.softmax": lambda x: torch.special.softmax(x, -1),
    "torch.ops.aten._softmax": lambda x: torch.ops.aten._softmax(x, -1, False),
    "getattr built name": lambda x: getattr(torch, "soft" + "max")(x, -1),
    "importlib": lambda x: importlib.import_module("torch.nn." + "functional").softmax(x, -1),
    "exec": lambda x: _exec("y = torch.softmax(x, -1)", x),
    "F.__dict__": lambda x: torch.nn.functional.__dict__["softmax"](x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "nn.LogSoftmax": lambda x: torch.nn.LogSoftmax(dim=-1)(x),
    "gumbel_softmax": lambda x: torch.nn.functional.gumbel_softmax(x),
    "einx.softmax": lambda x: importlib.import_module("einx").softmax("b [k]", x),
    "in a thread": lambda x: _in_thread(lambda: torch.softmax(x, -1)),
    "sdpa, no grad": lambda x: _sdpa(x, grad=False),
    "sdpa, grad": lambda x: _sdpa(x, grad=True),
    "sdpa math path": lambda x: torch.ops.aten._scaled_dot_product_attention_math(*_qkv(x))[0],
    "sdpa cpu flash kernel": lambda x: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(*_qkv(x))[0],
    "nn.MultiheadAttention": lambda x: torch.nn.MultiheadAttention(8, 2, batch_first=True)(x, x, x)[0],
}
CORRECT_CALLS = {
    "exp over sum": lambda x: (
        (x - x.amax(-1, keepdim=True)).exp() / (x - x.amax(-1, keepdim=True)).exp().sum(-1)[:, None]
    ),
    "logsumexp": lambda x: torch.exp(x - torch.logsumexp(x, -1, keepdim=True)),
    "where and finfo.min": lambda x: torch.where(x > 0, x, torch.finfo(x.dtype).min),
    "masked_fill -1e9 in float64": lambda x: x.double().masked_fill(x < 0, torch.tensor(-1e9)),
    "boolean indexing": lambda x: x[x > 0].exp(),
    "einsum and einx": lambda x: importlib.import_module("einx").dot("b k, c k -> b c", x, torch.einsum("bk->bk", x)),
    "torch.compile": lambda x: torch.compile(lambda t: t.exp() / t.exp().sum(-1, keepdim=True))(x),
}


def _exp_over_sum(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def _exec(code, x):
    scope = {"torch": torch, "x": x}
    exec(code, scope)
    return scope["y"]


def _in_thread(fn):
    import threading

    out = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join()
    return out[0]


def _qkv(x):
    return x.reshape(1, 1, *x.shape), x.reshape(1, 1, *x.shape), x.reshape(1, 1, *x.shape)


def _sdpa(x, grad):
    with torch.set_grad_enabled(grad):
        return torch.nn.functional.scaled_dot_product_attention(*_qkv(x))


def recorded(problem, assignment, fn, x):
    rule = FromScratch(assignment, Path(__file__).parent)
    with rule.watch(problem) as watch, contextlib.suppress(Exception):  # ForbiddenOperator, or a wrapper of it
        out = fn(x)  # a forbidden operator raises (it is not there); the record still names it
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.sum().backward()
    return watch.record


@pytest.mark.parametrize("route", ROUTE_CALLS)
def test_the_record_sees_every_route_to_a_forbidden_operator(assignment, route):
    x = torch.randn(4, 8, requires_grad=True)
    record = recorded(ATTENTION, assignment, ROUTE_CALLS[route], x)
    assert record.sightings and not record.tampering, record
    # softmax forbids attention too: a softmax read off torch's attention (K = V = I) is not from scratch
    assert recorded(SOFTMAX, assignment, ROUTE_CALLS[route], x).sightings


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch.compile's notes on tracing code of the record
@pytest.mark.parametrize("call", CORRECT_CALLS)
def test_the_record_stays_quiet_for_code_written_from_scratch(assignment, call):
    for problem in (SOFTMAX, ATTENTION):
        record = recorded(problem, assignment, CORRECT_CALLS[call], torch.randn(4, 8, requires_grad=True))
        assert not record.sightings and not record.tampering, record


def test_the_record_says_which_line_called_the_operator():
    frames = StudentFrames(ROOT, lambda relative: relative.parts[0] == "staff_tests")
    with Watch(["aten._softmax"], frames) as watch:
        torch.softmax(torch.randn(3), -1)  # the line the record must name
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "the line the record" in text)
    assert watch.record.sightings[0].where == f"staff_tests/test_from_scratch.py:{line} in " + (
        "test_the_record_says_which_line_called_the_operator"
    )


def test_every_softmax_and_attention_operator_in_torch_is_forbidden(assignment):
    """torch's own operator list, filtered for softmax and attention: each is in the problems' lists."""
    import fnmatch

    names = {
        "aten." + name.removeprefix("aten::").split(".")[0]
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("aten::")
    }
    softmax_ops = {n for n in names if "softmax" in n}
    attention_ops = softmax_ops | {n for n in names if "attention" in n or "sdp" in n}
    assert len(softmax_ops) >= 10 and len(attention_ops) >= 30  # the list itself is there
    for problem, ops in ((SOFTMAX, attention_ops), (ATTENTION, attention_ops)):
        patterns = assignment.problems[problem].forbidden_ops
        unlisted = sorted(op for op in ops if not any(fnmatch.fnmatchcase(op, p) for p in patterns))
        assert not unlisted, f"{problem}: torch's operators {unlisted} are not in its forbidden_ops"


def test_the_courses_forbidden_lists_hold_for_every_problem_before_its_own():
    from cs_basics.harness.config import GradedProblem

    course = {"forbidden": ["torch.softmax"], "forbidden_ops": ["aten._softmax"]}
    own = {"points": 2, "forbidden": ["torch.nn.MultiheadAttention"], "forbidden_ops": ["aten._native_multi_*"]}
    problem = GradedProblem.from_table("attention", own, course)
    assert problem.forbidden == ("torch.softmax", "torch.nn.MultiheadAttention")
    assert problem.forbidden_ops == ("aten._softmax", "aten._native_multi_*")
    assert GradedProblem.from_table("softmax", {"points": 1}, course).forbidden_ops == ("aten._softmax",)
    assert GradedProblem.from_table("softmax", {"points": 1}).forbidden_ops == ()


def exclude_python_key(x):
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
    with getattr(torch._C, "_ExcludeDispatchKey" + "Guard")(keys):
        return torch.softmax(x, -1)


def python_key_excluded_in_thread_state(x):
    C = importlib.import_module("torch._" + "C")
    getattr(C, "_dispatch_tls_set_dispatch_key_" + "excluded")(C.DispatchKey.Python, True)
    try:
        return torch.softmax(x, -1)
    finally:  # put back before the sentinel after the call could notice
        getattr(C, "_dispatch_tls_set_dispatch_key_" + "excluded")(C.DispatchKey.Python, False)


def python_key_forced_out(x):
    C = importlib.import_module("torch._" + "C")
    exclude = C._dispatch_tls_local_exclude_set() | C.DispatchKeySet(C.DispatchKey.Python)
    with getattr(C, "_ForceDispatchKey" + "Guard")(C._dispatch_tls_local_include_set(), exclude):
        return torch.softmax(x, -1)


def mode_popped_and_pushed_back(x):
    C = importlib.import_module("torch._" + "C")
    mode = getattr(C, "_pop_torch_dispatch" + "_stack")(None)
    try:
        return torch.softmax(x, -1)
    finally:
        getattr(C, "_push_on_torch_dispatch" + "_stack")(mode)


@pytest.mark.parametrize(
    "switch_off",
    [exclude_python_key, python_key_excluded_in_thread_state, python_key_forced_out, mode_popped_and_pushed_back],
    ids=lambda f: f.__name__,
)
def test_code_that_switches_the_record_off_through_torch_internals_is_caught(assignment, switch_off):
    """Each way into the dispatcher's thread state that hides operators from the record, put back
    before the call returns so that the sentinel after it passes."""
    record = recorded(SOFTMAX, assignment, switch_off, torch.randn(3))
    assert record.tampering and "switches the record of operators off" in record.tampering[0], record


# ---------------------------------------------------------------- the scan: what each problem reaches


def scan(tmp_path, assignment, functional: str, **modules: str) -> dict:
    folder = student(tmp_path, source(functional), **modules)
    return {p: [u.name for u in uses] for p, uses in FromScratch(assignment, folder).static.items()}


def test_the_scan_charges_a_name_to_the_problems_that_reach_it(tmp_path, assignment):
    code = """
    _builtin = torch.softmax


    def _scores(Q, K):
        return Q @ K.mT


    def _unused():
        return F.scaled_dot_product_attention


    class Layer(nn.Module):
        def forward(self, x):
            return self.softmax(x) + x.softmax(-1)  # methods of things the scan cannot resolve


    def softmax(x, dim):
        softmax = Layer()  # a local variable named softmax is not the builtin
        return softmax(x)


    def scaled_dot_product_attention(Q, K, V, mask=None):
        return _builtin(_scores(Q, K), -1) @ V


    if __name__ == "__main__":
        torch.softmax(torch.ones(2), 0)
    """
    assert scan(tmp_path, assignment, code) == {SOFTMAX: [], ATTENTION: ["torch.softmax"]}


def test_the_scan_follows_helpers_in_other_modules_and_re_exports(tmp_path, assignment):
    code = """
    from .helpers import weights


    def softmax(x, dim):
        return x


    def scaled_dot_product_attention(Q, K, V, mask=None):
        return weights(Q @ K.mT) @ V
    """
    helpers = "import torch.nn.functional as F\n\n\ndef weights(s):\n    return F.softmax(s, -1)\n"
    assert scan(tmp_path, assignment, code, helpers=helpers) == {
        SOFTMAX: [],
        ATTENTION: ["torch.nn.functional.softmax"],
    }


def test_the_scan_walks_from_every_adapter_of_a_problem(tmp_path, assignment):
    """A problem of two adapters that reach nothing of each other (SiLU's and SwiGLU's, say): a forbidden name
    that only the second one's student function uses is held all the same."""
    from dataclasses import replace

    from cs_basics.harness.config import Assignment

    second = """
    def softmax_rows(x):
        return torch.softmax(x, -1)


    def scaled_dot_product_attention(Q, K, V, mask=None):
        return Q
    """
    folder = student(tmp_path, source(SOFTMAX_FROM_SCRATCH, second))
    adapters = folder / "tests" / "adapters.py"
    adapters.write_text(adapters.read_text() + "\n\ndef run_softmax_rows(x):\n    return functional.softmax_rows(x)\n")
    course = Assignment(assignment.root, assignment.table)
    problems = dict(assignment.problems)
    problems[SOFTMAX] = replace(problems[SOFTMAX], adapters=(problems[SOFTMAX].adapter, "run_softmax_rows"))
    object.__setattr__(course, "problems", problems)  # a cached property: the copy's own
    found = {p: [u.name for u in uses] for p, uses in FromScratch(course, folder).static.items()}
    assert found == {SOFTMAX: ["torch.softmax"], ATTENTION: []}
