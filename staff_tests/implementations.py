"""Student-like implementations: correct variants the graded cases must pass, and broken
ones (the mistakes students plausibly make) each of which some graded case must fail, most
of them known mistakes (tests/cases.py MISTAKES, or a known crash) that the failure names."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from cs_basics.nn import functional


def softmax_max_shift(x, dim):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / e.sum(dim=dim, keepdim=True)


def attention_matmul(Q, K, V, mask=None, *, fill=-math.inf, scale=None, softmax=softmax_max_shift):
    """The textbook version: materialize the scores, mask, softmax, multiply."""
    scores = Q @ K.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(Q.shape[-1]))
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    weights = softmax(scores, -1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ V


def attention_where_nan_to_num(Q, K, V, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", Q / math.sqrt(Q.shape[-1]), K)
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=Q.dtype, device=Q.device))
    weights = torch.nan_to_num(softmax_max_shift(scores, -1), nan=0.0)
    return torch.einsum("...qk,...kd->...qd", weights, V)


def impl(attention=None, softmax=None) -> SimpleNamespace:
    """An adapters-like object over the given functions (the reference where not given)."""
    return SimpleNamespace(
        run_softmax=softmax or functional.softmax,
        run_scaled_dot_product_attention=attention or functional.scaled_dot_product_attention,
    )


CORRECT = {
    "reference": impl(),
    "matmul_max_shift": impl(attention_matmul, softmax_max_shift),
    "finite_fill": impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask, fill=torch.finfo(Q.dtype).min)),
    "where_nan_to_num": impl(attention_where_nan_to_num),
}


def _scores(Q, K):
    return Q @ K.mT / math.sqrt(Q.shape[-1])


def no_shift_softmax(x, dim):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def mask_after_softmax(Q, K, V, mask=None):
    weights = softmax_max_shift(_scores(Q, K), -1)
    return (weights * mask if mask is not None else weights) @ V


def nan_for_all_false_rows(Q, K, V, mask=None):
    scores = _scores(Q, K) if mask is None else _scores(Q, K).masked_fill(~mask, -math.inf)
    return softmax_max_shift(scores, -1) @ V


def uniform_for_all_false_rows(Q, K, V, mask=None):
    scores = _scores(Q, K) if mask is None else _scores(Q, K).masked_fill(~mask, -1e9)
    return softmax_max_shift(scores, -1) @ V


def bmm_only_3d(Q, K, V, mask=None):
    scores = torch.bmm(Q, K.transpose(1, 2)) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return torch.bmm(torch.nan_to_num(softmax_max_shift(scores, -1)), V)


def view_instead_of_reshape(Q, K, V, mask=None):
    flat = [t.view(-1, *t.shape[-2:]) for t in (Q, K, V)]
    m = None if mask is None else mask.expand(*Q.shape[:-1], K.shape[-2]).reshape(-1, Q.shape[-2], K.shape[-2])
    return attention_matmul(*flat, m).view(*Q.shape[:-1], V.shape[-1])


def scales_q_in_place(Q, K, V, mask=None):
    Q = Q.detach()
    Q /= math.sqrt(Q.shape[-1])
    return attention_matmul(Q, K, V, mask, scale=1.0)


def softmax_shifts_in_place(x, dim):
    x = x.detach()
    x -= x.max(dim=dim, keepdim=True).values
    return no_shift_softmax(x, dim)


def under_no_grad(Q, K, V, mask=None):
    with torch.no_grad():
        return attention_matmul(Q, K, V, mask)


def not_implemented(*args, **kwargs):
    raise NotImplementedError


def scale_by_sequence_length(Q, K, V, mask=None):
    d_k = K.size(-2)  # the keys' count, not their size
    return attention_matmul(Q, K, V, mask, scale=1 / math.sqrt(d_k))


def mask_multiplied_into_scores(Q, K, V, mask=None):
    scores = _scores(Q, K)
    if mask is not None:
        scores = scores * mask
    return softmax_max_shift(scores, -1) @ V


def scale_after_softmax(Q, K, V, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", Q, K)
    if mask is not None:
        scores = torch.where(mask, scores, -math.inf)
    weights = torch.nan_to_num(softmax_max_shift(scores, -1)) / math.sqrt(K.shape[-1])
    return torch.einsum("...qk,...kd->...qd", weights, V)


def nan_to_num_output(Q, K, V, mask=None):
    return torch.nan_to_num(nan_for_all_false_rows(Q, K, V, mask))


def mask_none_crash(Q, K, V, mask=None):
    return softmax_max_shift(_scores(Q, K).masked_fill(~mask, -math.inf), -1) @ V


def fill_minus_1e9(Q, K, V, mask=None):
    return attention_matmul(Q, K, V, mask, fill=-1e9)


def boolean_index(Q, K, V, mask=None):
    scores = _scores(Q, K)
    if mask is not None:
        scores[~mask] = -math.inf
    return torch.nan_to_num(softmax_max_shift(scores, -1)) @ V


def scales_q_in_place_with_grad(Q, K, V, mask=None):
    Q /= math.sqrt(Q.shape[-1])
    return attention_matmul(Q, K, V, mask, scale=1.0)


def softmax_divides_in_place(x, dim):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    e /= e.sum(dim=dim, keepdim=True)
    return e


def softmax_global_max(x, dim):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)


def softmax_sum_over_everything(x, dim):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / e.sum()


def scaled(scale_of):
    return lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask, scale=scale_of(Q, V))


def in_float32(Q, K, V, mask=None):
    return attention_matmul(Q.float(), K.float(), V.float(), mask)


def softmax_mean_shift(x, dim):
    e = torch.exp(x - x.mean(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def softmax_plus_epsilon(x, dim):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / (e.sum(dim=dim, keepdim=True) + 1e-6)


def transpose_3d_only(Q, K, V, mask=None):
    scores = torch.matmul(Q, K.transpose(1, 2)) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(softmax_max_shift(scores, -1)) @ V


def mask_unsqueezed_for_heads(Q, K, V, mask=None):
    scores = _scores(Q, K)
    if mask is not None:
        scores = scores.masked_fill(~mask.unsqueeze(1), -math.inf)  # (batch, 1, queries, keys) for the heads
    return torch.nan_to_num(softmax_max_shift(scores, -1)) @ V


def checks_mask_shape(Q, K, V, mask=None):
    if mask is not None and mask.shape != (*Q.shape[:-1], K.shape[-2]):
        raise ValueError(f"Mask shape {mask.shape} doesn't match Q {Q.shape} and K {K.shape}")
    return attention_matmul(Q, K, V, mask)


def mask_none_as_causal(Q, K, V, mask=None):
    if mask is None:  # no mask given: attend causally, as a decoder does
        mask = torch.tril(torch.ones(Q.shape[-2], K.shape[-2], dtype=torch.bool))
    return attention_matmul(Q, K, V, mask)


def zero_scores_as_masked(Q, K, V, mask=None):
    scores = _scores(Q, K)
    if mask is not None:
        scores = scores * mask  # masked scores become 0, and so is any score of exactly 0
        scores = scores.masked_fill(scores == 0, -math.inf)
    return torch.nan_to_num(softmax_max_shift(scores, -1)) @ V


def asserts_mask_shape(Q, K, V, mask=None):
    scores = _scores(Q, K)
    if mask is not None:
        assert mask.shape == scores.shape
    return attention_matmul(Q, K, V, mask)


# name -> (implementation, the id of a case it must fail)
BROKEN = {
    "mask_none_as_causal": (impl(mask_none_as_causal), "scaled_dot_product_attention-no_mask"),
    "zero_scores_as_masked": (impl(zero_scores_as_masked), "scaled_dot_product_attention_mask-zero_scores"),
    "asserts_mask_shape": (impl(asserts_mask_shape), "scaled_dot_product_attention_mask-padding_3d"),
    "no_scale": (impl(scaled(lambda Q, V: 1.0)), "scaled_dot_product_attention-no_mask"),
    "scale_by_d_k": (impl(scaled(lambda Q, V: 1 / Q.shape[-1])), "scaled_dot_product_attention-no_mask"),
    "scale_by_d_v": (impl(scaled(lambda Q, V: 1 / math.sqrt(V.shape[-1]))), "scaled_dot_product_attention-d_k_ne_d_v"),
    "mask_flipped": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, None if mask is None else ~mask)),
        "scaled_dot_product_attention-mask",
    ),
    "mask_ignored": (impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V)), "scaled_dot_product_attention-mask"),
    "mask_after_softmax": (impl(mask_after_softmax), "scaled_dot_product_attention_mask-weights"),
    "softmax_over_queries": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask, softmax=lambda s, d: softmax_max_shift(s, -2))),
        "scaled_dot_product_attention-no_mask",
    ),
    "softmax_no_shift": (impl(softmax=no_shift_softmax), "softmax-inputs_near_1e4"),
    "attention_softmax_no_shift": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask, softmax=no_shift_softmax)),
        "scaled_dot_product_attention-scores_offset_1e4",
    ),
    # stable but not exact: x - logsumexp(x) rounds to float32's 1e-3 grid near 1e4
    "softmax_via_logsumexp": (
        impl(softmax=lambda x, dim: torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))),
        "softmax-inputs_near_1e4",
    ),
    "softmax_always_last_dim": (impl(softmax=lambda x, dim: softmax_max_shift(x, -1)), "softmax-dim_0"),
    "nan_for_all_false_rows": (impl(nan_for_all_false_rows), "scaled_dot_product_attention_mask-all_false_rows"),
    "uniform_for_all_false_rows": (
        impl(uniform_for_all_false_rows),
        "scaled_dot_product_attention_mask-all_false_rows",
    ),
    "bmm_only_3d": (impl(bmm_only_3d), "4d_scaled_dot_product_attention-mask"),
    "view_instead_of_reshape": (impl(view_instead_of_reshape), "4d_scaled_dot_product_attention-heads_transposed"),
    "returns_tuple": (
        impl(lambda Q, K, V, mask=None: (attention_matmul(Q, K, V, mask), None)),
        "scaled_dot_product_attention-no_mask",
    ),
    "computes_in_float32": (impl(in_float32), "scaled_dot_product_attention-float64"),
    "float32_cast_back": (
        impl(lambda Q, K, V, mask=None: in_float32(Q, K, V, mask).to(Q.dtype)),
        "scaled_dot_product_attention-float64",
    ),
    "softmax_in_float32": (impl(softmax=lambda x, dim: softmax_max_shift(x.float(), dim)), "softmax-float64"),
    "output_on_another_device": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask).to("meta")),
        "scaled_dot_product_attention-no_mask",
    ),
    "gradient_cut": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask).detach()),
        "scaled_dot_product_attention-grad",
    ),
    "under_no_grad": (impl(under_no_grad), "scaled_dot_product_attention-grad"),
    "scales_q_in_place": (impl(scales_q_in_place), "scaled_dot_product_attention-no_mask"),
    "softmax_shifts_in_place": (impl(softmax=softmax_shifts_in_place), "softmax-last_dim"),
    "not_implemented": (impl(not_implemented, not_implemented), "scaled_dot_product_attention-no_mask"),
    "scale_by_sequence_length": (impl(scale_by_sequence_length), "scaled_dot_product_attention-causal_mask"),
    "mask_multiplied_into_scores": (impl(mask_multiplied_into_scores), "4d_scaled_dot_product_attention-padding_mask"),
    "scale_after_softmax": (impl(scale_after_softmax), "4d_scaled_dot_product_attention-causal_mask"),
    "nan_to_num_output": (impl(nan_to_num_output), "scaled_dot_product_attention_mask-all_false_rows"),
    "mask_none_crash": (impl(mask_none_crash), "scaled_dot_product_attention-grad_no_mask"),
    "fill_minus_1e9_in_float16": (impl(fill_minus_1e9), "scaled_dot_product_attention-float16"),
    "boolean_index_with_broadcast_mask": (impl(boolean_index), "scaled_dot_product_attention_mask-broadcast_5d"),
    "scales_q_in_place_with_grad": (impl(scales_q_in_place_with_grad), "scaled_dot_product_attention-grad"),
    "softmax_divides_in_place": (impl(softmax=softmax_divides_in_place), "softmax-grad"),
    "softmax_global_max": (impl(softmax=softmax_global_max), "hidden_softmax-dim_1_near_1e4"),
    "softmax_sum_over_everything": (impl(softmax=softmax_sum_over_everything), "softmax-last_dim"),
    "softmax_mean_shift": (impl(softmax=softmax_mean_shift), "softmax-wide_rows"),
    "softmax_plus_epsilon": (impl(softmax=softmax_plus_epsilon), "softmax-float64"),
    "attention_plus_epsilon": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask, softmax=softmax_plus_epsilon)),
        "scaled_dot_product_attention-float64",
    ),
    "attention_global_max": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask, softmax=softmax_global_max)),
        "scaled_dot_product_attention-scores_offset_1e4",
    ),
    "attention_mean_shift": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask, softmax=softmax_mean_shift)),
        "scaled_dot_product_attention-mask",
    ),
    "transpose_3d_only": (impl(transpose_3d_only), "4d_scaled_dot_product_attention-mask"),
    "mask_unsqueezed_for_heads": (impl(mask_unsqueezed_for_heads), "scaled_dot_product_attention_mask-padding_3d"),
    "checks_mask_shape": (impl(checks_mask_shape), "scaled_dot_product_attention_mask-padding_3d"),
    "no_scale_and_mask_flipped": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, None if mask is None else ~mask, scale=1.0)),
        "scaled_dot_product_attention-mask",
    ),
}

# the known mistake (tests/cases.py MISTAKES) or known crash (cs_basics.harness.diagnosis.CRASHES) that
# each broken implementation's failure must name; the others are outside the library and get no name
DIAGNOSES = {
    "mask_none_as_causal": "mask_none_as_causal",
    "zero_scores_as_masked": "zero_scores_masked",
    "asserts_mask_shape": "mask_shape_asserted",
    "no_scale": "no_scale",
    "scale_by_d_k": "scale_by_d_k",
    "scale_by_d_v": "scale_by_d_v",
    "scale_by_sequence_length": "scale_by_sequence_length",
    "mask_flipped": "mask_flipped",
    "mask_ignored": "mask_ignored",
    "mask_after_softmax": "mask_after_softmax",
    "mask_multiplied_into_scores": "mask_multiplied_into_scores",
    "softmax_over_queries": "softmax_over_queries",
    "scale_after_softmax": "scale_after_softmax",
    "uniform_for_all_false_rows": "all_false_rows_mean_of_v",
    "nan_for_all_false_rows": "all_false_rows_nan",
    "nan_to_num_output": "nan_to_num_output",
    "attention_softmax_no_shift": "no_max_shift",
    "float32_cast_back": "float32_arithmetic",
    "computes_in_float32": "float32_arithmetic",
    "softmax_no_shift": "no_max_shift",
    "softmax_global_max": "global_max",
    "softmax_always_last_dim": "ignores_dim",
    "softmax_sum_over_everything": "sum_over_everything",
    "softmax_in_float32": "float32_arithmetic",
    "mask_none_crash": "mask_none",
    "fill_minus_1e9_in_float16": "fill_overflows_float16",
    "boolean_index_with_broadcast_mask": "boolean_index_with_broadcast_mask",
    "view_instead_of_reshape": "view_on_non_contiguous",
    "scales_q_in_place_with_grad": "in_place_on_input",
    "softmax_divides_in_place": "in_place_on_saved_tensor",
    "bmm_only_3d": "bmm_on_more_than_3d",
    "softmax_mean_shift": "mean_shift",
    "softmax_plus_epsilon": "epsilon_in_denominator",
    "attention_plus_epsilon": "epsilon_in_denominator",
    "attention_global_max": "global_max",
    "attention_mean_shift": "mean_shift",
    "transpose_3d_only": "transpose_3d_only",
    "mask_unsqueezed_for_heads": "mask_shape_assumed",
    "checks_mask_shape": "mask_shape_assumed",
}


def fingerprint(t: torch.Tensor) -> str:
    """Which case a tensor argument comes from: its shape, dtype and the sum of its magnitudes."""
    return f"{tuple(t.shape)}|{t.dtype}|{float(t.detach().double().abs().sum()):.6g}"


# ---------------------------------------------------------------- lookalikes: other bugs with similar symptoms


def causal_mask(Q, K):
    return torch.ones(Q.shape[-2], K.shape[-2], dtype=torch.bool).tril()


def attention_with(softmax):
    return impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask, softmax=softmax))


def guarded_softmax(softmax):
    """`softmax` with the NaN of all-False rows replaced by zeros."""
    return lambda x, dim: torch.nan_to_num(softmax(x, dim))


def changed_output(change):
    return impl(lambda Q, K, V, mask=None: change(attention_matmul(Q, K, V, mask), mask))


def all_false_rows_set(value):
    def change(out, mask):
        empty = ~mask.any(-1)
        return torch.where(empty[..., None], value, out)

    return changed_output(change)


def raises(error):
    def attention(Q, K, V, mask=None):
        raise error

    return impl(attention)


def mask_added_as_ones(Q, K, V, mask=None):
    return softmax_max_shift(_scores(Q, K) + (0 if mask is None else mask.to(Q.dtype)), -1) @ V


def sqrt_in_graph(Q, K, V, mask=None):
    return attention_matmul(Q, K, V, mask) + 0 * Q.sqrt().sum()  # NaN gradients for negative Q, everywhere


def float32_promoting_mask(Q, K, V, mask=None):
    scores = _scores(Q, K) + torch.zeros(mask.shape).masked_fill(~mask, -math.inf)
    return torch.nan_to_num(softmax_max_shift(scores, -1)) @ V


def resizes_q(Q, K, V, mask=None):
    Q.resize_(Q.numel())
    return attention_matmul(Q, K, V, mask)


def asserts_mask_dtype(Q, K, V, mask=None):
    assert mask is None or mask.dtype == torch.float32  # an assert on the mask, but not on its shape
    return attention_matmul(Q, K, V, mask)


def checks_q_is_3d(Q, K, V, mask=None):
    if Q.dim() != 3:
        raise ValueError(f"Q must be (batch, seq, d), got {tuple(Q.shape)}")
    return attention_matmul(Q, K, V, mask)


A3, A4, MASKED = "scaled_dot_product_attention", "4d_scaled_dot_product_attention", "scaled_dot_product_attention_mask"
# known mistake -> (a different bug with similar symptoms, the case it fails): its failure must not name the mistake
LOOKALIKES = {
    "mask_none_as_causal": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, causal_mask(Q, K).mT if mask is None else mask)),
        f"{A3}-no_mask",
    ),
    "zero_scores_masked": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask) * (K.abs().sum(-1, keepdim=True) > 0).all()),
        f"{MASKED}-zero_scores",
    ),
    "mask_shape_asserted": (impl(asserts_mask_dtype), f"{MASKED}-padding_3d"),
    "no_scale": (impl(scaled(lambda Q, V: 0.5)), f"{A3}-no_mask"),
    "scale_by_d_k": (impl(scaled(lambda Q, V: 0.5 / math.sqrt(Q.shape[-1]))), f"{A3}-no_mask"),
    "scale_by_d_v": (impl(scaled(lambda Q, V: 1 / math.sqrt(V.shape[-1] + 1))), f"{A3}-d_k_ne_d_v"),
    "scale_by_sequence_length": (impl(scaled(lambda Q, V: 1 / math.sqrt(Q.shape[-2]))), f"{A3}-d_k_ne_d_v"),
    "mask_flipped": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, None if mask is None else mask.mT)),
        f"{A3}-causal_mask",
    ),
    "mask_ignored": (impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask, fill=-1.0)), f"{A3}-mask"),
    "mask_after_softmax": (
        impl(lambda Q, K, V, mask=None: mask_after_softmax(Q, K, V, None if mask is None else mask.mT)),
        f"{A3}-causal_mask",
    ),
    "mask_multiplied_into_scores": (impl(mask_added_as_ones), f"{A4}-padding_mask"),
    "softmax_over_queries": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask, softmax=lambda s, d: softmax_max_shift(s, 0))),
        f"{A3}-no_mask",
    ),
    "scale_after_softmax": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask, scale=1.0) / Q.shape[-1]),
        f"{A4}-causal_mask",
    ),
    "all_false_rows_mean_of_v": (all_false_rows_set(1.0), f"{MASKED}-all_false_rows"),
    "all_false_rows_nan": (all_false_rows_set(math.inf), f"{MASKED}-all_false_rows"),
    "nan_to_num_output": (impl(sqrt_in_graph), f"{MASKED}-all_false_rows"),
    "no_max_shift": (
        impl(softmax=lambda x, dim: no_shift_softmax(x.clamp(-80, 80), dim)),
        "softmax-inputs_near_1e4",
    ),
    "global_max": (impl(softmax=lambda x, dim: no_shift_softmax(x - x.min(), dim)), "softmax-inputs_near_1e4"),
    "mean_shift": (
        impl(softmax=lambda x, dim: no_shift_softmax(x - x.median(dim, keepdim=True).values, dim)),
        "softmax-wide_rows",
    ),
    "ignores_dim": (impl(softmax=lambda x, dim: softmax_max_shift(x, 0)), "softmax-dim_1"),
    "sum_over_everything": (
        impl(softmax=lambda x, dim: torch.exp(x - x.amax(dim, keepdim=True)) / torch.exp(x).sum(0)),
        "softmax-last_dim",
    ),
    "float32_arithmetic": (impl(softmax=lambda x, dim: softmax_max_shift(x, dim) * (1 - 3e-7)), "softmax-float64"),
    "epsilon_in_denominator": (
        impl(softmax=lambda x, dim: softmax_max_shift(x.float(), dim).double()),
        "softmax-float64",
    ),
    "mask_shape_assumed": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, None if mask is None else mask.unsqueeze(0))),
        f"{MASKED}-padding_3d",
    ),
    "transpose_3d_only": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K.transpose(0, 1), V, mask)),
        f"{A4}-mask",
    ),
    "mask_none": (raises(TypeError("must be real number, not torch.Size")), f"{A3}-no_mask"),
    "fill_overflows_float16": (impl(float32_promoting_mask), f"{A3}-float16"),
    "boolean_index_with_broadcast_mask": (raises(IndexError("index 6 is out of bounds for dimension 2")), f"{A3}-mask"),
    "view_on_non_contiguous": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask).view(-1, 7)),
        f"{A3}-noncontiguous",
    ),
    "in_place_on_input": (impl(resizes_q), f"{A3}-grad"),
    "in_place_on_saved_tensor": (
        impl(lambda Q, K, V, mask=None: attention_matmul(Q, K, V, mask).detach()),
        f"{A3}-grad",
    ),
    "bmm_on_more_than_3d": (
        impl(lambda Q, K, V, mask=None: torch.mm(Q, K.mT)),
        f"{A4}-no_mask",
    ),
}
# a crash that the case's arguments and the student's line make a known mistake, next to one that only looks like it
CRASH_LOOKALIKES = {"mask_shape_assumed": (impl(checks_q_is_3d), f"{A4}-padding_mask")}
