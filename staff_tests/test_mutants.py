"""The graded cases pass every correct implementation and fail every broken one."""

import pytest

from cs_basics.harness.cases import run_case

from .implementations import BROKEN, CORRECT


def outcome(case, impl, assignment, device):
    try:
        run_case(case, impl, assignment.store_for(case), device)
    except Exception as err:  # a broken implementation may fail by raising anything
        return err
    return None


@pytest.mark.parametrize("name", CORRECT)
def test_correct_implementation_passes_every_case(name, assignment, device):
    failures = {c.id: outcome(c, CORRECT[name], assignment, device) for c in assignment.cases}
    failures = {k: v for k, v in failures.items() if v is not None}
    assert not failures, "\n".join(f"{k}: {v}" for k, v in failures.items())


@pytest.mark.parametrize("name", BROKEN)
def test_broken_implementation_fails_its_case(name, assignment, device):
    impl, case_id = BROKEN[name]
    case = next(c for c in assignment.cases if c.id == case_id)
    assert outcome(case, impl, assignment, device) is not None, f"{name} passed {case_id}"
