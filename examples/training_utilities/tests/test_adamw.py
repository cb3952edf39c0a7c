from cs_basics.harness import graded

from . import adapters


@graded
def test_adamw(case, run_graded_case):
    run_graded_case(case, adapters)
