"""Problems that are no function of tensors (cs_basics/harness/kinds.py): each kind passes the right answer, fails
a wrong one in the problem's own words, names its known mistake, and says the same after its answers crossed the
grader's process boundary (safetensors and back)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from cs_basics.harness.cases import CheckContext, randn, run_call, run_check
from cs_basics.harness.compare import Tolerance
from cs_basics.harness.diagnosis import Mistake
from cs_basics.harness.grading.job.child import copied_outputs, save_outputs
from cs_basics.harness.grading.pipeline.runs import read_outputs
from cs_basics.harness.kinds import InPlace, Number, Optimizer, Seeded
from cs_basics.harness.problem import Problem
from cs_basics.harness.rule.outputs import plain_outputs

CPU = torch.device("cpu")
TOLERANCES = {torch.float32: (Tolerance(1e-6, 1e-5), Tolerance(1e-6, 1e-4))}


def verdict(case, adapters, through_the_grader: Path | None = None) -> str:
    """The check's message ("" when the case passes): here, or after the outputs went through the grader's files."""
    inputs = {k: v.clone() for k, v in case.make_inputs(case.seed).items()}
    expected = case.oracle({k: v.clone() for k, v in inputs.items()})
    outputs = run_call(case, adapters, inputs, CPU)
    if through_the_grader is not None:
        save_outputs(copied_outputs(outputs, plain_outputs), through_the_grader)
        outputs, error = read_outputs(through_the_grader)
        assert error is None, error
    try:
        run_check(case, inputs, expected, outputs, CPU)
    except AssertionError as err:
        return str(err)
    return ""


# ---------------------------------------------------------------- a Python number


def schedule(it, max_lr, warmup):
    return it / warmup * max_lr if it < warmup else max_lr * 0.5 * (1 + math.cos(math.pi * min(it / 20, 1)))


WARMUP_FROM_ONE = Mistake("warmup_from_one", "warmup starts at 0", {"run_lr": lambda it, m, w: schedule(it + 1, m, w)})
SCHEDULE = Problem(
    "schedule",
    points=1,
    calls={"run_lr(it, max_lr, warmup)": schedule},
    kind=Number(over="it", says="the learning rate at iteration {value}"),
    tolerances=Tolerance(1e-9, 1e-6),
    mistakes=(WARMUP_FROM_ONE,),
)
SCHEDULE_CASE = SCHEDULE.case("test_lr", "sweep", 0, lambda seed: {"it": torch.arange(12)}, max_lr=1.0, warmup=5)


def test_a_number_is_compared_at_each_value_and_a_failure_names_the_iteration(tmp_path):
    assert verdict(SCHEDULE_CASE, SimpleNamespace(run_lr=schedule)) == ""
    assert verdict(SCHEDULE_CASE, SimpleNamespace(run_lr=lambda *a: torch.tensor(schedule(*a)))) == ""  # a 0-d tensor
    off = SimpleNamespace(run_lr=lambda it, m, w: schedule(it, m, w) * (1.01 if it == 7 else 1.0))
    for where in (None, tmp_path / "out.safetensors"):
        message = verdict(SCHEDULE_CASE, off, where)
        said = "lr-sweep: the learning rate at iteration 7: expected 0.72699525, got 0.7342652"
        assert message.startswith(said), message
    named = verdict(SCHEDULE_CASE, SimpleNamespace(run_lr=lambda it, m, w: schedule(it + 1, m, w)))
    assert (
        "the learning rate at iteration 0: expected 0, got 0.2" in named and "(known mistake: warmup_from_one)" in named
    )
    message = verdict(SCHEDULE_CASE, SimpleNamespace(run_lr=lambda *a: None), tmp_path / "none.safetensors")
    assert "the learning rate at iteration 0: expected a number (a Python float), got NoneType" in message


# ---------------------------------------------------------------- in place: the gradients of parameters


def clip(parameters, max_norm):
    torch.nn.utils.clip_grad_norm_(parameters, max_norm)


CLIPPING = Problem(
    "clipping",
    points=1,
    calls={"run_clip(parameters, max_norm)": clip},
    kind=InPlace("parameters"),
    tolerances=TOLERANCES,
    mistakes=(Mistake("each_alone", "one norm for all", {"run_clip": lambda ps, m: [clip([p], m) for p in ps]}),),
)


def clip_inputs(seed):
    values = {f"param{i}": randn(seed + i, 3, 2) for i in range(3)}
    return values | {f"param{i}.grad": randn(seed + 10 + i, 3, 2) for i in (0, 1)}  # param2 is frozen


CLIP_CASE = CLIPPING.case("test_clip", "frozen", 1, clip_inputs, max_norm=0.5)


def test_in_place_gradients_are_compared_and_untouched_inputs_must_stay_untouched(tmp_path):
    assert verdict(CLIP_CASE, SimpleNamespace(run_clip=clip)) == ""

    def returned_not_changed(parameters, max_norm):
        return [p.grad * 0.1 for p in parameters if p.grad is not None]

    for where in (None, tmp_path / "out.safetensors"):
        message = verdict(CLIP_CASE, SimpleNamespace(run_clip=returned_not_changed), where)
        assert message.startswith("clip-frozen: the gradient of parameter 0: 6 of 6 elements differ"), message

    def frozen_given_one(parameters, max_norm):
        clip(parameters, max_norm)
        parameters[2].grad = torch.zeros_like(parameters[2])

    message = verdict(CLIP_CASE, SimpleNamespace(run_clip=frozen_given_one))
    assert message.startswith("clip-frozen: parameter 2 is frozen (requires_grad=False) and has no gradient"), message

    def values_scaled(parameters, max_norm):
        clip(parameters, max_norm)
        with torch.no_grad():
            parameters[1].mul_(0.5)

    assert verdict(CLIP_CASE, SimpleNamespace(run_clip=values_scaled)).startswith(
        "clip-frozen: parameter 1's values changed; only the gradients (.grad) may change"
    )
    each = verdict(CLIP_CASE, SimpleNamespace(run_clip=lambda ps, m: [clip([p], m) for p in ps]))
    assert "(known mistake: each_alone)" in each


# ---------------------------------------------------------------- a class: an optimizer


class AdamW(torch.optim.Optimizer):
    """AdamW as a student writes it (the decay after the update, as CS336's handout has it); `wrong` breaks it."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, wrong=""):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.wrong, self.own = wrong, {}

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, (b1, b2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                state = self.own.setdefault(p, {}) if self.wrong == "state_outside" else self.state[p]
                if not state:
                    state.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                state["t"] += 1
                state["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                state["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                t = state["t"]
                size = lr if self.wrong == "no_bias_correction" else lr * math.sqrt(1 - b2**t) / (1 - b1**t)
                p.addcdiv_(state["m"], state["v"].sqrt().add_(eps), value=-size)
                p.mul_(1 - lr * decay)


def adamw(wrong=""):
    return lambda: lambda params, **hyper: AdamW(params, **hyper, wrong=wrong)


ADAMW = Problem(
    "adamw",
    points=1,
    calls={"get_adamw_cls()": lambda: torch.optim.AdamW},
    kind=Optimizer(steps=4),
    tolerances=TOLERANCES,
    mistakes=(Mistake("no_bias_correction", "correct the bias", {"get_adamw_cls": adamw("no_bias_correction")}),),
)


def optimizer_inputs(seed):
    inputs = {"param0": randn(seed, 3, 4), "param1": randn(seed + 1, 5)}
    grads = {
        f"param{i}.grad/step{k}": randn(seed + 10 * k + i, *inputs[f"param{i}"].shape)
        for k in range(1, 5)
        for i in (0, 1)
    }
    return inputs | grads


HYPER = {"lr": 1e-3, "weight_decay": 0.01, "betas": (0.9, 0.999), "eps": 1e-8}


def test_an_optimizer_class_is_built_stepped_and_compared_after_each_step(tmp_path):
    case = ADAMW.case("test_adamw", "steps", 3, optimizer_inputs, **HYPER)
    assert verdict(case, SimpleNamespace(get_adamw_cls=lambda: AdamW)) == ""
    assert verdict(case, SimpleNamespace(get_adamw_cls=lambda: torch.optim.AdamW)) == ""
    for where in (None, tmp_path / "out.safetensors"):
        message = verdict(case, SimpleNamespace(get_adamw_cls=adamw("no_bias_correction")), where)
        assert message.startswith("adamw-steps: parameter 0 after step 1: 12 of 12 elements differ"), message
        assert "(known mistake: no_bias_correction)" in message
    plain_adam = verdict(case, SimpleNamespace(get_adamw_cls=lambda: torch.optim.Adam))  # no decoupled decay
    assert plain_adam.startswith("adamw-steps: parameter 0 after step 2"), plain_adam  # the first step that shows


def test_an_optimizers_state_must_carry_on_through_its_state_dict():
    case = ADAMW.case("test_adamw", "resumed", 3, optimizer_inputs, kind=Optimizer(steps=4, resume_after=2), **HYPER)
    assert verdict(case, SimpleNamespace(get_adamw_cls=lambda: AdamW)) == ""
    message = verdict(case, SimpleNamespace(get_adamw_cls=adamw("state_outside")))
    assert message.startswith(
        "adamw-resumed: parameter 0 after step 3 (the optimizer rebuilt from its state_dict() after step 2)"
    ), message


def test_an_optimizer_may_be_stepped_by_a_loss_and_a_mistake_that_needs_autograd_is_named():
    loss = Optimizer(steps=3, loss=lambda ps, args: ((args["x"] @ ps[0].mT - args["y"]) ** 2).mean())
    make = lambda seed: {"param0": randn(seed, 2, 4), "x": randn(seed + 1, 6, 4), "y": randn(seed + 2, 6, 2)}  # noqa: E731
    case = ADAMW.case("test_adamw", "loss", 5, make, kind=loss, **HYPER)
    assert verdict(case, SimpleNamespace(get_adamw_cls=lambda: AdamW)) == ""
    message = verdict(case, SimpleNamespace(get_adamw_cls=adamw("no_bias_correction")))
    assert "parameter 0 after step 1" in message and "(known mistake: no_bias_correction)" in message


# ---------------------------------------------------------------- randomness with a seed


def get_batch(dataset, batch_size, context_length, device, low=0, high=0, shift=1):
    starts = np.random.randint(low, len(dataset) - context_length - high, size=batch_size)
    x = np.stack([dataset[s : s + context_length] for s in starts])
    y = np.stack([dataset[s + shift : s + shift + context_length] for s in starts])
    return torch.as_tensor(x, device=device), torch.as_tensor(y, device=device)


SAMPLER = Seeded(
    returns=("x", "y"),
    properties={
        "the share of rows of y that are x moved on by one": lambda a, d: float(
            (d["y"] == d["x"] + 1).all(-1).double().mean()
        )
    },
    counted=lambda args, draw: draw["x"][:, 0],
    distribution=lambda args: torch.full(
        (len(args["dataset"]) - args["context_length"],), 1 / (len(args["dataset"]) - args["context_length"])
    ),
    value="the starting position {value}",
    draws=400,
    numpy=("dataset",),
)
BATCH = Problem(
    "get_batch",
    points=1,
    calls={"run_get_batch(dataset, batch_size, context_length, device)": get_batch},
    kind=SAMPLER,
    mistakes=(Mistake("last_never", "the last start", {"run_get_batch": lambda *a: get_batch(*a, high=1)}),),
)
BATCH_CASE = BATCH.case(
    "test_get_batch", "arange", 0, lambda seed: {"dataset": torch.arange(40)}, batch_size=8, context_length=5
)


def test_a_seeded_draw_repeats_with_its_seed_holds_its_properties_and_follows_its_distribution(tmp_path):
    assert verdict(BATCH_CASE, SimpleNamespace(run_get_batch=get_batch)) == ""

    def torch_sampler(dataset, batch_size, context_length, device):  # another generator: the same distribution
        starts = torch.randint(len(dataset) - context_length, (batch_size,))
        windows = torch.stack([torch.as_tensor(dataset[s : s + context_length + 1]) for s in starts])
        return windows[:, :-1].to(device), windows[:, 1:].to(device)

    assert verdict(BATCH_CASE, SimpleNamespace(run_get_batch=torch_sampler)) == ""
    never = SimpleNamespace(run_get_batch=lambda *a: get_batch(*a, high=1))
    for where in (None, tmp_path / "out.safetensors"):
        message = verdict(BATCH_CASE, never, where)
        assert message.startswith("get_batch-arange: the starting position 34 was drawn 0 times in 3200 samples"), (
            message
        )
        assert "(known mistake: last_never)" in message
    unshifted = verdict(BATCH_CASE, SimpleNamespace(run_get_batch=lambda *a: get_batch(*a, shift=0)))
    assert unshifted.startswith(
        "get_batch-arange: the share of rows of y that are x moved on by one: expected 1, got 0"
    )
    own = np.random.default_rng(7)

    def own_generator(dataset, batch_size, context_length, device):
        starts = own.integers(0, len(dataset) - context_length, size=batch_size)
        return (
            get_batch(dataset, batch_size, context_length, device)
            if False
            else (
                torch.as_tensor(np.stack([dataset[s : s + context_length] for s in starts])),
                torch.as_tensor(np.stack([dataset[s + 1 : s + 1 + context_length] for s in starts])),
            )
        )

    message = verdict(BATCH_CASE, SimpleNamespace(run_get_batch=own_generator))
    assert message.startswith("get_batch-arange: the draw after the same seed again (it must be the same draw)"), (
        message
    )
    state = torch.get_rng_state()
    verdict(BATCH_CASE, SimpleNamespace(run_get_batch=get_batch))
    assert torch.equal(torch.get_rng_state(), state)  # the global generators are put back as they were
    draws = []
    for seed in (1, 2):  # whatever the generators held before (pytest's process, the grader's child): the same answers
        torch.manual_seed(seed)
        np.random.seed(seed)
        outputs = run_call(BATCH_CASE, SimpleNamespace(run_get_batch=get_batch), BATCH_CASE.make_inputs(0), CPU)
        draws.append(outputs["counts"])
    assert torch.equal(*draws)
    odd = verdict(BATCH_CASE, SimpleNamespace(run_get_batch=lambda *a: (get_batch(*a)[0], get_batch(*a)[1][:, :2])))
    assert odd.startswith("get_batch-arange: the share of rows of y that are x moved on by one: expected 1, got 0"), odd


def test_every_kind_answers_in_named_tensors_the_check_reads_by_name():
    """What crosses the process boundary: tensors only, each by a name the kind turns into words."""
    for case, adapters in [
        (SCHEDULE_CASE, SimpleNamespace(run_lr=schedule)),
        (CLIP_CASE, SimpleNamespace(run_clip=clip)),
        (ADAMW.case("test_adamw", "steps", 3, optimizer_inputs, **HYPER), SimpleNamespace(get_adamw_cls=lambda: AdamW)),
        (BATCH_CASE, SimpleNamespace(run_get_batch=get_batch)),
    ]:
        inputs = case.make_inputs(case.seed)
        outputs = run_call(case, adapters, inputs, CPU)
        expected = case.oracle(inputs)
        assert all(isinstance(v, torch.Tensor) for v in outputs.values()), case.id
        assert set(expected) <= set(outputs), (case.id, set(expected) - set(outputs))
        ctx = CheckContext(case, inputs, expected, {}, outputs, CPU)
        assert all(case.words(name) != name or case.kind is SAMPLER for name in expected if "/" in name or "=" in name)
        assert ctx.tolerance(next(iter(expected)))  # every answer has a tolerance


def test_a_problem_without_tolerances_is_refused_unless_its_kind_brings_them():
    with pytest.raises(ValueError, match="declare its tolerances"):
        Problem("p", points=1, calls={"run_p(x)": torch.exp}, kind=Number())
