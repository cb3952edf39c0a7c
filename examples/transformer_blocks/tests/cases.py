"""The graded cases of the Transformer blocks assignment: three problems, each declared once.

RMSNorm and SiLU have torch functions the rule forbids, so their oracles are calls of those. SwiGLU and RoPE
have none: their oracles and every from-scratch known mistake are the staff's (hidden/answers.py, left out of
the handout), named here as "module:attribute"; the mistakes' outputs are stored in the fixtures, so the
students' run still names them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from cs_basics.harness import Mistake, Problem, Tolerance, randn

FLOAT32 = (Tolerance(atol=1e-5, rtol=1e-4), Tolerance(atol=1e-4, rtol=1e-3))  # gradients sum over rows
TOLERANCES = {torch.float32: FLOAT32, torch.float64: (Tolerance(atol=1e-12, rtol=1e-10),) * 2}
ANSWERS = "hidden.answers"  # the staff's module


def wrong(adapter: str, name: str, advice: str) -> Mistake:
    """A known mistake whose code is the staff's (hidden/answers.py): its outputs are stored in the fixtures."""
    return Mistake(name, advice, {adapter: f"{ANSWERS}:{name}"})


RMSNORM = Problem(
    "rmsnorm",
    points=1,
    calls={"run_rmsnorm(d_model, eps, weights, in_features)": lambda d, eps, w, x: F.rms_norm(x, (d,), w, eps)},
    tolerances=TOLERANCES,
    forbidden=["torch.nn.functional.rms_norm", "torch.nn.RMSNorm", "torch.rms_norm"],
    forbidden_ops=["aten.rms_norm", "aten._fused_rms_norm*"],
    mistakes=(
        wrong("run_rmsnorm", "eps_outside_sqrt", "eps belongs inside the square root: x / sqrt(mean(x^2) + eps)"),
        wrong("run_rmsnorm", "no_weight", "the normalized x is then scaled by `weight`, elementwise over d_model"),
        wrong("run_rmsnorm", "mean_subtracted", "no mean is subtracted (that is LayerNorm): divide by the RMS alone"),
    ),
)


def rmsnorm(param: str, seed: int, shape: tuple[int, ...], scale: float = 1.0, grad: bool = False, **kw):
    def make(seed: int) -> dict[str, torch.Tensor]:
        inputs = {"weights": 1 + randn(seed + 1, shape[-1]) / 4, "in_features": randn(seed, *shape) * scale}
        return inputs | ({"grad_out": randn(seed + 2, *shape)} if grad else {})

    return RMSNORM.case("test_rmsnorm", param, seed, make, d_model=shape[-1], eps=1e-5, **kw)


SWIGLU = Problem(
    "swiglu",
    points=2,
    calls={
        "run_swiglu(d_model, d_ff, w1_weight, w2_weight, w3_weight, in_features)": f"{ANSWERS}:swiglu",
        "run_silu(in_features)": F.silu,
    },
    tolerances=TOLERANCES,
    forbidden=["torch.nn.functional.silu", "torch.nn.SiLU"],
    forbidden_ops=["aten.silu", "aten.silu_*"],
    mistakes=(
        wrong("run_silu", "sigmoid_only", "SiLU is x * sigmoid(x), not sigmoid(x) alone"),
        wrong("run_swiglu", "gate_on_w3", "SiLU gates W1 x, and W3 x is what it multiplies: SiLU(W1 x) * W3 x"),
    ),
)


def swiglu_inputs(seed: int, shape: tuple[int, ...], d_ff: int, grad: bool) -> dict[str, torch.Tensor]:
    d_model = shape[-1]
    inputs = {
        "w1_weight": randn(seed + 1, d_ff, d_model) / d_model**0.5,
        "w2_weight": randn(seed + 2, d_model, d_ff) / d_ff**0.5,
        "w3_weight": randn(seed + 3, d_ff, d_model) / d_model**0.5,
        "in_features": randn(seed, *shape),
    }
    return inputs | ({"grad_out": randn(seed + 4, *shape)} if grad else {})


def swiglu(param: str, seed: int, shape: tuple[int, ...], d_ff: int, grad: bool = False, **kw):
    make = lambda s: swiglu_inputs(s, shape, d_ff, grad)  # noqa: E731
    return SWIGLU.case("test_swiglu", param, seed, make, d_model=shape[-1], d_ff=d_ff, **kw)


def silu(param: str, seed: int, shape: tuple[int, ...], grad: bool = False, **kw):
    make = lambda s: {"in_features": randn(s, *shape) * 4} | ({"grad_out": randn(s + 1, *shape)} if grad else {})  # noqa: E731
    return SWIGLU.case("test_silu", param, seed, make, adapter="run_silu", **kw)


ROPE = Problem(
    "rope",
    points=2,
    calls={"run_rope(d_k, theta, max_seq_len, in_query_or_key, token_positions)": f"{ANSWERS}:rope"},
    tolerances=TOLERANCES,
    mistakes=(
        wrong("run_rope", "halves_rotated", "rotate neighbouring pairs (x[2k], x[2k+1]), not the two halves of x"),
        wrong("run_rope", "positions_ignored", "rotate by each token's position (token_positions), not its index"),
        wrong("run_rope", "frequency_halved", "the k-th pair turns at theta^(-2k/d_k): k counts pairs, 2k dims"),
    ),
)


def rope(param: str, seed: int, shape: tuple[int, ...], shuffled: bool = False, grad: bool = False, **kw):
    def make(seed: int) -> dict[str, torch.Tensor]:
        *lead, seq, _ = shape
        positions = torch.arange(seq).expand(*lead, seq)
        if shuffled:  # tokens at positions of their own, up to max_seq_len
            gen = torch.Generator().manual_seed(seed)
            positions = torch.stack([torch.randperm(32, generator=gen)[:seq] for _ in range(lead[0])])
        inputs = {"in_query_or_key": randn(seed, *shape), "token_positions": positions.contiguous()}
        return inputs | ({"grad_out": randn(seed + 1, *shape)} if grad else {})

    return ROPE.case("test_rope", param, seed, make, d_k=shape[-1], theta=10000.0, max_seq_len=32, **kw)


CASES = [
    rmsnorm("cs336_shape", 1, (4, 12, 64)),
    rmsnorm("small_values", 2, (2, 5, 16), scale=1e-3),
    rmsnorm("grad", 3, (2, 5, 16), grad=True),
    rmsnorm("float64", 4, (3, 8), dtype=torch.float64),
    silu("cs336_shape", 10, (4, 12, 64)),
    silu("grad", 11, (3, 7), grad=True),
    swiglu("cs336_shape", 12, (4, 12, 64), d_ff=128),
    swiglu("grad", 13, (2, 5, 16), d_ff=24, grad=True),
    rope("cs336_shape", 20, (4, 12, 64)),
    rope("shuffled_positions", 21, (3, 6, 16), shuffled=True),
    rope("grad", 22, (2, 5, 8), shuffled=True, grad=True),
]
