"""The adversarial set (staff_tests/students): graded in batches, each solution gets the verdict, the
known mistake and the crash sentences its expected.toml gives it (see staff_tests/adversarial.py).

The set is graded in shards (`cs-basics grade --shard I/N`, the course's own slicing), each a batch of its
own, made by the first test of that shard and kept for the others: no one set-up grades the whole set (66
submissions once took past pytest-timeout's 300 s on a loaded machine), and under xdist each shard is a group
of its own, so the shards are graded on two workers at once."""

import pytest

from cs_basics.harness.config import Assignment
from cs_basics.harness.course.shards import shard_of, submission_folders

from .adversarial import ROOT, STUDENTS, grade_all, judge_all, load, solutions

SHARDS = 2  # about 45 submissions a batch: 12 s idle on 2 cores (each shard's grader and server import torch:
# six shards took 44 CPU seconds of the suite's, two take 32)
# at most one shard's batch, bounded by its own limit (sized for a loaded machine), not by pytest-timeout's per-test
# limit: the tests time their own body only (func_only)
SHARD_SECONDS = 900
FOLDERS = submission_folders(STUDENTS)  # the order the shards slice
NAMES = [folder.name for folder in solutions()]


def shard_for(name: str) -> int:
    return shard_of(FOLDERS, STUDENTS / name, SHARDS)


@pytest.fixture(scope="module")
def judged_shards() -> dict[int, dict]:
    """Each shard's judgements, once graded (a worker grades only the shards its tests need)."""
    return {}


@pytest.fixture
def judged(judged_shards, name, tmp_path_factory):
    shard = shard_for(name)
    if shard not in judged_shards:
        folder = tmp_path_factory.mktemp(f"adversarial_results_{shard}")
        run = grade_all(folder, shard=f"{shard}/{SHARDS}", timeout=SHARD_SECONDS)
        assert run.returncode in (0, 1), run.stderr[-3000:]  # 1: some submission lost points
        graded = [solution for solution in solutions() if shard_for(solution.name) == shard]
        judged_shards[shard] = {j.name: j for j in judge_all(folder, graded)}
    return judged_shards[shard]


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


@pytest.mark.timeout(300, func_only=True)
@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=pytest.mark.xdist_group(f"adversarial-{shard_for(name)}")) for name in NAMES]
)
def test_each_solution_gets_its_deserved_verdict_diagnosis_and_crash_sentences(name, judged):
    j = judged[name]
    assert j.problems_found == [], "\n".join(j.problems_found)
    assert j.verdicts_right == j.problems and j.named == j.to_name and j.crashes_explained == j.crashes
