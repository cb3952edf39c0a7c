from cs_basics.harness.pytest_plugin import graded

from . import adapters


@graded
def test_softmax(case, run_graded_case):
    run_graded_case(case, adapters)
