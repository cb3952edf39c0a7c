"""The pytest side of the harness. An assignment enables it with one line in tests/conftest.py:

pytest_plugins = ["cs_basics.harness.pytest_plugin"]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

from cs_basics.harness.cases import Case, run_case
from cs_basics.harness.config import Assignment
from cs_basics.harness.device import DEVICE_ENV, choose_device, use_exact_float32
from cs_basics.harness.fixtures import FixtureError


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


def pytest_report_header(config: pytest.Config) -> str:
    device = choose_device(config.getoption("--device"))
    return f"cs_basics: device {device} (torch {torch.__version__})"


@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> torch.device:
    return choose_device(pytestconfig.getoption("--device"))


@pytest.fixture(scope="session")
def assignment(pytestconfig: pytest.Config) -> Assignment:
    return Assignment.find(pytestconfig.rootpath)


@pytest.fixture
def run_graded_case(assignment: Assignment, device: torch.device) -> Callable[[Case, ModuleType], None]:
    """Run one case through the given adapters module on the session's device."""

    def run(case: Case, adapters: ModuleType) -> None:
        try:
            run_case(case, adapters, assignment.store_for(case), device)
        except FixtureError as err:
            pytest.fail(str(err), pytrace=False)

    return run


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
    return pytest.mark.parametrize("case", params)(test)
