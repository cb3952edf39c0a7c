from cs_basics.harness import graded

from . import adapters


@graded
def test_cross_entropy(case, run_graded_case):
    run_graded_case(case, adapters)
