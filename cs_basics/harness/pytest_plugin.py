"""The pytest side of the harness. An assignment enables it with one line in tests/conftest.py:

pytest_plugins = ["cs_basics.harness.pytest_plugin"]
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

from cs_basics.harness import diagnosis
from cs_basics.harness.cases import Case, rerun_line, run_call, run_check
from cs_basics.harness.config import Assignment
from cs_basics.harness.device import DEVICE_ENV, choose_device, use_exact_float32
from cs_basics.harness.fixtures import REGENERATE, FixtureError
from cs_basics.harness.oneline import thick_adapter, thick_adapters  # noqa: F401 (thick_adapter: for the staff's tests)
from cs_basics.harness.portable import scan_notes
from cs_basics.harness.rule import record
from cs_basics.harness.rule.fromscratch import FromScratch
from cs_basics.harness.rule.outputs import plain_outputs
from cs_basics.harness.rule.syntax import Unreadable


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--device",
        default=None,
        help=f"device for the graded tests (cuda, mps, cpu); default ${DEVICE_ENV}, else the best present",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "points(n): a graded test worth n points")
    try:
        choose_device(config.getoption("--device"))
    except ValueError as err:
        raise pytest.UsageError(str(err)) from None
    use_exact_float32()
    record.install()  # before the student's code is imported: threads it starts are recorded too


def pytest_report_header(config: pytest.Config) -> list[str]:
    device = choose_device(config.getoption("--device"))
    return [f"cs_basics: device {device} (torch {torch.__version__})", *(f"cs_basics: {n}" for n in scan_notes())]


@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> torch.device:
    return choose_device(pytestconfig.getoption("--device"))


@pytest.fixture(scope="session")
def assignment(pytestconfig: pytest.Config) -> Assignment:
    return Assignment.find(pytestconfig.rootpath)


STARTED_RULE = pytest.StashKey[FromScratch]()


def session_rule(config: pytest.Config) -> FromScratch | None:
    """The session's rule over this copy's code, made once (None where no assignment is found)."""
    rule = config.stash.get(STARTED_RULE, None)
    if rule is None:
        try:
            assignment = Assignment.find(config.rootpath)
        except Exception:  # the `assignment` fixture says why, in the test that needs it
            return None
        rule = config.stash[STARTED_RULE] = FromScratch(assignment, assignment.root)
    return rule


def imports_students_code(assignment: Assignment, path: Path) -> bool:
    """Whether a test module is one of the graded tests' (beside the adapters, or hidden), whose import is the
    student's code's first (the staff's own tests are not watched)."""
    adapters = assignment.root / assignment.adapters_module.replace(".", "/")
    folders = [adapters.parent, *([assignment.hidden_dir] if assignment.hidden_dir else [])]
    return any(path.resolve().is_relative_to(folder.resolve()) for folder in folders)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """A test module's import (the student's code, through the adapters) runs watched, as in the grader's child:
    under the record and with every problem's forbidden operators replaced; what it ran counts against the
    problems (FromScratch.imported)."""
    rule = session_rule(collector.config) if isinstance(collector, pytest.Module) and record.recording() else None
    if rule is None or not imports_students_code(rule.assignment, Path(collector.path)):
        yield
        return
    with rule.import_watch() as watch:
        yield
    rule.imported.append(watch.record)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Where graded tests were collected, the rule's scan of the code starts now, in its own process: it reads
    while pytest sets up, instead of after the first graded test started."""
    if any(item.get_closest_marker("points") for item in session.items):
        # torch, pytest and the collected tests are here for the whole run: out of the cyclic collector's
        # reach, each full collection the graded cases set off walks only what they made (without it, those
        # collections cost a session about 0.8 s of CPU, more than all of the rule's own work)
        gc.freeze()
        rule = session_rule(session.config)
        if rule is not None:
            rule.read_in_background()


@pytest.fixture(scope="session")
def from_scratch(assignment: Assignment, pytestconfig: pytest.Config) -> FromScratch:
    """The grader's from-scratch rule, over this copy's code (its scan started once collection finished)."""
    started = pytestconfig.stash.get(STARTED_RULE, None)
    if started is not None and started.code == assignment.root:
        return started
    return FromScratch(assignment, assignment.root)


def run_graded(
    case: Case,
    adapters: ModuleType,
    assignment: Assignment,
    device: torch.device,
    rule: FromScratch,
    breaches: dict[str, str] | None = None,
):
    """One graded case as the grader judges it: the from-scratch rule (static, then what the case ran),
    then the values. Fails the test with the grader's message.

    `breaches` (problem -> message) carries a breach to the problem's later cases in the same run: the
    grader gives the whole problem 0 when one of its cases breaks the rule, so they fail here too.
    """
    __tracebackhide__ = True  # the student's frames, not the harness's
    problem = assignment.problems.get(case.problem)
    lost = (
        problem
        and assignment.table.get("one_line_adapters")
        and thick_adapters(adapters, problem.adapters, assignment.student_package)
    )
    if lost:
        pytest.fail(lost, pytrace=False)
    breaches = {} if breaches is None else breaches
    try:
        inputs, expected = assignment.store_for(case).load(case.id)
    except FixtureError as err:
        pytest.fail(str(err), pytrace=False)
    try:
        breach = rule.static_breach(case.problem) or breaches.get(case.problem)
    except Unreadable as err:  # as the grader says it
        pytest.fail(f"your code could not be graded: {err}", pytrace=False)
    if breach:
        pytest.fail(breach, pytrace=False)
    for name in case.kind.warm if case.kind is not None else ():  # a library's first import, outside the watch
        importlib.import_module(name)
    watch = rule.watch(case.problem)

    def fail_if_breached() -> None:
        breach = rule.runtime_breach(case.problem, case.id, watch.record)
        if breach:
            breaches[case.problem] = breach
            pytest.fail(breach, pytrace=False)

    try:
        with watch, diagnosis.crashes_noted(case, inputs):
            outputs = plain_outputs(run_call(case, adapters, inputs, device))  # copied while the watch is open
    except Exception as err:  # a forbidden operator before a crash is a breach, as in the grader (Ctrl-C stays Ctrl-C)
        fail_if_breached()
        err.add_note(rerun_line(case))  # under the student's traceback (the harness's frames are hidden)
        raise
    fail_if_breached()
    try:
        run_check(case, inputs, expected, outputs, device)
    except AssertionError as err:  # the check's message says it all: no traceback of the harness before it
        failure = str(err)
    else:
        return
    pytest.fail(failure, pytrace=False)


@pytest.fixture(scope="session")
def from_scratch_breaches() -> dict[str, str]:
    """The problems whose cases broke the from-scratch rule so far in this run, with the message."""
    return {}


@pytest.fixture
def run_graded_case(
    assignment: Assignment, device: torch.device, from_scratch: FromScratch, from_scratch_breaches: dict[str, str]
) -> Callable[[Case, ModuleType], None]:
    """Run one case through the given adapters module on the session's device, under the grader's rules."""

    def run(case: Case, adapters: ModuleType) -> None:
        __tracebackhide__ = True
        run_graded(case, adapters, assignment, device, from_scratch, from_scratch_breaches)

    return run


def test_fixtures_match_the_cases(assignment: Assignment) -> None:
    """Every case has its fixture, intact, and every fixture belongs to a case: in the public store and, where
    this copy has it, the hidden one. An assignment collects it with one import in its tests (tests/test_fixtures.py:
    `from cs_basics.harness.pytest_plugin import test_fixtures_match_the_cases`)."""
    problems = assignment.fixture_problems()
    stores = " ".join(str(store.root.relative_to(assignment.root)) for store, _ in assignment.stores())
    assert not problems, "\n".join(problems) + f"\nfix: `git checkout -- {stores}` or `{REGENERATE}`"


def thin_test_hidden(excinfo: pytest.ExceptionInfo | None) -> bool:
    """Whether pytest hides a graded test's own frame: it shows only `case = Case(...)` and the one call, so a
    crash's traceback starts at the student's code. A failure without a traceback (pytest.fail(pytrace=False):
    a wrong value) keeps it, the frame that carries the message alone."""
    failure = excinfo.value if excinfo is not None else None
    return not (isinstance(failure, pytest.fail.Exception) and not failure.pytrace)


def graded(test: Callable) -> Callable:
    """Parametrize a test over the assignment's cases that name it, each with its points."""
    assignment = Assignment.find(Path(sys.modules[test.__module__].__file__).parent)
    params = [
        pytest.param(case, id=case.param, marks=pytest.mark.points(assignment.points[case.id]))
        for case in assignment.cases
        if case.test == test.__name__
    ]
    if not params:
        raise ValueError(f"no graded case names the test {test.__name__}")
    test.__globals__.setdefault("__tracebackhide__", thin_test_hidden)  # pytest reads it from a frame's globals
    return pytest.mark.parametrize("case", params)(test)
