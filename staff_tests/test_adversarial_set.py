"""The adversarial set (staff_tests/students): graded in one batch, each solution gets the verdict, the
known mistake and the crash sentences its expected.toml gives it (see staff_tests/adversarial.py)."""

import pytest

from cs_basics.harness.config import Assignment

from .adversarial import ROOT, grade_all, judge_all, load, solutions

NAMES = [folder.name for folder in solutions()]


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    folder = tmp_path_factory.mktemp("adversarial_results")
    run = grade_all(folder)
    assert run.returncode in (0, 1), run.stderr[-3000:]  # 1: some submission lost points
    return {j.name: j for j in judge_all(folder)}


def test_the_set_is_large_and_well_formed():
    problems = set(Assignment.find(ROOT).table["problems"])
    assert len(NAMES) >= 30
    for folder in solutions():
        expected = load(folder)
        assert expected["style"] and isinstance(expected["from_scratch"], bool), folder.name
        assert set(expected["points"]) == problems, folder.name
        for table in ("fails", "passes", "diagnosis", "crash"):
            assert set(expected.get(table, {})) <= problems, f"{folder.name}: [{table}]"
        assert (folder / "cs_basics" / "nn" / "functional.py").is_file(), folder.name


@pytest.mark.parametrize("name", NAMES)
def test_each_solution_gets_its_deserved_verdict_diagnosis_and_crash_sentences(name, judged):
    j = judged[name]
    assert j.problems_found == [], "\n".join(j.problems_found)
    assert j.verdicts_right == j.problems and j.named == j.to_name and j.crashes_explained == j.crashes
