from cs_basics.harness.pytest_plugin import graded
from tests import adapters


@graded
def test_hidden_softmax(case, run_graded_case):
    run_graded_case(case, adapters)


@graded
def test_hidden_scaled_dot_product_attention(case, run_graded_case):
    run_graded_case(case, adapters)
