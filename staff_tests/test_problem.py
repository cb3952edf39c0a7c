"""A problem declared in one place (cs_basics/harness/problem.py): what it derives, and the checks of every adapter."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from cs_basics.harness.cases import randn, run_call
from cs_basics.harness.compare import Tolerance
from cs_basics.harness.config import Assignment, ConfigError
from cs_basics.harness.oneline import thick_adapters
from cs_basics.harness.problem import AdapterCall, Problem

EXACT = {torch.float32: (Tolerance(0, 0), Tolerance(0, 0))}


def rotate(x, positions):  # a stand-in reference that takes integer positions
    return x * positions.to(x.dtype)


GATED = Problem(
    "gated",
    points=2,
    calls={"run_silu(x)": F.silu, "run_scaled(x, positions)": rotate},
    tolerances=EXACT,
    forbidden=["torch.nn.functional.silu"],
)


def test_an_adapter_call_is_read_as_the_adapter_line_reads():
    assert AdapterCall.parse("run_softmax(x, dim=dim)") == AdapterCall("run_softmax", ("x",), ("dim",))
    for wrong in ("run_softmax", "run_softmax(x + 1)", "run_softmax(x, dim=d)", "run_softmax(x,"):
        with pytest.raises(ValueError, match="adapter call"):
            AdapterCall.parse(wrong)


def test_the_oracle_is_float64_with_gradients_of_the_float_inputs_and_integers_stay_integers():
    positions = torch.arange(5)
    inputs = {"x": randn(0, 2, 5), "positions": positions, "grad_out": randn(1, 2, 5)}
    case = GATED.case("test_scaled", "grad", 0, lambda seed: inputs, adapter="run_scaled")
    expected = case.oracle(inputs)
    assert sorted(expected) == ["grad.x", "out"] and expected["out"].dtype == torch.float64
    assert torch.equal(expected["grad.x"], inputs["grad_out"].double() * positions.double())
    args = case.prepare(inputs, torch.device("cpu"))
    assert args["positions"].dtype == torch.int64 and args["x"].dtype == torch.float32 and args["x"].requires_grad
    seen = {}

    def run_scaled(x, positions):
        seen["dtype"] = positions.dtype
        return x * positions

    outputs = run_call(case, SimpleNamespace(run_scaled=run_scaled), inputs, torch.device("cpu"))
    assert seen["dtype"] == torch.int64 and "grad.x" in outputs


def test_every_adapter_of_a_problem_must_be_one_line():
    """SiLU written inside the second adapter fails as the grader (the course's adapters) would fail it."""

    def run_silu(x):
        return F.silu(x)  # one call: the adapter's shape (whose function it calls, the rule judges)

    def run_scaled(x, positions):
        y = x * positions
        return y

    adapters = SimpleNamespace(run_silu=run_silu, run_scaled=run_scaled)
    assert GATED.adapters == ("run_silu", "run_scaled")
    assert thick_adapters(adapters, ["run_silu"]) is None
    message = thick_adapters(adapters, GATED.adapters)
    assert "run_scaled holds more than the one line" in message and "Move it into cs_basics " in message
    # the student's package as the course names it (`cs-basics new` writes another): not this course's
    assert "Move it into cs_blocks " in thick_adapters(adapters, GATED.adapters, "cs_blocks")


def test_points_and_rule_come_from_the_declaration_or_the_table_but_not_both(tmp_path):
    case = GATED.case("test_silu", "plain", 0, lambda seed: {"x": randn(seed, 3)})
    course = Assignment(tmp_path, {"forbidden": ["torch.ops.*"], "problems": {}})
    object.__setattr__(course, "cases", [case])  # cached_property: the cases module, as if imported
    problem = course.problems["gated"]
    assert problem.points == 2 and problem.adapters == ("run_silu", "run_scaled") and problem.adapter == "run_silu"
    assert problem.forbidden == ("torch.ops.*", "torch.nn.functional.silu")
    twice = Assignment(tmp_path, {"problems": {"gated": {"points": 3}}})
    object.__setattr__(twice, "cases", [case])
    with pytest.raises(ConfigError, match="give points in one of them"):
        _ = twice.problems
    adapter_twice = Assignment(tmp_path, {"problems": {"gated": {"adapter": "run_other"}}})
    object.__setattr__(adapter_twice, "cases", [case])
    with pytest.raises(ConfigError, match="give adapter in one of them"):  # dropped without a word before
        _ = adapter_twice.problems


ADAPTERS = '''
def get_adamw_cls():
    """Your AdamW."""
    return AdamW

def get_sgd_cls():
    return optimizer.SGD

def run_gradient_clipping(parameters, max_l2_norm):
    nn_utils.gradient_clipping(parameters, max_l2_norm)

def run_get_lr_cosine_schedule(it, max_learning_rate):
    return optimizer.schedule(
        it=it,
        max_learning_rate=max_learning_rate,
    )

def run_imported(x):
    from cs_basics import functional
    return functional.softmax(x, -1)

def run_thick(x):
    y = x.exp()
    return y / y.sum()

def run_arithmetic(x):
    return x + 1

def run_two_calls(parameters, max_l2_norm):
    nn_utils.gradient_clipping(parameters, max_l2_norm)
    nn_utils.gradient_clipping(parameters, max_l2_norm)
'''


def test_adapters_as_cs336_writes_them_pass_the_one_line_check(tmp_path):
    """`return AdamW` (an adapter that returns a class), a call that returns nothing (in-place clipping), a keyword
    call over several lines, an import before the call: each one line for the student's code. Code beside it is not."""
    import importlib.util

    (tmp_path / "cs336_adapters.py").write_text(ADAPTERS)
    spec = importlib.util.spec_from_file_location("cs336_adapters", tmp_path / "cs336_adapters.py")
    adapters = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(adapters)
    one_line = ["get_adamw_cls", "get_sgd_cls", "run_gradient_clipping", "run_get_lr_cosine_schedule", "run_imported"]
    assert thick_adapters(adapters, one_line) is None
    for thick in ("run_thick", "run_arithmetic", "run_two_calls"):
        assert f"{thick} holds more than the one line" in thick_adapters(adapters, [thick]), thick


def test_a_time_limit_comes_from_the_problem_or_the_course_and_a_bad_one_is_named(tmp_path):
    case = GATED.case("test_silu", "plain", 0, lambda seed: {"x": randn(seed, 3)})
    other = Problem("other", points=1, calls={"run_other(x)": torch.exp}, tolerances=EXACT, case_seconds=45)
    other_case = other.case("test_other", "plain", 0, lambda seed: {"x": randn(seed, 3)})

    def course(table):
        made = Assignment(tmp_path, table)
        object.__setattr__(made, "cases", [case, other_case])
        return made

    assert course({}).case_seconds(case) is None and course({}).case_seconds(other_case) == 45
    assert course({"case_seconds": 30}).case_seconds(case) == 30  # the course's, where the problem has none
    assert course({"case_seconds": 30}).case_seconds(other_case) == 45  # the problem's own wins
    table = {"problems": {"gated": {"case_seconds": 5}}}
    assert course(table).case_seconds(case) == 5
    with pytest.raises(ConfigError, match="give case_seconds in one of them"):
        _ = course({"problems": {"other": {"case_seconds": 5}}}).problems
    with pytest.raises(ConfigError, match=r"\[tool.cs-basics\] case_seconds = 'long': give a time limit in seconds"):
        _ = course({"case_seconds": "long"}).problems
