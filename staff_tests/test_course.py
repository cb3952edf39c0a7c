"""A course's grades: shards merged equal one run, re-grades redo only what changed, the item analysis."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cs_basics.cli import main
from cs_basics.harness.config import Assignment
from cs_basics.harness.course.regrade import course_parts, plan, read_results, stamp, submission_digest
from cs_basics.harness.course.report import ReportError, analyse, item_rows, load_folder, merge_results, problem_rows
from cs_basics.harness.course.shards import Shard, ShardError, parse_shard, resolve_shard, select, shard_from_env
from cs_basics.harness.grading.writers.results import write_results

from .submissions import ROOT, submission, wrap_attention

ANALYSIS = ("scores.csv", "items.csv", "problems.csv")
PNG = b"\x89PNG\r\n\x1a\n"
ARRAY_JOB = ("SLURM_ARRAY_", "JOB_COMPLETION_INDEX", "CS_BASICS_SHARDS")  # what would shard a run here


# --- shards -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "-1/2", "junk", "1/2/3", "", "1.5/2"])
def test_a_shard_that_cannot_be_is_a_clear_error(text):
    with pytest.raises(ShardError, match=r"--shard .*(I/N|numbered 1 to|at least 1)"):
        parse_shard(text)


def test_shards_are_contiguous_slices_that_cover_the_folder_once():
    for n_items in range(8):
        names = [f"s{i:02d}" for i in range(n_items)]
        for count in range(1, 5):
            slices = [select(names, parse_shard(f"{i}/{count}")) for i in range(1, count + 1)]
            assert [x for s in slices for x in s] == names
            assert max(map(len, slices)) - min(map(len, slices)) <= 1
            # a submission added later moves at most count - 1 others to another shard
            grown = sorted([*names, "s03b"])
            moved = [x for i, s in enumerate(slices) for x in s if x not in select(grown, Shard(i + 1, count))]
            assert len(moved) <= count - 1
    assert select(names, None) == names


@pytest.mark.parametrize(
    ("env", "shard"),
    [
        ({}, None),
        ({"JOB_COMPLETION_INDEX": "0", "CS_BASICS_SHARDS": "3"}, (1, 3)),
        ({"JOB_COMPLETION_INDEX": "2", "CS_BASICS_SHARDS": "3"}, (3, 3)),
        ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "4"}, (1, 4)),
        ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, (4, 4)),
        (
            {"SLURM_ARRAY_TASK_ID": "20", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "4"}
            | {"SLURM_ARRAY_TASK_STEP": "10"},
            (3, 4),
        ),
    ],
)
def test_an_array_job_chooses_the_shard(env, shard):
    found = shard_from_env(env)
    assert (found.index, found.count) == shard if shard else found is None
    assert resolve_shard(parse_shard("1/1"), env) == parse_shard("1/1")  # --shard wins


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"JOB_COMPLETION_INDEX": "1"}, "CS_BASICS_SHARDS is not"),
        ({"JOB_COMPLETION_INDEX": "3", "CS_BASICS_SHARDS": "3"}, "shard 4 of 3 does not exist"),
        ({"JOB_COMPLETION_INDEX": "x", "CS_BASICS_SHARDS": "3"}, "not a whole number"),
        ({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "3"}, "7 of 3 from 1"),
        ({"SLURM_ARRAY_TASK_ID": "2"}, "SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_COUNT is not"),
        # re-runs of some shards: `sbatch --array=2` (or =1) would otherwise grade the whole course as shard 1/1
        # into shard-2's folder, `--array=3-4` the course's halves as shards 1/2 and 2/2
        ({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_MIN": "2", "SLURM_ARRAY_TASK_COUNT": "1"}, "1 task starting"),
        ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "1"}, "--shard I/N"),
        ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "3", "SLURM_ARRAY_TASK_COUNT": "2"}, "2 tasks starting"),
    ],
)
def test_an_array_jobs_environment_that_names_no_shard_is_a_clear_error(env, says):
    with pytest.raises(ShardError, match=says):
        shard_from_env(env)


def test_the_command_refuses_a_shard_of_one_submission_or_of_a_bad_environment(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "submissions"
    alice = submission(folder, name="alice")
    grade = ["grade", "--project", str(ROOT), "--submission"]
    assert main([*grade, str(alice), "--shard", "1/2"]) == 2
    assert "--shard needs a folder of submissions" in capsys.readouterr().err
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "0")
    monkeypatch.delenv("CS_BASICS_SHARDS", raising=False)
    assert main([*grade, str(folder), "--results", str(tmp_path / "out")]) == 2
    assert "CS_BASICS_SHARDS is not" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# --- grading a folder: shards, merge, re-grades -----------------------------------------------------------------


def grade_folder(folder: Path, out: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "cs_basics.cli", "grade", "--submission", str(folder), "--results", str(out)]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(ARRAY_JOB)}
    return subprocess.Popen(
        [*command, "--workers", "1", *extra],
        cwd=ROOT,
        env=clean | (env or {}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    return out


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """Three submissions graded in one run and in two shards (one by --shard, one by a Slurm array's env)."""
    tmp = tmp_path_factory.mktemp("course")
    folder = tmp / "submissions"
    submission(folder, name="alice")
    submission(folder, wrap_attention("raise RuntimeError('boom')"), name="bob")
    submission(folder, replace={"def softmax(": "def softmax(:"}, name="carol")
    slurm = {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "2"}
    runs = [
        grade_folder(folder, tmp / "whole"),
        grade_folder(folder, tmp / "shard1", "--shard", "1/2"),
        grade_folder(folder, tmp / "shard2", env=slurm),
    ]
    outputs = [finished(p) for p in runs]
    return tmp, folder, outputs


def test_shards_merged_equal_one_run(course, capsys):
    tmp, folder, outputs = course
    assert "shard 2/2" in outputs[2]
    assert sorted(p.name for p in (tmp / "shard1").glob("*.json")) == ["alice.json"]
    assert sorted(p.name for p in (tmp / "shard2").glob("*.json")) == ["bob.json", "carol.json"]
    shards = [str(tmp / "shard1"), str(tmp / "shard2")]
    assert main(["merge", *shards, "--out", str(tmp / "merged")]) == 0
    assert "merged 3 submissions" in capsys.readouterr().out
    assert main(["merge", *shards, "--submissions", str(folder), "--out", str(tmp / "checked")]) == 0  # none missing
    for name in ANALYSIS:
        assert (tmp / "merged" / name).read_text() == (tmp / "whole" / name).read_text(), name
        assert (tmp / "checked" / name).read_text() == (tmp / "whole" / name).read_text(), name
    assert (tmp / "whole" / "scores.csv").read_text().splitlines()[1:] == [
        "alice,6.0,6.0,,",
        "bob,1.0,6.0,,",
        "carol,0.0,6.0,,",
    ]
    for folder in ("whole", "merged"):
        assert all((tmp / folder / png).read_bytes()[:8] == PNG for png in ("totals.png", "pass_rates.png"))
    for folder in ("shard1", "shard2"):  # a slice's tables, but no figures of a slice: the merge draws the course's
        assert all((tmp / folder / name).is_file() for name in ANALYSIS) and not list((tmp / folder).glob("*.png"))


def test_a_shard_run_into_a_folder_of_an_earlier_run_leaves_no_figure_of_that_run(course, tmp_path):
    """A shard, or a course with no result, draws no figure, and those an earlier run left in its folder go: they
    showed another course, or the whole of this one."""
    tmp, _, _ = course
    results = load_folder(tmp / "shard1")
    assert list(results) == ["alice"]
    for figures, given in ((False, results), (True, {})):
        out = tmp_path / f"out-{figures}"
        shutil.copytree(tmp / "whole", out)
        assert all((out / png).is_file() for png in ("totals.png", "pass_rates.png"))
        analyse(given, out, figures=figures)
        assert (out / "items.csv").is_file() and not list(out.glob("*.png"))


def test_a_merge_told_the_submissions_names_those_a_failed_shard_left_without_a_grade(course, tmp_path, capsys):
    tmp, folder, _ = course
    shard1, shard2 = tmp_path / "shard1", tmp_path / "shard2"
    shutil.copytree(tmp / "shard1", shard1)
    shutil.copytree(tmp / "shard2", shard2)  # shard 2 of 2 ran out of time: bob has no results file, carol's
    (shard2 / "bob.json").unlink()  # grading was stopped
    write_results(shard2 / "carol.json", stamp(read_results(shard2 / "carol.json"), None, "grading was stopped"))
    merged, never_ran = tmp_path / "merged", tmp_path / "shard3"
    merge = ["merge", str(shard1), str(shard2), str(never_ran), "--submissions", str(folder)]
    assert main([*merge, "--shards", "2", "--out", str(merged)]) == 1
    err = capsys.readouterr().err
    assert "2 of 3 submissions have no completed grade; re-run shards 2 (Slurm: sbatch --array=2 " in err
    assert "  bob (shard 2/2): no results file\n  carol (shard 2/2): grading was stopped" in err
    assert f"{never_ran} holds no results files" in err
    # what exists is written: alice's grade, carol's partial one (its error in scores.csv), their analysis
    assert sorted(p.name for p in merged.glob("*.json")) == ["alice.json", "carol.json"]
    scores = (merged / "scores.csv").read_text()
    assert "alice," in scores and "grading was stopped" in scores and "bob" not in scores
    assert all((merged / name).is_file() for name in ANALYSIS)
    # a file a grader left before its batch stamped it (grading's placeholder 0): no fingerprint, not a grade
    data = read_results(shard1 / "alice.json")
    del data["extra_data"]
    write_results(shard1 / "alice.json", data)
    assert main([*merge, "--out", str(tmp_path / "again")]) == 1
    assert "  alice: its grading did not complete (no fingerprint)" in capsys.readouterr().err
    # without --submissions a folder with no results is still an error, and nothing says who is missing
    assert main(["merge", str(tmp / "shard1"), str(never_ran), "--out", str(tmp_path / "plain")]) == 2
    assert "is not a folder of results files" in capsys.readouterr().err


def test_the_batch_writes_and_prints_the_item_analysis(course):
    tmp, _, outputs = course
    items = {r["case"]: r for r in item_rows(load_folder(tmp / "whole"))}
    assert items["test_softmax[last_dim]"]["passed"] == 2  # alice and bob; carol's code does not import
    assert "SyntaxError" in items["test_softmax[last_dim]"]["other_failures"]
    assert (
        "your code raised RuntimeError: boom (1)" in items["test_scaled_dot_product_attention[mask]"]["other_failures"]
    )
    assert "test_softmax[last_dim]" in outputs[0] and "3 graded, 0 unchanged" in outputs[0]


@pytest.fixture
def no_array_job(monkeypatch):
    for name in [*os.environ]:
        if name.startswith(ARRAY_JOB):
            monkeypatch.delenv(name)


def test_a_second_run_skips_what_did_not_change_and_regrades_what_did(course, tmp_path, capsys, no_array_job):
    def grade_here(*extra: str) -> str:
        assert main(["grade", "--project", str(ROOT), "--submission", str(folder), "--results", str(out), *extra]) == 0
        return capsys.readouterr().out

    whole, folder = course[0] / "whole", course[1]
    shutil.copytree(whole, tmp_path / "out")
    shutil.copytree(folder, tmp_path / "submissions")
    out, folder = tmp_path / "out", tmp_path / "submissions"
    before = {p.name: p.read_bytes() for p in out.glob("*.json")}

    printed = grade_here()
    assert "0 graded, 3 unchanged" in printed
    assert {p.name: p.read_bytes() for p in out.glob("*.json")} == before
    assert (out / "scores.csv").read_text() == (whole / "scores.csv").read_text()

    # bob fixes his attention; a stray __pycache__ in alice's copy changes nothing that grading reads
    functional = folder / "bob/cs_basics/nn/functional.py"
    functional.write_text(functional.read_text().replace("raise RuntimeError('boom')", "pass"))
    (folder / "alice/cs_basics/__pycache__").mkdir(exist_ok=True)
    (folder / "alice/cs_basics/__pycache__/x.pyc").write_bytes(b"junk")
    printed = grade_here()
    assert "1 graded, 2 unchanged" in printed
    assert read_results(out / "bob.json")["score"] == pytest.approx(6.0)
    assert (out / "alice.json").read_bytes() == before["alice.json"]
    assert (out / "scores.csv").read_text().splitlines()[1:] == ["alice,6.0,6.0,,", "bob,6.0,6.0,,", "carol,0.0,6.0,,"]

    written = (out / "alice.json").stat().st_mtime_ns
    printed = grade_here("--force", "--shard", "1/3")
    assert "1 graded, 0 unchanged" in printed
    assert (out / "alice.json").stat().st_mtime_ns > written


@pytest.fixture
def course_copy(tmp_path):
    """The course's own files (pyproject, cases, hidden cases, fixtures) in a folder we may edit."""
    copy = tmp_path / "course"
    for name in ("tests", "hidden", "fixtures"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


SETTINGS = {
    "device": "cpu",
    "case_seconds": 60.0,
    "total_seconds": 900.0,
    "timeouts_per_problem": 2,
    "memory_mb": 4096,
    "tmp_mb": 512,
}


@pytest.mark.parametrize(
    "change",
    ["fixture manifest", "hidden fixture manifest", "case module", "hidden case module", "points", "settings"],
)
def test_a_change_to_the_course_fixtures_or_settings_regrades_everything(course_copy, tmp_path, change):
    folder, out = tmp_path / "submissions", tmp_path / "out"
    subs = [submission(folder, name="alice"), submission(folder, wrap_attention("pass"), name="bob")]
    settings = dict(SETTINGS)
    for p in plan(Assignment.find(course_copy), subs, out, settings):
        p.results.parent.mkdir(exist_ok=True)
        p.results.write_text(json.dumps(stamp({"score": 6.0, "tests": []}, p.fingerprint)))
    assert all(p.skip for p in plan(Assignment.find(course_copy), subs, out, settings))
    manifest = json.loads((course_copy / "fixtures/MANIFEST.json").read_text())
    first = next(iter(manifest["sha256"]))
    if change == "fixture manifest":
        edit(course_copy / "fixtures/MANIFEST.json", manifest["sha256"][first], "0" * 64)
    elif change == "hidden fixture manifest":
        edit(course_copy / "hidden/fixtures/MANIFEST.json", '"sha256": {', '"sha256": {"new.safetensors": "00",')
    elif change == "case module":
        edit(course_copy / "tests/cases.py", "\n", "\n# a case fixed\n")
    elif change == "hidden case module":
        edit(course_copy / "hidden/cases.py", "\n", "\n# a hidden case fixed\n")
    elif change == "points":
        edit(course_copy / "pyproject.toml", "points = 5", "points = 4")
    else:
        settings["memory_mb"] = 8192
    again = plan(Assignment.find(course_copy), subs, out, settings)
    assert not any(p.skip for p in again)
    for p in again:  # graded again under the change: up to date once more
        p.results.write_text(json.dumps(stamp({"score": 6.0, "tests": []}, p.fingerprint)))
    assert all(p.skip for p in plan(Assignment.find(course_copy), subs, out, settings))


def test_a_grader_fix_regrades_everything(assignment, tmp_path):
    grader = tmp_path / "grader" / "cs_basics"
    shutil.copytree(ROOT / "cs_basics" / "harness", grader / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    before = course_parts(assignment, SETTINGS, grader)
    assert course_parts(assignment, SETTINGS, ROOT / "cs_basics") == before
    edit(grader / "harness/compare.py", "\n", "\n# a comparison fixed\n")
    assert course_parts(assignment, SETTINGS, grader)["grader"] != before["grader"]


def test_the_submission_fingerprint_reads_what_grading_stages(assignment, tmp_path):
    alice = submission(tmp_path, name="alice")
    before = submission_digest(assignment, alice)
    (alice / "cs_basics/__pycache__").mkdir(exist_ok=True)
    (alice / "cs_basics/__pycache__/x.pyc").write_bytes(b"junk")
    (alice / "cs_basics/harness/grading/pipeline/grade.py").write_text(
        "# the grader stages its own tooling over this\n"
    )
    (alice / "cs_basics/link.py").symlink_to("/etc/hostname")
    (alice / "README.md").write_text("not student code")
    assert submission_digest(assignment, alice) == before
    (alice / "cs_basics/nn/helpers.py").write_text("X = 1\n")
    assert submission_digest(assignment, alice) != before
    assert submission_digest(assignment, submission(tmp_path, name="copy")) == before  # any folder, same code


# --- the report on any folder of results.json files ---------------------------------------------------------------


def gradescope_test(name, score, max_score, output="", tags=("attention",), **extra):
    return {"name": name, "score": score, "max_score": max_score, "output": output, "tags": list(tags), **extra}


SCALE = "This looks like: scores divided by d_k (known mistake: scale_by_d_k)"
FLIP = "This looks like: True masked out (known mistake: mask_flipped)"


def write_gradescope_results(folder: Path) -> None:
    """Three results as another autograder might write them: `<name>.json` or `<name>/results.json`,
    statuses given or left to the score, failures with diagnosed mistakes and without."""
    results = {
        "ann.json": {
            "score": 3.0,
            "tests": [
                gradescope_test("softmax", 1.0, 1.0, tags=["softmax"], status="passed"),
                gradescope_test("attention[mask]", 0.0, 2.0, f"attention[mask]: wrong\n{SCALE}", status="failed"),
                gradescope_test("attention[causal]", 2.0, 2.0),
            ],
        },
        "ben/results.json": {
            "tests": [
                gradescope_test("softmax", 0.0, 1.0, "softmax: NaN in output\nmore", tags=["softmax"]),
                gradescope_test("attention[mask]", 0.0, 2.0, f"attention[mask]: wrong\n{SCALE} and {FLIP}"),
                gradescope_test("attention[causal]", 0.0, 2.0, f"attention[causal]: wrong\n{FLIP}"),
            ],
        },
        "cal.json": {
            "score": 2.0,
            "tests": [
                gradescope_test("softmax", 0.0, 1.0, "softmax: NaN in output\nother", tags=["softmax"]),
                gradescope_test("attention[mask]", 0.0, 2.0, f"attention[mask]: wrong\n{SCALE}"),
                gradescope_test("attention[causal]", 2.0, 2.0, "", tags=[]),
            ],
        },
    }
    for name, data in results.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(data))


def test_the_report_reads_any_folder_of_gradescope_results(tmp_path, capsys):
    folder = tmp_path / "export"
    write_gradescope_results(folder)
    results = load_folder(folder)
    assert list(results) == ["ann", "ben", "cal"]
    items = {r["case"]: r for r in item_rows(results)}
    assert [items["softmax"][k] for k in ("passed", "pass_rate", "mean_score", "max_score")] == [1, 0.3333, 0.3333, 1.0]
    assert items["softmax"]["other_failures"] == "softmax: NaN in output (2)"
    assert items["attention[mask]"]["mistakes"] == "scale_by_d_k (3); mask_flipped (1)"
    assert items["attention[mask]"]["other_failures"] == ""
    assert items["attention[causal]"]["passed"] == 2 and items["attention[causal]"]["mistakes"] == "mask_flipped (1)"
    problems = {r["problem"]: r for r in problem_rows(results)}
    assert problems["total"]["distribution"] == "0: 1, 2: 1, 3: 1"  # ben has no `score`: the sum of his tests
    assert (problems["softmax"]["zero"], problems["softmax"]["full"]) == (2, 1)
    assert problems["attention"]["distribution"] == "0: 2, 2: 1"  # cal's untagged test is not attention's
    assert problems["(untagged)"]["submissions"] == 1

    assert main(["report", str(folder), "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    assert "attention[mask]" in printed and "scale_by_d_k (3)" in printed and "3 submissions" in printed
    assert (tmp_path / "report/items.csv").read_text().splitlines()[0].startswith("case,problem,submissions,passed")
    assert all((tmp_path / "report" / png).read_bytes()[:8] == PNG for png in ("totals.png", "pass_rates.png"))
    assert sorted(p.name for p in folder.rglob("*")) == ["ann.json", "ben", "cal.json", "results.json"]  # untouched


def test_the_report_says_which_file_is_not_results(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert f"no results files (<name>.json or <name>/results.json) in {tmp_path}" in capsys.readouterr().err
    (tmp_path / "bench.json").write_text('{"rows": []}')
    with pytest.raises(ReportError, match=r"bench.json: not a Gradescope results file"):
        load_folder(tmp_path)
    (tmp_path / "bench.json").write_text("{")
    with pytest.raises(ReportError, match=r"bench.json: not a readable JSON file"):
        load_folder(tmp_path)


def test_merge_refuses_a_submission_graded_twice_with_different_results(tmp_path, capsys):
    one, two = tmp_path / "one", tmp_path / "two"
    write_gradescope_results(one)
    write_gradescope_results(two)
    data = json.loads((two / "ann.json").read_text())
    data["tests"][1]["output"] += " (in /tmp/another-grading-folder)"  # the same grade, said otherwise
    (two / "ann.json").write_text(json.dumps(data))
    assert list(merge_results([one, two])) == ["ann", "ben", "cal"]  # the same grades twice: one each
    data = json.loads((two / "cal.json").read_text())
    data["tests"][0]["status"], data["tests"][0]["score"], data["score"] = "passed", 1.0, 3.0
    (two / "cal.json").write_text(json.dumps(data))
    assert main(["merge", str(one), str(two), "--out", str(tmp_path / "merged")]) == 2
    err = capsys.readouterr().err
    assert f"cal was graded in both {one} and {two} with different results (score 2 and 3" in err
    assert not (tmp_path / "merged").exists()
    assert main(["merge", str(one), "--out", str(one)]) == 2
    assert "is one of the folders being merged" in capsys.readouterr().err


# --- the Kubernetes recipe's commands ------------------------------------------------------------------------


def manifest_command(path: Path) -> str:
    """The `sh -c` script of a manifest's container: its folded (`>-`) block, lines joined by spaces."""
    lines = path.read_text().splitlines()
    start = lines.index("            - >-") + 1
    block = [line.strip() for line in lines[start:] if line.startswith(" " * 14)]
    return " ".join(block[: next((i for i, line in enumerate(block) if ":" in line.split()[0]), len(block))])


def test_the_kubernetes_jobs_commands_grade_their_shard_and_the_merge_names_the_rest(tmp_path):
    """grade-job.yaml's and merge-job.yaml's commands as their pods run them, /data a temporary folder."""
    grade_job, merge_job = ROOT / "docs/cluster/grade-job.yaml", ROOT / "docs/cluster/merge-job.yaml"
    shards = re.search(r'CS_BASICS_SHARDS, value: "(\d+)"', grade_job.read_text())[1]
    assert f"completions: {shards} " in grade_job.read_text() and f"--shards {shards}" in manifest_command(merge_job)
    submission(tmp_path / "submissions", name="alice")
    submission(tmp_path / "submissions", name="bob")  # 2 submissions in 8 shards: shard 8 holds bob alone
    env = {k: v for k, v in os.environ.items() if not k.startswith(ARRAY_JOB)}
    env |= {"JOB_COMPLETION_INDEX": str(int(shards) - 1), "CS_BASICS_SHARDS": shards}
    env["PATH"] = f"{Path(shutil.which('uv')).parent}:{env['PATH']}"

    def pod(manifest: Path) -> subprocess.CompletedProcess:
        script = manifest_command(manifest).replace("/data/", f"{tmp_path}/")
        assert script.startswith("exec uv run "), script  # the grader is PID 1 and gets the SIGTERM
        return subprocess.run(["sh", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)

    graded = pod(grade_job)
    assert graded.returncode == 0, graded.stderr
    assert f"1 submissions (shard {shards}/{shards} of" in graded.stdout
    assert sorted(p.name for p in (tmp_path / f"results/shard-{shards}").glob("*.json")) == ["bob.json"]
    merged = pod(merge_job)
    assert merged.returncode == 1, merged.stderr
    assert "1 of 2 submissions have no completed grade; re-run shards 4 (" in merged.stderr
    assert "  alice (shard 4/8): no results file" in merged.stderr
    assert (tmp_path / "results/all/bob.json").is_file()


def test_a_folder_of_bare_uploads_is_graded_as_a_course(tmp_path, capsys, no_array_job):
    """Gradescope's export of a course's submissions, and the Kubernetes recipe's: each student's folder holds the
    files they uploaded (functional.py), not the course's layout; each is laid out as one upload is."""
    folder = tmp_path / "submissions"
    (folder / "alice").mkdir(parents=True)
    shutil.copy(ROOT / "cs_basics" / "nn" / "functional.py", folder / "alice" / "functional.py")
    (folder / "bob").mkdir()
    (folder / "bob" / "functional.py").write_text("this is not Python\n")
    out = tmp_path / "results"
    assert (
        main(["grade", "--project", str(ROOT), "--submission", str(folder), "--results", str(out), "--shard", "1/1"])
        == 0
    )
    scores = {who: read_results(out / f"{who}.json")["score"] for who in ("alice", "bob")}
    assert scores == {"alice": pytest.approx(6.0), "bob": 0}
