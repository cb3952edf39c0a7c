"""Failure messages name the known mistake a student made, in pytest and in results.json, and nothing else."""

import json
import math
import re
import shutil

import pytest
import torch

from cs_basics.harness import diagnosis
from cs_basics.harness.cases import CheckContext, run_call, run_case
from cs_basics.harness.diagnosis import CRASHES, Mistake, explain_crash, matching, wrong_outputs
from cs_basics.harness.grading.writers import results
from cs_basics.nn import functional
from tests.mistakes import CRASHES as ASSIGNMENT_CRASHES
from tests.mistakes import MISTAKES, guarded, scores

from .implementations import BROKEN, CORRECT, CRASH_LOOKALIKES, DIAGNOSES, LOOKALIKES, fingerprint, impl
from .submissions import ROOT, run, submission

KNOWN = re.compile(r"\(known mistake: (\w+)\)")


def named(err: BaseException) -> list[str]:
    """The known mistakes a failure names, in its message or its notes (where a crash's sentence goes)."""
    return KNOWN.findall("\n".join([str(err), *getattr(err, "__notes__", [])]))


def failure(name, assignment, device) -> BaseException:
    impl, case_id = BROKEN[name]
    case = next(c for c in assignment.cases if c.id == case_id)
    with pytest.raises(Exception) as info:  # a broken implementation may fail by raising anything
        run_case(case, impl, assignment.store_for(case), device)
    return info.value


def test_every_known_mistake_has_a_student_version():
    crashes = {c.name for c in (*CRASHES, *ASSIGNMENT_CRASHES)}
    library = {m.name for mistakes in MISTAKES.values() for m in mistakes} | crashes
    assert library == set(DIAGNOSES.values())


@pytest.mark.parametrize("name", DIAGNOSES)
def test_a_known_mistake_is_named_in_its_failure(name, assignment, device):
    err = failure(name, assignment, device)
    assert named(err) == [DIAGNOSES[name]], f"{name}: {err}"
    assert "This looks like: " in "\n".join([str(err), *getattr(err, "__notes__", [])])


@pytest.mark.parametrize("name", sorted(set(BROKEN) - set(DIAGNOSES)))
def test_a_mistake_outside_the_library_gets_no_name(name, assignment, device):
    """Among them two known mistakes at once (no scale and a flipped mask), which neither explains alone."""
    assert named(failure(name, assignment, device)) == []


def test_mistakes_that_give_the_same_numbers_are_named_together(assignment, device):
    """With V = I of 7 keys, d_v = 7 = keys: dividing by sqrt(d_v) or by sqrt(keys) is the same mistake here."""
    case = next(c for c in assignment.cases if c.id == "scaled_dot_product_attention_mask-weights")
    with pytest.raises(AssertionError) as info:
        run_case(case, BROKEN["scale_by_d_v"][0], assignment.store_for(case), device)
    assert "2 known mistakes give these same numbers here" in str(info.value)
    assert sorted(named(info.value)) == ["scale_by_d_v", "scale_by_sequence_length"]


def context(case, impl, assignment, device) -> CheckContext:
    inputs, stored = assignment.store_for(case).load(case.id)
    outputs = run_call(case, impl, inputs, device)
    expected, mistakes = diagnosis.split_stored(stored)  # as run_check reads a fixture
    return CheckContext(case, inputs, expected, case.prepare(inputs, device), outputs, device, mistakes)


@pytest.mark.parametrize("name", ["reference", "matmul_max_shift"])
def test_no_known_mistake_matches_a_correct_answer(name, assignment, device):
    for case in assignment.cases:
        ctx = context(case, CORRECT[name], assignment, device)
        assert matching(ctx, "out") == [], case.id


def attention_without_a_mistake(Q, K, V, mask=None):
    return guarded(torch.softmax(scores(Q, K, mask), -1), mask) @ V


def test_the_mistakes_building_blocks_without_a_mistake_reproduce_every_case(assignment, device):
    """The weight-level mistakes are these blocks with one thing wrong: unchanged, they give the expected values."""
    none = Mistake(
        "none", "", {"run_softmax": torch.softmax, "run_scaled_dot_product_attention": attention_without_a_mistake}
    )
    for case in assignment.cases:
        ctx = context(case, CORRECT["reference"], assignment, device)
        wrong = wrong_outputs(ctx, none, grad=True)
        for key, expected in ctx.expected.items():
            assert diagnosis.agrees(expected, wrong[key], ctx.tolerance(key)), f"{case.id}: {key}"


def test_diagnosis_can_be_switched_off(assignment, device, monkeypatch):
    monkeypatch.setenv(diagnosis.SWITCH, "off")
    assert named(failure("no_scale", assignment, device)) == []
    assert named(failure("mask_none_crash", assignment, device)) == []


def test_the_grader_adds_a_known_crash_after_the_first_line():
    error = "your code raised TypeError: bad operand type for unary ~: 'NoneType'\nTraceback (most recent call last):"
    first, hint, rest = explain_crash(error).split("\n")
    assert first == error.split("\n")[0] and rest == "Traceback (most recent call last):"
    assert hint.startswith("  This looks like: mask is optional") and hint.endswith("(known mistake: mask_none)")
    for other in ("your code raised RuntimeError: boom\n", "your code failed to import:\nTypeError: unary ~"):
        assert explain_crash(other) == other


# ---------------------------------------------------------------- the same names in results.json

# a submission made of several students: each case runs the broken implementation planned for it
# (found by the fingerprint of its first argument), every other case the reference
DISPATCH = """
import json as _json
from pathlib import Path as _Path

from cs_basics.nn import _students

_PLAN = _json.loads((_Path(__file__).parent / "_plan.json").read_text())
_REFERENCE = {"run_softmax": softmax, "run_scaled_dot_product_attention": scaled_dot_product_attention}


def _chosen(adapter, first):
    name = _PLAN.get(_students.fingerprint(first))
    return getattr(_students.BROKEN[name][0], adapter) if name else _REFERENCE[adapter]


def softmax(in_features, dim):
    return _chosen("run_softmax", in_features)(in_features, dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    return _chosen("run_scaled_dot_product_attention", Q)(Q, K, V, mask)
"""


def plans(assignment) -> list[dict[str, str]]:
    """The broken implementations to grade, in as few submissions as hold each case once: case fingerprint -> name."""
    names = [*DIAGNOSES, "softmax_via_logsumexp", "no_scale_and_mask_flipped"]
    groups: list[dict[str, str]] = []
    for name in names:
        case = next(c for c in assignment.cases if c.id == BROKEN[name][1])
        args = case.prepare(assignment.store_for(case).load(case.id)[0], torch.device("cpu"))
        key = fingerprint(args["Q"] if "Q" in args else args["x"])
        group = next((g for g in groups if key not in g), None)
        if group is None:
            groups.append(group := {})
        group[key] = name
    return groups


def test_results_json_names_the_same_known_mistakes(assignment, tmp_path):
    cases = {c.id: c for c in assignment.cases}
    checked = set()
    for i, plan in enumerate(plans(assignment)):
        folder = submission(tmp_path, DISPATCH, name=f"students_{i}")
        shutil.copy(ROOT / "staff_tests" / "implementations.py", folder / "cs_basics" / "nn" / "_students.py")
        (folder / "cs_basics" / "nn" / "_plan.json").write_text(json.dumps(plan))
        graded = run(assignment, folder, released=tuple(assignment.problems))  # DISPATCH looks names up: held
        data = results.results_json(graded)
        tests = {t["name"]: t for t in data["tests"]}
        # a hidden case's message (its diagnosis among it) is the staff's: Gradescope's extra_data
        kept = data.get("extra_data", {}).get("cs_basics", {}).get("hidden_messages", {})
        for name in plan.values():
            case = cases[BROKEN[name][1]]
            entry = tests[results.test_name(case)]
            assert entry["status"] == "failed", name
            message = kept[entry["name"]] if case.hidden else entry["output"]
            assert KNOWN.findall(message) == ([DIAGNOSES[name]] if name in DIAGNOSES else []), message
            if case.hidden:
                assert entry["output"] == "hidden case: failed", entry["output"]  # nothing of it for students
            checked.add(name)
    assert checked >= set(DIAGNOSES)


def test_the_student_readme_shows_the_message_of_a_real_run(assignment):
    """The README's diagnosed failure is what a mask applied the wrong way round gives, on the CPU."""

    def flipped(Q, K, V, mask=None):
        scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        return functional.softmax(scores, dim=-1) @ V

    readme = (ROOT / "docs" / "student" / "README.md").read_text()
    shown = next(block for block in readme.split("```\n") if "(known mistake: " in block)
    case = next(c for c in assignment.cases if c.id == shown.split(":")[0])
    with pytest.raises(AssertionError) as info:
        run_case(case, impl(flipped), assignment.store_for(case), torch.device("cpu"))
    assert str(info.value) + "\n" == shown


@pytest.mark.parametrize("mistake", sorted(LOOKALIKES))
def test_a_different_bug_with_similar_symptoms_is_not_given_the_mistakes_name(mistake, assignment, device):
    for lookalike, case_id in [
        LOOKALIKES[mistake],
        *([CRASH_LOOKALIKES[mistake]] if mistake in CRASH_LOOKALIKES else []),
    ]:
        case = next(c for c in assignment.cases if c.id == case_id)
        with pytest.raises(Exception) as info:  # it fails the case, one way or another
            run_case(case, lookalike, assignment.store_for(case), device)
        assert mistake not in named(info.value), f"{mistake} on {case_id}: {info.value}"


def test_every_known_mistake_has_a_lookalike():
    library = {m.name for mistakes in MISTAKES.values() for m in mistakes}
    assert library | {c.name for c in (*CRASHES, *ASSIGNMENT_CRASHES)} == set(LOOKALIKES)


@pytest.mark.parametrize(
    ("name", "sentence"),
    [
        (
            "checks_mask_shape",
            "a mask of shape (3, 1, 7), which broadcasts to the scores' (3, 5, 7): the contract allows",
        ),
        ("mask_none_crash", "mask=None: the contract makes the mask optional"),
        ("fill_minus_1e9_in_float16", "float16 inputs: -1e9 does not fit in float16"),
        ("transpose_3d_only", "4D inputs (Q of shape (2, 2, 12, 64)): the contract allows any number of leading batch"),
    ],
)
def test_a_crash_says_what_the_case_passed_in_pytest_and_in_the_grader_alike(name, sentence, assignment, device):
    err = failure(name, assignment, device)
    notes = list(err.__notes__)
    assert any(
        note == f"This case passed {sentence}" or note.startswith(f"This case passed {sentence}") for note in notes
    )
    case = next(c for c in assignment.cases if c.id == BROKEN[name][1])
    error = f"your code raised {type(err).__name__}: {err}\n{diagnosis.folded_traceback(err)}"
    explained = explain_crash(error, case, assignment.store_for(case).load(case.id)[0])
    assert explained.split("\n")[1 : 1 + len(notes)] == ["  " + note for note in notes]


def test_a_crash_traceback_shows_the_students_frames_and_folds_the_harness(assignment, device):
    err = failure("transpose_3d_only", assignment, device)
    folded = diagnosis.folded_traceback(err)
    yours, _, rest = folded.partition(diagnosis.FOLDED)
    assert "staff_tests/implementations.py" in yours and "transpose_3d_only" in yours
    assert "cs_basics/harness" not in yours and "tests/cases.py" not in yours
    assert f"RuntimeError: {err}" in rest
