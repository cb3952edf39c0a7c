from cs_basics.harness.pytest_plugin import graded

from . import adapters


@graded
def test_scaled_dot_product_attention(case, run_graded_case):
    run_graded_case(case, adapters)


@graded
def test_4d_scaled_dot_product_attention(case, run_graded_case):
    run_graded_case(case, adapters)


@graded
def test_scaled_dot_product_attention_mask(case, run_graded_case):
    run_graded_case(case, adapters)
