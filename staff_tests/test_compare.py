import math

import pytest
import torch

from cs_basics.harness.compare import Tolerance, assert_close, mismatch

TOL = Tolerance(atol=1e-6, rtol=1e-5)


def test_equal_tensors_match():
    x = torch.randn(3, 4)
    assert mismatch(x, x.double(), TOL, key="k", dtype=torch.float32, device=torch.device("cpu")) is None


def test_reports_count_worst_error_and_where():
    expected = torch.zeros(2, 3, 4, dtype=torch.float64)
    actual = torch.zeros(2, 3, 4)
    actual[1, 2, 3] = 0.5
    actual[0, 1, 0] = 1e-3
    message = mismatch(actual, expected, TOL, key="case: out")
    assert message.startswith("case: out: 2 of 24 elements differ")
    assert "worst absolute error 5.000e-01 at index (1, 2, 3): expected 0, got 0.5" in message


def test_relative_error_is_reported_where_it_is_worst():
    expected = torch.tensor([100.0, 1.0], dtype=torch.float64)
    actual = torch.tensor([101.0, 1.5])
    message = mismatch(actual, expected, TOL, key="k")
    assert "worst absolute error 1.000e+00 at index (0,)" in message
    assert "worst relative error 5.000e-01 at index (1,)" in message


def test_nan_never_matches_and_is_located():
    expected = torch.zeros(4, dtype=torch.float64)
    actual = torch.tensor([0.0, math.nan, 0.0, math.nan])
    message = mismatch(actual, expected, TOL, key="k")
    assert "2 of 4 elements differ" in message and "2 NaN in the result, first at index (1,)" in message


@pytest.mark.parametrize(
    ("actual", "needle"),
    [
        ((torch.zeros(2), None), "expected a torch.Tensor, got tuple(Tensor(shape=(2,)"),
        ([torch.zeros(2)], "expected a torch.Tensor, got list"),
        (None, "expected a torch.Tensor, got NoneType"),
        (torch.zeros(3), "shape mismatch: expected (2,), got (3,)"),
        (torch.zeros(2, dtype=torch.float64), "dtype mismatch: expected torch.float32, got torch.float64"),
        (torch.zeros(2, device="meta"), "device mismatch: expected cpu, got meta"),
    ],
)
def test_wrong_kind_of_result_says_what_is_wrong(actual, needle):
    message = mismatch(
        actual, torch.zeros(2, dtype=torch.float64), TOL, key="k", dtype=torch.float32, device=torch.device("cpu")
    )
    assert needle in message


def test_tuple_hint_tells_the_student_to_return_only_the_output():
    message = mismatch((torch.zeros(2),), torch.zeros(2), TOL, key="k")
    assert "return only the output tensor" in message


def test_tolerance_is_atol_plus_rtol_times_expected():
    expected = torch.tensor([1000.0], dtype=torch.float64)
    inside = torch.tensor([1000.0 + 1e-6 + 1e-5 * 1000 * 0.99], dtype=torch.float64)
    outside = torch.tensor([1000.0 + 1e-6 + 1e-5 * 1000 * 1.01], dtype=torch.float64)
    assert mismatch(inside, expected, TOL, key="k") is None
    assert mismatch(outside, expected, TOL, key="k") is not None


def test_assert_close_raises_with_the_rerun_command():
    with pytest.raises(AssertionError, match=r"(?s)1 of 1 elements differ.*rerun: uv run pytest -k x"):
        assert_close(torch.ones(1), torch.zeros(1), TOL, key="k", fix="uv run pytest -k x")
