from cs_basics.harness import graded

from tests import adapters


@graded
def test_hidden_rmsnorm(case, run_graded_case):
    run_graded_case(case, adapters)


@graded
def test_hidden_silu(case, run_graded_case):
    run_graded_case(case, adapters)


@graded
def test_hidden_swiglu(case, run_graded_case):
    run_graded_case(case, adapters)


@graded
def test_hidden_rope(case, run_graded_case):
    run_graded_case(case, adapters)
