"""The reference's no-gradient path (queries in blocks, softmax in place) against its plain path."""

import math

import pytest
import torch
import torch.nn.functional as F

from cs_basics.nn import functional

BOOL = torch.bool


def inputs(*batch, n_q=7, n_k=5, d_k=4, d_v=3, scale=1.0):
    gen = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(*batch, n, d, generator=gen) for n, d in ((n_q, d_k), (n_k, d_k), (n_k, d_v)))
    return Q * scale, K, V


def causal_with_empty_row(n_q, n_k):
    mask = torch.ones(n_q, n_k, dtype=BOOL).tril()
    mask[3] = False  # a query that may attend to nothing
    return mask


MASKS = {
    "none": lambda *b: None,
    "causal (queries, keys) with an all-False row": lambda *b: causal_with_empty_row(7, 5),
    "padding (batch, 1, keys)": lambda *b: torch.tensor([[True] * 3 + [False] * 2, [True] * 5])[:, None, :],
    "full": lambda *b: torch.rand(*b, 7, 5, generator=torch.Generator().manual_seed(1)) > 0.3,
    "keys only": lambda *b: torch.tensor([True, False, True, True, False]),
}


@pytest.fixture(params=[1, 3, 7, 1000], ids=lambda n: f"{n}-scores-per-block")
def small_blocks(request, monkeypatch):
    monkeypatch.setattr(functional, "SCORES_PER_BLOCK", request.param)


@pytest.mark.parametrize("name", MASKS)
def test_blocks_match_the_plain_path_and_torch(name, small_blocks):
    Q, K, V = inputs(2, 3)
    mask = MASKS[name](2, 3)
    if name == "padding (batch, 1, keys)":
        mask = mask[:, None]  # (batch, 1, 1, keys) over (batch, heads, queries, keys)
    full = None if mask is None else mask.expand(2, 3, 7, 5)  # torch's SDPA wants at least 2 dims
    copies = [t.clone() for t in (Q, K, V)]
    with torch.no_grad():
        out = functional._attention_in_blocks(Q, K, V, mask)
        plain = functional._attention(Q, K, V, mask)
        ref = F.scaled_dot_product_attention(*(t.double() for t in (Q, K, V)), attn_mask=full)
    assert out.shape == plain.shape and out.dtype == Q.dtype
    assert not out.isnan().any()
    torch.testing.assert_close(out, plain, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out.double(), ref.nan_to_num(0.0), atol=1e-6, rtol=1e-5)
    assert all(torch.equal(a, c) for a, c in zip((Q, K, V), copies, strict=True))
    if name.startswith("causal"):
        assert torch.equal(out[..., 3, :], torch.zeros(2, 3, 3))


def test_no_grad_is_the_block_path_and_grad_the_plain_one(monkeypatch):
    calls = []
    blocks = functional._attention_in_blocks
    monkeypatch.setattr(functional, "_attention_in_blocks", lambda *a: calls.append("blocks") or blocks(*a))
    Q, K, V = inputs(2)
    functional.scaled_dot_product_attention(Q, K, V)
    with torch.no_grad():
        functional.scaled_dot_product_attention(Q.requires_grad_(), K, V)
    out = functional.scaled_dot_product_attention(Q, K, V)
    assert calls == ["blocks", "blocks"] and out.requires_grad


def test_blocks_are_exact_for_scores_around_1e4(small_blocks):
    Q, K, V = inputs(2, n_q=3, n_k=6, scale=2e3)
    with torch.no_grad():
        out = functional._attention_in_blocks(Q, K, V, None)
        ref = F.scaled_dot_product_attention(*(t.double() for t in (Q, K, V)))
    assert (Q @ K.mT / math.sqrt(4)).abs().max() > 5e3
    torch.testing.assert_close(out.double(), ref, atol=1e-6, rtol=1e-5)


def test_blocks_keep_half_precision_and_noncontiguous_heads(small_blocks):
    Q, K, V = (t.transpose(1, 2) for t in inputs(2, 7, n_q=5, n_k=5))  # (batch, 5, 7, d) views of (batch, 7, 5, d)
    with torch.no_grad():
        out = functional._attention_in_blocks(Q.half(), K.half(), V.half(), causal_with_empty_row(7, 7))
        plain = functional._attention(Q, K, V, causal_with_empty_row(7, 7))
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.float(), plain, atol=2e-3, rtol=2e-3)
