from cs_basics.harness import graded

from tests import adapters


@graded
def test_hidden_cross_entropy(case, run_graded_case):
    run_graded_case(case, adapters)


@graded
def test_hidden_clipping(case, run_graded_case):
    run_graded_case(case, adapters)


@graded
def test_hidden_lr_cosine_schedule(case, run_graded_case):
    run_graded_case(case, adapters)


@graded
def test_hidden_adamw(case, run_graded_case):
    run_graded_case(case, adapters)


@graded
def test_hidden_get_batch(case, run_graded_case):
    run_graded_case(case, adapters)
