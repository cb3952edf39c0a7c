"""The README's Slurm recipe, docs/cluster/grade.sbatch and merge.sbatch as they are, on a real Slurm.

A single-node Slurm (Debian's slurm-wlm and munge, installed with apt-get when missing) is stood up in a
temporary folder; the tests skip, saying why, where that cannot be (not root, no apt-get, the packages
not installable, a daemon that ends as it starts: a container without what slurmd needs). Run them alone
with `uv run pytest staff_tests/test_slurm.py -v -rs` (about 2 minutes).
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cs_basics.harness.course.regrade import read_results
from cs_basics.harness.course.report import grade_of

from . import slurm_cluster
from .slurm_cluster import Cluster, Unavailable
from .submissions import ROOT, submission, wrap_attention
from .test_sandbox import job_uids_under

GRADE, MERGE = ROOT / "docs/cluster/grade.sbatch", ROOT / "docs/cluster/merge.sbatch"
ANALYSIS = ("scores.csv", "items.csv", "problems.csv")
# the cluster's start (apt-get, the daemons) and the first course's grading are set-ups, bounded by their own
# limits (slurm_cluster.START_SECONDS, Cluster.wait), not by a test's
pytestmark = pytest.mark.timeout(300, func_only=True)
# what the tests change of the recipe's defaults: a 2-CPU node runs two 1-CPU tasks at once
SMALL = ["--cpus-per-task=1", "--mem=3G"]


@pytest.fixture(scope="module")
def cluster(machine):
    """Held as a share of the machine for its life: apt-get may install Slurm, and a test that runs alone
    to watch the machine must not see it (staff_tests/machine.py)."""
    with machine.share():
        folder = Path(tempfile.mkdtemp(prefix="cs-basics-slurm-"))  # short: munge's socket path must fit 108 bytes
        running = Cluster(folder)
        try:
            try:
                yield running.start()
            except Unavailable as why:
                pytest.skip(f"no real Slurm here: {why}")
        finally:  # whatever a test did, the daemons end
            running.stop()
            shutil.rmtree(folder, ignore_errors=True)


def make_course(folder: Path, names: dict[str, str | dict | None]) -> Path:
    """`folder/submissions/<name>`: None is a correct submission, a string is appended attention code,
    a dict replaces text."""
    for name, change in names.items():
        if isinstance(change, dict):
            submission(folder / "submissions", replace=change, name=name)
        else:
            submission(folder / "submissions", wrap_attention(change) if change else "", name=name)
    (folder / "logs").mkdir()
    return folder


def job_env(course: Path) -> dict[str, str]:
    """What the recipe reads; no array variable of our own run leaks in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JOB_COMPLETION_INDEX"))}
    return env | {"SHARDS": "2", "COURSE": str(course), "GRADER": str(ROOT), "UV": shutil.which("uv") or "uv"}


def submit(cluster: Cluster, course: Path, *array: str) -> tuple[str, str]:
    """The array and the merge after it, as the README submits them; their job ids."""
    env = job_env(course)
    logs = course / "logs"
    job = cluster.sbatch(*SMALL, *(array or ["--array=1-2"]), f"--output={logs}/grade-%A_%a.out", str(GRADE), env=env)
    merge = cluster.sbatch(f"--dependency=afterany:{job}", f"--output={logs}/merge-%j.out", str(MERGE), env=env)
    return job, merge


def log(course: Path, name: str) -> str:
    return (course / "logs" / name).read_text(errors="replace")


@pytest.fixture(scope="module")
def graded(cluster, tmp_path_factory):
    """Three submissions graded by a 2-task array and merged, and in one plain run beside it."""
    course = make_course(
        tmp_path_factory.mktemp("slurm-course"),
        {"alice": None, "bob": "raise RuntimeError('boom')", "carol": {"def softmax(": "def softmax(:"}},
    )
    plain_run = ["grade", "--submission", str(course / "submissions"), "--results", str(course / "plain")]
    plain = subprocess.Popen(
        [sys.executable, "-m", "cs_basics.cli", *plain_run, "--workers", "1"],
        cwd=ROOT,
        env=job_env(course),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    job, merge = submit(cluster, course)
    cluster.wait(merge)
    assert plain.wait(timeout=300) == 0, plain.stdout.read()
    return cluster, course, job, merge


def test_every_task_ran_and_the_merge_equals_one_plain_run(graded):
    cluster, course, job, merge = graded
    for task, names in ((1, ["alice.json"]), (2, ["bob.json", "carol.json"])):
        state = cluster.job(f"{job}_{task}")
        assert (state["JobState"], state["ExitCode"]) == ("COMPLETED", "0:0"), log(course, f"grade-{job}_{task}.out")
        assert f"{len(names)} submissions (shard {task}/2 of" in log(course, f"grade-{job}_{task}.out")
        assert sorted(p.name for p in (course / f"results/shard-{task}").glob("*.json")) == names
    assert cluster.job(merge)["JobState"] == "COMPLETED", log(course, f"merge-{merge}.out")
    merged, plain = course / "results/all", course / "plain"
    for name in ANALYSIS:
        assert (merged / name).read_text() == (plain / name).read_text(), name
    for name in ("alice", "bob", "carol"):
        assert grade_of(read_results(merged / f"{name}.json")) == grade_of(read_results(plain / f"{name}.json"))
    assert [read_results(merged / f"{n}.json")["score"] for n in ("alice", "bob", "carol")] == [6, 1, 0]


def test_a_second_submission_skips_every_unchanged_submission_and_one_shard_reruns_alone(graded):
    cluster, course, _, _ = graded
    before = {p: p.read_bytes() for p in (course / "results").rglob("shard-*/*.json")}
    job, merge = submit(cluster, course)
    cluster.wait(job)
    # `sbatch --array=2` re-runs shard 2 of 2, not the whole course as shard 1 of 1 in shard-2's folder (beside
    # the merge, which reads only the results files that a run that skips them all leaves alone)
    logs = f"--output={course}/logs/grade-%A_%a.out"
    again = cluster.sbatch(*SMALL, "--array=2", logs, str(GRADE), env=job_env(course))
    cluster.wait(merge)
    cluster.wait(again)
    for task, unchanged in ((1, 1), (2, 2)):
        assert f"0 graded, {unchanged} unchanged" in log(course, f"grade-{job}_{task}.out")
    assert cluster.job(merge)["JobState"] == "COMPLETED"
    assert {p: p.read_bytes() for p in before} == before
    assert "2 submissions (shard 2/2 of" in log(course, f"grade-{again}_2.out")
    assert sorted(p.name for p in (course / "results/shard-2").glob("*.json")) == ["bob.json", "carol.json"]


def grading_in(job: str, task: int) -> bool:
    """Whether a process of a job's uid (the grader's child) runs under the array task's batch script."""
    marks = (f"SLURM_ARRAY_JOB_ID={job}\0".encode(), f"SLURM_ARRAY_TASK_ID={task}\0".encode())
    tops = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and all(mark in (proc / "environ").read_bytes() for mark in marks):
                tops.append(int(proc.name))
        except OSError:
            continue
    return any(job_uids_under(pid) for pid in tops)


@pytest.mark.timeout(900, func_only=True)  # a grading in shard 2 that Slurm cancels, then the merge
def test_a_failed_shard_makes_the_merge_name_its_submissions_and_fail(cluster, tmp_path):
    course = make_course(tmp_path, {"alice": None, "slow": "import time\ntime.sleep(600)", "zed": None})
    job, merge = submit(cluster, course)
    # the grader is past its start and grading `slow` (a process of its job's uid runs): Slurm's SIGTERM must
    # reach it there, however long its start took
    cluster.wait_for(lambda: grading_in(job, 2), "a job of shard 2's grader", seconds=600)
    cluster.run("scancel", f"{job}_2")
    cluster.wait(merge, seconds=600)
    assert cluster.job(f"{job}_1")["JobState"] == "COMPLETED"
    assert cluster.job(f"{job}_2")["JobState"] == "CANCELLED"
    # exec: the grader itself got the signal, wound down inside the job and said so in its log
    assert "scores in" in log(course, f"grade-{job}_2.out")
    state, printed = cluster.job(merge), log(course, f"merge-{merge}.out")
    assert (state["JobState"], state["ExitCode"]) == ("FAILED", "1:0"), printed
    assert "2 of 3 submissions have no completed grade; re-run shards 2 (Slurm: sbatch --array=2 " in printed, printed
    assert "  slow (shard 2/2): " in printed and "  zed (shard 2/2): " in printed
    assert "alice (" not in printed
    assert "alice,6.0" in (course / "results/all/scores.csv").read_text()  # what exists is written


def test_the_daemons_it_started_are_stopped(cluster):
    cluster.stop()
    assert all(daemon.poll() is not None for daemon in cluster.daemons)
    conf = cluster.env["SLURM_CONF"].encode()
    left = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and conf in (proc / "environ").read_bytes():
                left.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    assert not left, left


def test_where_slurm_cannot_be_stood_up_the_tests_say_why(monkeypatch):
    monkeypatch.setattr(slurm_cluster.os, "geteuid", lambda: 1000)
    with pytest.raises(Unavailable, match="not root"):  # installed or not: its daemons need root
        slurm_cluster.install()
    monkeypatch.setattr(slurm_cluster.shutil, "which", lambda name: None)
    monkeypatch.setattr(slurm_cluster.os, "geteuid", lambda: 0)
    with pytest.raises(Unavailable, match="no apt-get to install them"):
        slurm_cluster.install()
