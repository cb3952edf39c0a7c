"""Hidden cases: graded like the public ones, but kept out of the student handout.

Their inputs and expected values live in hidden/fixtures/ and never ship to students, so a
submission that looks answers up in the public fixtures cannot reach full marks. They reuse
the public cases' building blocks; only the seeds and shapes are new.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from tests.cases import attention, causal_mask, random_mask, shapes, softmax

SOFTMAX = "test_hidden_softmax"
ATTENTION = "test_hidden_scaled_dot_product_attention"

CASES = [
    replace(softmax("dim_1_near_1e4", 110, dim=1, shift=1e4), test=SOFTMAX),
    replace(softmax("grad_dim_0", 111, dim=0, grad=True), test=SOFTMAX),
    attention(
        ATTENTION,
        "mask_3d",
        120,
        shapes((3, 9, 32), (3, 11, 32), (3, 11, 16), lambda s: random_mask(s, 3, 9, 11)),
    ),
    attention(
        ATTENTION,
        "causal_grad_4d",
        121,
        shapes((2, 3, 7, 16), (2, 3, 7, 16), (2, 3, 7, 8), lambda s: causal_mask(7), grad=True),
    ),
    attention(
        ATTENTION,
        "padding_grad_5d",
        122,
        shapes(
            (2, 2, 2, 5, 8),
            (2, 2, 2, 6, 8),
            (2, 2, 2, 6, 4),
            lambda s: torch.arange(6) < torch.tensor([6, 2])[:, None, None, None, None],
            grad=True,
        ),
    ),
]
