from cs_basics.harness.pytest_plugin import graded

from . import adapters


@graded
def test_multihead_self_attention(case, run_graded_case):
    run_graded_case(case, adapters)


@graded
def test_multihead_self_attention_causal(case, run_graded_case):
    run_graded_case(case, adapters)
