"""The reference solution's own contract: validation, runtime shape checks, edge cases."""

import math

import pytest
import torch

from cs_basics.harness.compare import Tolerance, assert_close
from cs_basics.nn import functional
from cs_basics.nn.functional import scaled_dot_product_attention, softmax

Q, K, V = torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 5)
BOOL = torch.bool

BAD_INPUTS = {
    "d_k differs": ((Q, torch.randn(2, 6, 7), V), ValueError, "same d_k", "K (2, 6, 7)"),
    "key counts differ": ((Q, K, torch.randn(2, 5, 5)), ValueError, "same number of keys", "V (2, 5, 5)"),
    "float mask": ((Q, K, V, torch.ones(2, 4, 6)), TypeError, "mask must be a bool tensor", "torch.float32"),
    "mask batch": ((Q, K, V, torch.ones(3, 4, 6, dtype=BOOL)), ValueError, "(3, 4, 6) does not broadcast", "(2, 4, 6)"),
    "mask extra dim": ((Q, K, V, torch.ones(2, 2, 4, 6, dtype=BOOL)), ValueError, "(2, 2, 4, 6)", "(2, 4, 6)"),
    "integers": ((Q.int(), K.int(), V.int()), TypeError, "Q must be a floating-point tensor", "torch.int32"),
    "mixed dtypes": ((Q, K.double(), V), TypeError, "share a dtype", "torch.float64"),
}


@pytest.mark.parametrize("bad", BAD_INPUTS)
def test_validation_names_the_shapes_or_dtypes(bad):
    """What a caller sees without jaxtyping's runtime checks (a student's script, the grader's child)."""
    args, error, *needles = BAD_INPUTS[bad]
    with pytest.raises(error) as info:
        functional._check_attention_inputs(*args, *([None] if len(args) == 3 else []))
    assert all(n in str(info.value) for n in needles), str(info.value)


@pytest.mark.parametrize("bad", BAD_INPUTS)
def test_bad_input_raises_type_or_value_error(bad):
    """In this test run jaxtyping checks the annotations first; either way the caller gets a clear error."""
    args = BAD_INPUTS[bad][0]
    with pytest.raises((TypeError, ValueError)) as info:
        scaled_dot_product_attention(*args)
    shapes = [str(tuple(a.shape)) for a in args] + [",".join(map(str, a.shape)) + "]" for a in args]
    dtypes = [str(a.dtype) for a in args]
    assert any(s in str(info.value) for s in shapes + dtypes)


def test_annotations_are_checked_at_run_time_in_this_test_run():
    with pytest.raises(TypeError, match="Type-check error"):
        scaled_dot_product_attention(Q, torch.randn(2, 6, 7), V)


@pytest.mark.parametrize("shift", [0.0, 1e4, -1e4, 3e38])
def test_softmax_is_exact_for_large_inputs(shift):
    x = torch.tensor([0.0, -1.0, -2.0, -40.0]) + shift
    expected = torch.softmax(x.double() - x.double().max(), dim=0)
    assert_close(softmax(x, dim=0), expected, Tolerance(atol=1e-7, rtol=1e-6), key=f"softmax shifted by {shift}")


def test_softmax_of_an_all_minus_inf_slice_is_zero_not_nan():
    x = torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]])
    assert torch.equal(softmax(x, dim=-1)[1], torch.zeros(2))


def test_all_false_rows_have_zero_gradients_and_no_nan():
    q, k, v = (t.clone().requires_grad_() for t in (Q, K, V))
    mask = torch.ones(2, 4, 6, dtype=BOOL)
    mask[1, 2] = False
    out = scaled_dot_product_attention(q, k, v, mask)
    out.sum().backward()
    assert torch.equal(out[1, 2], torch.zeros(5)) and torch.equal(q.grad[1, 2], torch.zeros(8))
    assert not any(t.isnan().any() for t in (out, q.grad, k.grad, v.grad))


def test_output_keeps_dtype_and_inputs_stay_unchanged():
    args = [t.half() for t in (Q, K, V)] + [torch.ones(4, 6, dtype=BOOL).tril()]
    copies = [t.clone() for t in args]
    assert scaled_dot_product_attention(*args).dtype == torch.float16
    assert all(torch.equal(a, c) for a, c in zip(args, copies, strict=True))


def test_the_output_is_a_tensor_of_its_own_that_may_be_changed_in_place():
    """Not a view of an input: changing it changes no input, and a backward pass through the change is right
    (the plain formula keeps P and V for its backward pass, not its output)."""
    q, k, v = (t.clone().requires_grad_() for t in (Q, K, V))
    mask = torch.ones(4, 6, dtype=BOOL).tril()
    expected = torch.autograd.grad(scaled_dot_product_attention(q, k, v, mask).sum(), (q, k, v))
    out = scaled_dot_product_attention(q, k, v, mask)
    assert out._base is None
    out += 1.0
    got = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), (Q, K, V), strict=True))
