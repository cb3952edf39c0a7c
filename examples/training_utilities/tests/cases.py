"""The graded cases of the training utilities: five problems, one of each kind a course teaches, each declared once.

- cross-entropy: a function of tensors (its loss a one-value tensor, with gradients);
- gradient clipping: changes the parameters' .grad in place and returns nothing (`InPlace`);
- the cosine schedule: a Python number, at each iteration (`Number`);
- AdamW: the adapter returns a class, built and stepped by each case (`Optimizer`);
- the batch sampler: draws at random from the seeded global generators (`Seeded`).
The oracles and mistakes that compute from scratch are the staff's (hidden/answers.py, "hidden.answers:NAME");
those that call what the rule forbids a student (torch's cross-entropy, clipping, Adam) ship with the tests.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from cs_basics.harness import InPlace, Mistake, Number, Optimizer, Problem, Seeded, Tolerance, randn

FLOAT32 = (Tolerance(atol=1e-6, rtol=1e-5), Tolerance(atol=1e-6, rtol=1e-4))
TOLERANCES = {torch.float32: FLOAT32, torch.float64: (Tolerance(atol=1e-12, rtol=1e-10),) * 2}
ANSWERS = "hidden.answers"  # the staff's module


def wrong(adapter: str, name: str, advice: str, **kw) -> Mistake:
    """A known mistake whose code is the staff's (hidden/answers.py): its outputs are stored in the fixtures."""
    return Mistake(name, advice, {adapter: f"{ANSWERS}:{name}"}, **kw)


# ---------------------------------------------------------------- a function of tensors: the loss

CROSS_ENTROPY = Problem(
    "cross_entropy",
    points=1,
    calls={"run_cross_entropy(inputs, targets)": lambda x, t: F.cross_entropy(x.flatten(0, -2), t.flatten())},
    tolerances=TOLERANCES,
    forbidden=["torch.nn.functional.cross_entropy", "torch.nn.functional.log_softmax", "torch.nn.CrossEntropyLoss"],
    forbidden_ops=["aten.cross_entropy_loss", "aten.nll_loss*", "aten._log_softmax*"],
    mistakes=(
        Mistake(
            "sum_not_mean",
            "the loss is the mean over the examples, not their sum: divide by their number (or .mean())",
            {"run_cross_entropy": lambda x, t: F.cross_entropy(x.flatten(0, -2), t.flatten(), reduction="sum")},
        ),
        wrong(
            "run_cross_entropy",
            "no_max_shift",
            "exp of logits as large as 1e4 overflows: subtract each row's maximum before the exp (log-sum-exp)",
            in_case_dtype=True,
        ),
    ),
)


def cross_entropy(param: str, seed: int, shape: tuple[int, ...], scale: float = 1.0, **kw):
    def make(seed: int) -> dict[str, torch.Tensor]:
        targets = torch.randint(shape[-1], shape[:-1], generator=torch.Generator().manual_seed(seed))
        return {"inputs": randn(seed, *shape) * scale, "targets": targets, "grad_out": randn(seed + 1, 1)[0]}

    return CROSS_ENTROPY.case("test_cross_entropy", param, seed, make, **kw)


# ---------------------------------------------------------------- in place: gradient clipping

CLIPPING = Problem(
    "gradient_clipping",
    points=1,
    calls={"run_gradient_clipping(parameters, max_l2_norm)": torch.nn.utils.clip_grad_norm_},
    kind=InPlace("parameters"),
    tolerances=TOLERANCES,
    forbidden=["torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad.*", "torch.nn.utils.get_total_norm"],
    mistakes=(
        Mistake(
            "each_clipped_alone",
            "the norm is that of every gradient together (the square root of the sum of their squares), not each "
            "gradient's own: compute one norm, then scale every gradient by the same factor",
            {"run_gradient_clipping": lambda ps, m: [torch.nn.utils.clip_grad_norm_([p], m) for p in ps]},
        ),
        wrong("run_gradient_clipping", "always_scaled", "scale only when the norm is over max_l2_norm"),
        wrong("run_gradient_clipping", "parameters_scaled", "scale the gradients (p.grad), not the parameters"),
    ),
)


def clipping(param: str, seed: int, sizes: tuple[int, ...], max_l2_norm: float, frozen: int | None = None):
    def make(seed: int) -> dict[str, torch.Tensor]:
        inputs = {f"param{i}": randn(seed + i, n, 3) for i, n in enumerate(sizes)}
        return inputs | {f"param{i}.grad": randn(seed + 100 + i, n, 3) for i, n in enumerate(sizes) if i != frozen}

    return CLIPPING.case("test_gradient_clipping", param, seed, make, max_l2_norm=max_l2_norm)


# ---------------------------------------------------------------- a Python number: the learning-rate schedule

SCHEDULE = Problem(
    "lr_cosine_schedule",
    points=1,
    calls={
        "run_get_lr_cosine_schedule(it, max_learning_rate, min_learning_rate, warmup_iters, cosine_cycle_iters)": (
            f"{ANSWERS}:lr_cosine_schedule"
        )
    },
    kind=Number(over="it", says="the learning rate at iteration {value}"),
    tolerances=Tolerance(atol=1e-9, rtol=1e-6),
    mistakes=(
        wrong("run_get_lr_cosine_schedule", "warmup_from_one", "warmup starts at 0: it / warmup_iters * max"),
        wrong(
            "run_get_lr_cosine_schedule",
            "cosine_from_zero",
            "the cosine starts after warmup: its progress is (it - warmup_iters) / (cosine_cycle_iters - warmup_iters)",
        ),
        wrong("run_get_lr_cosine_schedule", "no_floor_after_cycle", "after the cycle the rate stays at the minimum"),
    ),
)


def schedule(param: str, iterations: int, **constants):
    make = lambda seed: {"it": torch.arange(iterations)}  # noqa: E731
    return SCHEDULE.case("test_lr_cosine_schedule", param, 0, make, **constants)


# ---------------------------------------------------------------- a class: AdamW

ADAMW = Problem(
    "adamw",
    points=2,
    calls={"get_adamw_cls()": lambda: torch.optim.AdamW},
    kind=Optimizer(steps=5),
    tolerances=TOLERANCES,
    forbidden=["torch.optim.AdamW", "torch.optim.Adam", "torch.optim.adam*", "torch.optim._functional*"],
    forbidden_ops=["aten._fused_adam*"],
    mistakes=(
        Mistake(
            "weight_decay_in_gradient",
            "weight decay was added to the gradient (Adam's L2 penalty); AdamW decays the parameters themselves, "
            "apart from the moments: p -= lr * weight_decay * p",
            {"get_adamw_cls": lambda: torch.optim.Adam},
        ),
        wrong("get_adamw_cls", "no_bias_correction", "correct the moments' bias: lr * sqrt(1 - b2^t) / (1 - b1^t)"),
        wrong("get_adamw_cls", "decay_without_lr", "the decay is scaled by the learning rate: p -= lr * wd * p"),
        wrong(
            "get_adamw_cls",
            "state_outside",
            "keep each parameter's moments and step in self.state[p], where state_dict() finds them (a checkpoint)",
        ),
    ),
)


def adamw(param: str, seed: int, sizes: tuple[int, ...], steps: int, loss=None, resume_after=None, **hyper):
    def make(seed: int) -> dict[str, torch.Tensor]:
        inputs = {f"param{i}": randn(seed + i, n, 4) for i, n in enumerate(sizes)}
        if loss is not None:
            return inputs | {"x": randn(seed + 50, 8, 4), "y": randn(seed + 51, 8, sizes[0])}
        steps_ = range(1, steps + 1)
        return inputs | {
            f"param{i}.grad/step{k}": randn(seed + 10 * k + i, n, 4) for k in steps_ for i, n in enumerate(sizes)
        }

    kind = Optimizer(steps, loss, resume_after)
    hyper = {"lr": 1e-3, "weight_decay": 0.01, "betas": (0.9, 0.999), "eps": 1e-8} | hyper
    return ADAMW.case("test_adamw", param, seed, make, kind=kind, **hyper)


def squared_error(parameters, args):
    """A least-squares fit: the loss whose gradients step the optimizer."""
    return ((args["x"] @ parameters[0].mT - args["y"]) ** 2).mean()


# ---------------------------------------------------------------- randomness with a seed: the batch sampler


def uniform(n: int) -> torch.Tensor:
    return torch.full((n,), 1 / n, dtype=torch.float64)


def windows(args, draw) -> float:
    """The share of rows of x that are windows of the dataset (np.arange: each token is its own position)."""
    x, context = draw["x"].cpu(), args["context_length"]
    return float((x == x[:, :1] + torch.arange(context)).all(-1).double().mean())


GET_BATCH = Problem(
    "get_batch",
    points=1,
    calls={"run_get_batch(dataset, batch_size, context_length, device)": f"{ANSWERS}:get_batch"},
    kind=Seeded(
        returns=("x", "y"),
        properties={
            "the share of rows of x that are windows of the dataset": windows,
            "the share of rows of y that are x moved on by one token": lambda args, d: float(
                (d["y"].cpu() == d["x"].cpu() + 1).all(-1).double().mean()
            ),
            "whether x and y are on the device asked for": lambda args, d: float(
                d["x"].device.type == d["y"].device.type == torch.device(args["device"]).type
            ),
        },
        counted=lambda args, draw: draw["x"][:, 0],  # each window's starting position
        distribution=lambda args: uniform(len(args["dataset"]) - args["context_length"]),
        value="the starting position {value}",
        draws=1000,
        numpy=("dataset",),
    ),
    mistakes=(
        wrong("run_get_batch", "last_start_never_drawn", "the last window starts at len(dataset) - context_length - 1"),
        wrong("run_get_batch", "first_start_never_drawn", "windows may start at position 0"),
        wrong("run_get_batch", "y_not_shifted", "y holds the next token of each position of x: the window moved by 1"),
    ),
)


def get_batch(param: str, length: int, batch_size: int, context_length: int):
    make = lambda seed: {"dataset": torch.arange(length)}  # noqa: E731
    return GET_BATCH.case("test_get_batch", param, 0, make, batch_size=batch_size, context_length=context_length)


CASES = [
    cross_entropy("cs336_shape", 1, (8, 5)),
    cross_entropy("large_logits", 2, (4, 6, 11), scale=1e3),
    cross_entropy("float64", 3, (3, 7), dtype=torch.float64),
    clipping("over_the_max", 10, (5, 5, 3, 2), max_l2_norm=1e-2, frozen=3),
    clipping("under_the_max", 11, (2, 4), max_l2_norm=100.0),
    schedule("cs336", 25, max_learning_rate=1.0, min_learning_rate=0.1, warmup_iters=7, cosine_cycle_iters=21),
    adamw("given_gradients", 20, (3, 2), steps=5),
    adamw("given_loss", 21, (3,), steps=4, loss=squared_error),
    adamw("resumed_from_state_dict", 22, (2,), steps=4, resume_after=2),
    get_batch("cs336", 100, 32, 7),
]
