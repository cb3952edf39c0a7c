"""The study kernel (cs_basics/study/flash.py), and the reference beside it where both keep one contract:
forward and backward against the plain formula and torch in float64.

The graded cases are small enough to fit in one block, so here the kernel's blocks are made small
(down to one score) to run the block loop on every case: graded, hidden and random. The tests of
both take `attention`: the reference, then the kernel in blocks of each size.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from cs_basics.harness.cases import run_case
from cs_basics.harness.config import Assignment
from cs_basics.nn import functional
from cs_basics.study import flash

from .implementations import impl
from .test_from_scratch import ATTENTION, SOFTMAX, SOFTMAX_FROM_SCRATCH, first_breach, source

BOOL = torch.bool
ASSIGNMENT = Assignment.find()
ATTENTION_CASES = [c for c in ASSIGNMENT.cases if c.problem == "scaled_dot_product_attention"]


def plain_attention(Q, K, V, mask=None):
    """The formula as written, every score at once; autograd differentiates it."""
    scores = Q @ K.mT / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return torch.softmax(scores, dim=-1).nan_to_num(0.0) @ V  # an all-False row: 0


def torch_float64(Q, K, V, mask=None):
    """torch's own SDPA in float64 (the fixtures' oracle): output and the function for gradients."""
    full = None if mask is None else mask.expand(*Q.shape[:-1], K.shape[-2])  # its SDPA wants the full shape
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=full).nan_to_num(0.0)


def inputs(*batch, n_q=7, n_k=5, d_k=4, d_v=3, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = ((n_q, d_k), (n_k, d_k), (n_k, d_v))
    return [torch.randn(*batch, n, d, generator=gen, dtype=torch.float64).to(dtype) for n, d in shapes]


def causal_with_empty_row(n_q, n_k):
    mask = torch.ones(n_q, n_k, dtype=BOOL).tril()
    mask[3] = False  # a query that may attend to nothing
    return mask


MASKS = {  # over (2, 3, 7 queries, 5 keys)
    "none": None,
    "causal (queries, keys) with an all-False row": causal_with_empty_row(7, 5),
    "padding (batch, 1, 1, keys)": torch.tensor([[True] * 3 + [False] * 2, [True] * 5])[:, None, None, :],
    "full": torch.rand(2, 3, 7, 5, generator=torch.Generator().manual_seed(1)) > 0.3,
    "keys only (1, keys)": torch.tensor([[True, False, True, True, False]]),
    "5D (1, 2, 3, 7, 5)": torch.rand(1, 2, 3, 7, 5, generator=torch.Generator().manual_seed(2)) > 0.5,
}


REFERENCE = functional.scaled_dot_product_attention


@pytest.fixture(
    params=[None, 1, 3, 7, 36, 1000], ids=lambda n: "reference" if n is None else f"flash-{n}-scores-per-block"
)
def attention(request, monkeypatch):
    """The reference, then the kernel with 1: one score per block; 3, 7: runs of queries; 36: a whole head;
    1000: several heads at once."""
    if request.param is None:
        return REFERENCE
    monkeypatch.setattr(flash, "SCORES_PER_BLOCK", request.param)
    return flash.flash_attention


def blocks_of(scores: int, monkeypatch) -> None:
    monkeypatch.setattr(flash, "SCORES_PER_BLOCK", scores)


def forward_and_gradients(attention, Q, K, V, mask, grad_out):
    leaves = [t.detach().requires_grad_() for t in (Q, K, V)]
    out = attention(*leaves, mask)
    return [out.detach(), *torch.autograd.grad(out, leaves, grad_out)]


@pytest.mark.parametrize("name", MASKS)
def test_every_mask_matches_the_plain_formula_and_torch(name, attention):
    mask = MASKS[name]
    Q, K, V = inputs(2, 3)
    batch = (1, 2, 3) if name.startswith("5D") else (2, 3)
    Q, K, V = (t.expand(*batch, *t.shape[-2:]) for t in (Q, K, V))  # a 5D mask makes 5D outputs
    grad_out = torch.randn(*batch, 7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    copies = [t.clone() for t in (Q, K, V, grad_out)]
    ours = forward_and_gradients(attention, Q, K, V, mask, grad_out)
    plain = forward_and_gradients(plain_attention, Q, K, V, mask, grad_out)
    theirs = forward_and_gradients(torch_float64, Q, K, V, mask, grad_out)
    for what, a, b, c in zip(("out", "dQ", "dK", "dV"), ours, plain, theirs, strict=True):
        assert a.shape == b.shape and a.dtype == torch.float64, what
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10, msg=lambda m, what=what: f"{what} vs plain: {m}")
        torch.testing.assert_close(a, c, atol=1e-12, rtol=1e-10, msg=lambda m, what=what: f"{what} vs torch: {m}")
    assert all(torch.equal(a, c) for a, c in zip((Q, K, V, grad_out), copies, strict=True))
    if name.startswith("causal"):
        out, dQ = ours[0], ours[1]
        assert torch.equal(out[..., 3, :], torch.zeros(2, 3, 3)) and torch.equal(dQ[..., 3, :], torch.zeros(2, 3, 4))


@pytest.mark.parametrize("case", ATTENTION_CASES, ids=lambda c: c.id)
def test_every_graded_and_hidden_case_in_blocks(case, monkeypatch):
    """Each case, checked as the graded tests check it (values, gradients, inputs unchanged), in blocks
    of 7 scores: runs of queries across heads, and blocks that end inside a row's batch. (The reference
    runs them as the graded tests.)"""
    blocks_of(7, monkeypatch)
    run_case(case, impl(flash.flash_attention), ASSIGNMENT.store_for(case), torch.device("cpu"))


@pytest.mark.parametrize("kernel", [False, True], ids=["reference", "flash"])
@pytest.mark.parametrize("seed", range(6))
def test_random_shapes_match_torch(seed, kernel):
    gen = torch.Generator().manual_seed(seed)
    size = lambda hi: int(torch.randint(1, hi, (), generator=gen))  # noqa: E731
    batch = [size(4) for _ in range(size(4) - 1)]
    n_q, n_k, d_k, d_v = size(40), size(40), size(20), size(20)
    Q, K, V = inputs(*batch, n_q=n_q, n_k=n_k, d_k=d_k, d_v=d_v, seed=seed)
    mask = torch.rand(n_q, n_k, generator=gen) > 0.3 if seed % 2 else None
    grad_out = torch.randn(*batch, n_q, d_v, dtype=torch.float64, generator=gen)
    with pytest.MonkeyPatch.context() as patch:
        blocks_of(size(200), patch)
        ours = forward_and_gradients(flash.flash_attention if kernel else REFERENCE, Q, K, V, mask, grad_out)
    theirs = forward_and_gradients(torch_float64, Q, K, V, mask, grad_out)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("kernel", [False, True], ids=["reference", "flash"])
@pytest.mark.parametrize("mask", [None, causal_with_empty_row(5, 4)], ids=["no mask", "causal, an all-False row"])
def test_gradcheck_in_float64(mask, kernel, monkeypatch):
    blocks_of(5, monkeypatch)
    attention = flash.flash_attention if kernel else REFERENCE
    Q, K, V = (t.requires_grad_() for t in inputs(2, n_q=5, n_k=4, d_k=3, d_v=2))
    assert torch.autograd.gradcheck(lambda q, k, v: attention(q, k, v, mask), (Q, K, V))


def large_offset_example(d_k=16):
    """Scores around 1.6e4 that differ by little, whose Q K^T float32 computes exactly (quarters)."""
    gen = torch.Generator().manual_seed(0)
    Q = torch.randint(-8, 9, (2, 6, d_k), generator=gen) / 4
    K = torch.randint(-8, 9, (2, 7, d_k), generator=gen) / 4
    Q[..., 0], K[..., 0] = 128, 512
    return Q, K, torch.randn(2, 7, 16, generator=gen)


@pytest.mark.parametrize("d_k", [16, 12], ids=["d_k 16, a scale Q takes exactly", "d_k 12, a scale after the max"])
def test_one_answer_with_and_without_gradients_for_a_large_common_offset(d_k, attention):
    Q, K, V = large_offset_example(d_k)
    assert (Q @ K.mT / math.sqrt(d_k)).min() > 1.6e4
    expected = torch_float64(Q.double(), K.double(), V.double())
    with torch.no_grad():
        without = attention(Q, K, V)
    with_grad = attention(Q.clone().requires_grad_(), K, V)
    assert torch.equal(without, with_grad.detach())
    assert (without.double() - expected).abs().max() < 1e-6
    if d_k == 16:  # torch scales the scores before their max is off: exact only when the scale is a power of two
        torch.testing.assert_close(without, F.scaled_dot_product_attention(Q, K, V), atol=1e-6, rtol=1e-5)


def test_scores_around_1e4_are_exact(attention):
    Q, K, V = inputs(2, n_q=3, n_k=6, dtype=torch.float32)
    Q = Q * 5e3  # the weights are one-hot here: exact in float32 unless exp overflows or the shift is lost
    assert (Q @ K.mT / 2).abs().max() > 5e3
    ours = forward_and_gradients(attention, Q, K, V, None, torch.ones(2, 3, 3))
    theirs = forward_and_gradients(
        torch_float64, Q.double(), K.double(), V.double(), None, torch.ones(2, 3, 3).double()
    )
    torch.testing.assert_close(ours[0].double(), theirs[0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ours[3].double(), theirs[3], atol=1e-5, rtol=1e-4)  # dV; dQ, dK ~ 1e4 are huge


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_keeps_its_dtype_and_noncontiguous_heads(dtype, attention):
    Q, K, V = (t.transpose(1, 2) for t in inputs(2, 7, n_q=5, n_k=5))  # (batch, 5, 7, d) views of (batch, 7, 5, d)
    mask = causal_with_empty_row(7, 7)
    grad_out = torch.randn(2, 5, 7, 3, dtype=torch.float64)
    ours = forward_and_gradients(attention, *(t.to(dtype) for t in (Q, K, V)), mask, grad_out.to(dtype))
    theirs = forward_and_gradients(torch_float64, Q, K, V, mask, grad_out)
    tolerance = {torch.float16: 4e-3, torch.bfloat16: 3e-2, torch.float32: 1e-5}[dtype]
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == dtype
        torch.testing.assert_close(a.double(), b, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("attention", [REFERENCE, flash.flash_attention], ids=["reference", "flash"])
def test_a_mask_gets_no_gradient_and_inputs_need_not_all_require_one(attention):
    Q, K, V = inputs(2)
    K.requires_grad_()
    mask = torch.ones(7, 5, dtype=BOOL)
    attention(Q, K, V, mask).sum().backward()
    assert Q.grad is None and V.grad is None and K.grad is not None and mask.grad is None


def test_double_backward_is_refused_with_a_clear_error():
    Q, K, V = (t.requires_grad_() for t in inputs(2))
    out = flash.flash_attention(Q, K, V)
    with pytest.raises(RuntimeError, match=r"double backward \(create_graph=True\) is not supported"):
        torch.autograd.grad(out.sum(), Q, create_graph=True)


def test_memory_is_bounded_forward_and_backward(monkeypatch):
    """No tensor as large as the scores is made: every new storage is at most an input's size."""
    blocks_of(64, monkeypatch)
    Q, K, V = (t.float().requires_grad_() for t in inputs(2, 2, n_q=128, n_k=96, d_k=8, d_v=8))
    mask = torch.ones(128, 96, dtype=BOOL).tril()
    sizes = []

    class Sizes(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            tensors = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
            sizes.extend(t.untyped_storage().nbytes() for t in tensors)
            return out

    with Sizes():
        flash.flash_attention(Q, K, V, mask).sum().backward()
    scores = 2 * 2 * 128 * 96 * 4
    assert max(sizes) <= Q.untyped_storage().nbytes() < scores / 10, (max(sizes), scores)


def test_autocast_changes_nothing_inside():
    """Training under torch.autocast (AMP): the blocks are computed in the inputs' dtype, as without it."""
    Q, K, V = (t.float().requires_grad_() for t in inputs(2, 3))
    mask = MASKS["full"]
    expected = forward_and_gradients(flash.flash_attention, Q, K, V, mask, torch.ones(2, 3, 7, 3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = forward_and_gradients(flash.flash_attention, Q, K, V, mask, torch.ones(2, 3, 7, 3))
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))


def test_the_output_may_be_changed_in_place_and_a_backward_through_that_is_refused():
    """As with torch's fused kernels, which keep their output for the backward pass too: the change is
    allowed, and autograd's own check refuses a backward pass that would use the changed output."""
    Q, K, V = (t.float().requires_grad_() for t in inputs(2, n_q=5, d_v=4))  # torch's flash kernel's case
    for attention in (flash.flash_attention, F.scaled_dot_product_attention):
        out = attention(Q, K, V)
        out += 1.0
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()
    with torch.no_grad():
        out = flash.flash_attention(Q, K, V)
        out += 1.0


STUDY_KERNEL_ANSWERS = {  # a submission whose attention is the course's kernel, which the grader stages in full
    # imported in attention: a module-level import of a module the course does not allow holds every problem
    "imported": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    from cs_basics.study.flash import flash_attention

    return flash_attention(Q, K, V, mask)
""",
    "found at run time": """
def scaled_dot_product_attention(Q, K, V, mask=None):
    import importlib

    kernel = importlib.import_module("cs_basics." + "study.flash")
    return getattr(kernel, "flash_" + "attention")(Q, K, V, mask)
""",
}


@pytest.mark.parametrize("how", STUDY_KERNEL_ANSWERS)
def test_the_study_kernel_is_no_answer_to_the_assignment(how, assignment, tmp_path):
    """The name is found in the code attention reaches, or the kernel's marker operator in a case's run."""
    submission = source(SOFTMAX_FROM_SCRATCH, STUDY_KERNEL_ANSWERS[how])
    # reached at run time, importlib and getattr hold attention for review; released, the kernel's marker is seen
    released = () if how == "imported" else (ATTENTION,)
    message = first_breach(assignment, tmp_path, submission, {SOFTMAX: 1.0, ATTENTION: 0.0}, released)
    if how == "imported":
        assert "uses cs_basics.study.flash.flash_attention at cs_basics/nn/functional.py:" in message, message
    else:
        assert "cs_basics.study_kernel, which is the course's study kernel (cs_basics/study)" in message, message
        assert "called from cs_basics/nn/functional.py:" in message, message


Q2 = torch.ones(2, 3, 4)


@pytest.mark.parametrize(
    ("args", "error", "needle"),
    [
        ((Q2, torch.ones(2, 5, 3), torch.ones(2, 5, 6)), ValueError, "K (2, 5, 3) torch.float32"),
        ((Q2, torch.ones(2, 5, 4), torch.ones(2, 4, 6)), ValueError, "V (2, 4, 6) torch.float32"),
        ((Q2, Q2.double(), Q2), TypeError, "K (2, 3, 4) torch.float64"),
        ((Q2.int(), Q2, Q2), TypeError, "Q (2, 3, 4) torch.int32"),
        ((Q2, Q2, Q2, torch.ones(3, 3, dtype=torch.int64)), TypeError, "(3, 3) torch.int64"),
        ((Q2, Q2, Q2, torch.ones(2, 2, 3, 3, dtype=BOOL)), ValueError, "(2, 2, 3, 3) does not broadcast"),
        ((Q2, Q2, Q2, torch.ones(3, 2, 3, dtype=BOOL)), ValueError, "= (2, 3, 3)"),
    ],
)
def test_the_kernel_names_the_shapes_and_dtypes_of_bad_input(args, error, needle):
    with pytest.raises(error, match="flash_attention") as info:
        flash.flash_attention(*args)
    assert needle in str(info.value), str(info.value)
