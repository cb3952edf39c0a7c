"""Hidden cases (never in the handout): the public cases' problems at new seeds, shapes and settings."""

from __future__ import annotations

from dataclasses import replace

from tests.cases import adamw, clipping, cross_entropy, get_batch, schedule

CASES = [
    replace(cross_entropy("hidden_3d", 101, (2, 3, 17)), test="test_hidden_cross_entropy"),
    replace(clipping("hidden_many", 102, (4, 1, 6, 2, 3), max_l2_norm=0.5, frozen=0), test="test_hidden_clipping"),
    replace(
        schedule(
            "hidden_long", 60, max_learning_rate=3e-4, min_learning_rate=3e-5, warmup_iters=10, cosine_cycle_iters=50
        ),
        test="test_hidden_lr_cosine_schedule",
    ),
    replace(adamw("hidden_resumed", 103, (3, 1), steps=6, resume_after=4, lr=3e-4), test="test_hidden_adamw"),
    replace(get_batch("hidden_long_context", 64, 8, 16), test="test_hidden_get_batch"),
]
