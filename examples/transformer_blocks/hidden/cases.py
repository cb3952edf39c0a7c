"""Hidden cases (never in the handout): the public cases' problems at new seeds and shapes."""

from __future__ import annotations

from dataclasses import replace

from tests.cases import rmsnorm, rope, silu, swiglu

CASES = [
    replace(rmsnorm("hidden_5d", 101, (2, 2, 3, 4, 32), grad=True), test="test_hidden_rmsnorm"),
    replace(silu("hidden_4d", 110, (2, 3, 4, 5), grad=True), test="test_hidden_silu"),
    replace(swiglu("hidden_4d", 111, (2, 3, 4, 32), d_ff=48, grad=True), test="test_hidden_swiglu"),
    replace(rope("hidden_shuffled_grad", 120, (4, 9, 32), shuffled=True, grad=True), test="test_hidden_rope"),
]
