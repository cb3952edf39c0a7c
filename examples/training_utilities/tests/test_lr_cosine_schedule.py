from cs_basics.harness import graded

from . import adapters


@graded
def test_lr_cosine_schedule(case, run_graded_case):
    run_graded_case(case, adapters)
