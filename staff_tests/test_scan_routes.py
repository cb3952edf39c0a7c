"""The scan's half of issue 36: an allowance holds only what it can prove, a module allowed by name does not let
what is reachable through it pass, code that cannot run costs nothing, valid Python never stops the grader, and a
library hold says what it is.

Each route is written as a student would hand it in; the scan's verdict is read through FromScratch (one
definition for the grader and for pytest), and the routes that matter end to end are graded and run as pytest.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cs_basics.harness.rule import scan as scan_module
from cs_basics.harness.rule.fromscratch import HELD, FromScratch, hold_message, library_hold
from cs_basics.harness.rule.sightings import Computed

from .submissions import run, scores
from .test_from_scratch import ATTENTION, INLINE_WEIGHTS, SOFTMAX, attention_with, source, student
from .test_rule_layers import RUN_TIME_NAME, as_submission, held_in, pytest_messages

STUDENTS = Path(__file__).parent / "students"
FULL = {SOFTMAX: 1.0, ATTENTION: 5.0}


def softmax_with(*lines: str) -> str:
    """A from-scratch softmax that runs `lines` first (each one line of its body)."""
    body = "".join(f"    {line}\n" for line in lines)
    return (
        "def softmax(x, dim, name='softmax'):\n"
        f"{body}"
        "    e = torch.exp(x - x.amax(dim, keepdim=True))\n"
        "    return e / e.sum(dim, keepdim=True)\n"
    )


# ---------------------------------------------------------------- allowances hold only what they can prove

BOX = """
class Box:
    def put(self, name, value):
        setattr(self, name, value)

    @property
    def peek(self):
        return getattr(self, "na" + "me")


class Sub(Box):
    pass


class Options:
    def __init__(self, **kwargs):
        for key, value in kwargs.items():
            setattr(self, key, value)
"""
# each hands a module (F) to a method whose first parameter the old rule took for the student's own object
UNBOUND = {
    "called_on_the_class": ["Box.put(F, name, None)"],
    "constant_getattr_of_the_class": ["getattr(Box, 'put')(F, name, None)"],
    "passed_to_map": ["list(map(Box.put, [F], [name], [None]))"],
    "on_a_subclass": ["Sub.put(F, name, None)"],
    "on_the_type_of_an_instance": ["type(Box()).put(F, name, None)"],
    "an_init_called_unbound": ["Options.__init__(F, softmax=None)"],
    "a_property_getter": ["Box.peek.fget(F)"],
}


@pytest.mark.parametrize("route", UNBOUND)
def test_a_method_the_code_calls_unbound_has_no_own_self(tmp_path, assignment, route):
    functional = BOX + softmax_with(*UNBOUND[route])
    found = held_in(tmp_path, assignment, functional)
    assert any(what.endswith("with a name built at run time on self") for what in found[SOFTMAX]), found


def test_the_same_methods_called_on_instances_the_code_made_hold_nothing(tmp_path, assignment):
    functional = (
        BOX
        + "_DEFAULTS = Options(dim=-1)\n\n\n"
        + softmax_with(
            "box = Box()",
            "box.put(name, None)",
            "box.peek",
            "Options(dim=dim)",
            "_DEFAULTS.__dict__",
        )
    )
    assert held_in(tmp_path, assignment, functional) == {SOFTMAX: [], ATTENTION: []}


BINDINGS = {  # a name bound to a new instance, and then (or before) to something else
    "rebound_by_a_walrus_in_a_comprehension": (["made = Options()", "[made := F for _ in range(1)]"], "made"),
    "rebound_by_a_match_capture": (["made = Options()", "match F:", "    case made:", "        pass"], "made"),
    "rebound_from_an_inner_function": (
        ["made = Options()", "def inner():", "    nonlocal made", "    made = F", "inner()"],
        "made",
    ),
    "a_class_that_makes_something_else": (["made = Maker()"], "made"),
    "a_class_rebound_at_import": (["made = Rebound()"], "made"),
    "a_class_shadowed_by_a_local": (["Options = lambda: F", "made = Options()"], "made"),
    "a_metaclass": (["made = Meta('X', (Box,), {})"], "made"),
    "a_parameter": (["pass"], "made"),
}
MAKERS = """
class Maker:
    def __new__(cls):
        return F


class Rebound:
    pass


def _rebind():
    global Rebound
    Rebound = lambda: F


class Meta(type):
    pass
"""


@pytest.mark.parametrize("route", BINDINGS)
def test_a_name_that_may_hold_something_else_is_not_the_students_own(tmp_path, assignment, route):
    lines, name = BINDINGS[route]
    functional = BOX + MAKERS + softmax_with(*lines, f"setattr({name}, name, None)")
    if route == "a_parameter":
        functional = functional.replace("name='softmax'):", "name='softmax', made=F):")
    found = held_in(tmp_path, assignment, functional)[SOFTMAX]
    assert f"setattr with a name built at run time on {name}" in found, found


def test_an_unbound_method_that_empties_the_record_is_held_in_the_grader_and_in_pytest(assignment, tmp_path):
    """The attack the issue found, whole: a one-line method called unbound on a module replaces its softmax."""
    functional = source(
        BOX,
        softmax_with("Box.put(F, 'soft' + 'max', lambda s, d: s)"),
        attention_with("F.softmax(scores, -1)"),
    )
    folder = student(tmp_path, functional)
    result = run(assignment, folder)
    held = {t.case.problem for t in result.tests if HELD in t.output}
    assert scores(result)[SOFTMAX] == 0 and SOFTMAX in held, [t.output for t in result.tests]
    assert HELD in pytest_messages(assignment, folder)[SOFTMAX]


# ---------------------------------------------------------------- a module allowed by name passes nothing through it

THROUGH = {
    "an_allowed_modules_attribute": ("multiprocessing.dummy.sys.modules['torch']", "multiprocessing.dummy.sys.modules"),
    "a_subscript": ("{'m': multiprocessing.dummy}['m'].sys.modules", ".sys"),
    "a_call": ("(lambda: torch)().sys", ".sys"),
    "an_attribute_of_the_students_object": ("Holder().t.sys", ".sys"),
    "a_constant_getattr": ("getattr(Holder().t, 'sys')", ".sys (by getattr)"),
    "getattr_as_a_value": ("list(map(getattr, [torch], [name]))", "getattr as a value"),
    "vars_as_a_value": ("(vars,)[0](F)", "vars as a value"),
}


@pytest.mark.parametrize("route", THROUGH)
def test_a_held_module_reached_through_anything_is_held(tmp_path, assignment, route):
    code, what = THROUGH[route]
    functional = "import multiprocessing.dummy\n\n\nclass Holder:\n    t = torch\n\n\n" + softmax_with(f"_ = {code}")
    assert what in held_in(tmp_path, assignment, functional)[SOFTMAX]


def test_what_an_allowed_module_offers_itself_is_still_allowed(tmp_path, assignment):
    functional = "import multiprocessing.dummy\nimport sys\n\n\n" + softmax_with(
        "multiprocessing.dummy.Pool(1).map(abs, [1])", "sys.path.append('.')", "sys.stdout.write('')"
    )
    assert held_in(tmp_path, assignment, functional) == {SOFTMAX: [], ATTENTION: []}


# ---------------------------------------------------------------- decided by what can run

DEAD = {
    "after_return": ["return x", "torch.softmax(x, dim)"],
    "after_raise": ["if x.numel() == 0:", "    raise ValueError('empty')", "    torch.softmax(x, dim)"],
    "after_continue": ["for _ in range(1):", "    continue", "    torch.softmax(x, dim)"],
    "after_break": ["while True:", "    break", "    torch.softmax(x, dim)"],
    "after_an_if_whose_branches_both_end": ["if dim:", "    return x", "else:", "    raise ValueError", "F.softmax(x)"],
    "if_false": ["if False:", "    torch.softmax(x, dim)"],
    "if_0": ["if 0:", "    torch.softmax(x, dim)"],
    "while_false": ["while False:", "    torch.softmax(x, dim)"],
    "if_type_checking": ["if TYPE_CHECKING:", "    torch.softmax(x, dim)"],
    "if_typing_type_checking": ["if typing.TYPE_CHECKING:", "    torch.softmax(x, dim)"],
    "else_of_if_true": ["if True:", "    pass", "else:", "    torch.softmax(x, dim)"],
}
LIVE = {  # code that looks dead to a careless reader, and can run
    "after_a_conditional_return": ["if x.numel() == 0:", "    return x", "torch.softmax(x, dim)"],
    "in_a_finally_after_return": ["try:", "    return x", "finally:", "    torch.softmax(x, dim)"],
    "else_of_while_false": ["while False:", "    pass", "else:", "    torch.softmax(x, dim)"],
    "else_of_if_false": ["if False:", "    pass", "else:", "    torch.softmax(x, dim)"],
    "a_type_checking_of_its_own": ["TYPE_CHECKING = x.numel() > 0", "if TYPE_CHECKING:", "    torch.softmax(x, dim)"],
    "after_a_loop_that_breaks": ["for _ in range(1):", "    break", "torch.softmax(x, dim)"],
}
TYPING = "import typing\nfrom typing import TYPE_CHECKING\n\n\n"


def static_uses(tmp_path, assignment, functional: str, **modules: str) -> dict[str, list[str]]:
    folder = student(tmp_path, source(functional), **modules)
    return {p: [u.name for u in uses] for p, uses in FromScratch(assignment, folder).static.items()}


@pytest.mark.parametrize("route", DEAD)
def test_a_name_in_code_that_cannot_run_costs_nothing(tmp_path, assignment, route):
    functional = TYPING + softmax_with(*DEAD[route])
    assert static_uses(tmp_path, assignment, functional) == {SOFTMAX: [], ATTENTION: []}


@pytest.mark.parametrize("route", LIVE)
def test_a_name_in_code_that_can_run_still_counts(tmp_path, assignment, route):
    functional = TYPING + softmax_with(*LIVE[route])
    assert static_uses(tmp_path, assignment, functional)[SOFTMAX] == ["torch.softmax"]


def test_type_checking_set_anywhere_in_the_code_makes_its_blocks_count(tmp_path, assignment):
    functional = TYPING + "from . import patch  # noqa: F401\n\n\n" + softmax_with(*DEAD["if_type_checking"])
    patch = "import typing\n\ntyping.TYPE_CHECKING = True\n"
    assert static_uses(tmp_path, assignment, functional, patch=patch)[SOFTMAX] == ["torch.softmax"]


# ---------------------------------------------------------------- the students the issue names, graded and in pytest


@pytest.mark.parametrize("name", ["honest_dead_return", "honest_checkpoint"])
def test_a_dead_return_and_checkpointing_get_full_marks_in_the_grader_and_in_pytest(assignment, tmp_path, name):
    folder = as_submission(tmp_path, STUDENTS / name)
    result = run(assignment, folder)
    assert scores(result) == pytest.approx(FULL), [t.output for t in result.tests if not t.passed]
    assert pytest_messages(assignment, folder) == {}


# ---------------------------------------------------------------- valid Python never stops the grader

CONTROL_IN_AN_F_STRING = "getattr(f\"{'\x01'}\", name)"  # ast.unparse cannot write it back


def test_an_expression_the_scan_cannot_print_is_still_judged(tmp_path, assignment):
    found = held_in(tmp_path, assignment, softmax_with(f"_ = {CONTROL_IN_AN_F_STRING}"))
    assert f"{RUN_TIME_NAME} on an expression (JoinedStr)" in found[SOFTMAX] and not found[ATTENTION]


def test_valid_python_the_scan_cannot_describe_holds_the_problem_and_grading_goes_on(assignment, tmp_path):
    functional = source(softmax_with(f"_ = {CONTROL_IN_AN_F_STRING}"), attention_with(INLINE_WEIGHTS))
    result = run(assignment, student(tmp_path, functional))
    assert scores(result) == pytest.approx({SOFTMAX: 0.0, ATTENTION: 5.0})
    assert all(HELD in t.output for t in result.tests if t.case.problem == SOFTMAX)


def test_a_scan_that_fails_on_a_problem_holds_it_for_a_reading(tmp_path, assignment, monkeypatch):
    """A bug of the scan's (here: planted) is no verdict on the student: the problem is held, naming it, never a
    stop of the whole grading."""

    def broken(*args):
        raise KeyError("planted")

    monkeypatch.setattr(scan_module, "constructs", broken)
    folder = student(tmp_path, source(softmax_with(), attention_with(INLINE_WEIGHTS)))
    found = scan_module.scan(FromScratch(assignment, folder)._job())
    for problem in (SOFTMAX, ATTENTION):
        uses, held = found[problem]
        assert not uses and len(held) == 1 and str(held[0]).startswith("code this scan could not read (KeyError")
    assert HELD in hold_message(SOFTMAX, found[SOFTMAX][1])  # the message the grader and pytest give


# ---------------------------------------------------------------- holds say the right thing


def test_a_library_hold_names_the_function_the_line_and_how_staff_list_it():
    message = library_hold(SOFTMAX, "softmax-grad", [Computed("torch.distributions.Categorical.__init__", "f.py:7")])
    assert "library arithmetic the course has not listed" in message
    assert "computed by torch.distributions.Categorical.__init__, called from f.py:7" in message
    assert "library_glue" in message and "[tool.cs-basics]" in message
    assert "interpreter" not in message
