"""Whatever a submission's files hold (their size, their depth, their syntax, how many there are), and
whatever one case raises, grading ends in a verdict with exit status 0, within bounds the grader sets.

Each submission is graded with bubblewrap and with the fallback, as `cs-basics grade` grades it
(grade_one, into a results file), and the grading process's peak memory is measured: its high-water
mark (VmHWM) is reset before grading and read after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cs_basics.harness.config import Assignment
from cs_basics.harness.course.regrade import submission_digest
from cs_basics.harness.grading.command import grade_one
from cs_basics.harness.grading.pipeline.grade import take
from cs_basics.harness.grading.sandbox.bubblewrap import bubblewrap_runs
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.worker import Worker

from .submissions import FUNCTIONAL, ROOT, said, submission, wrap_attention

needs_bubblewrap = pytest.mark.skipif(not bubblewrap_runs(), reason="bubblewrap does not run here: only the fallback")
SANDBOXES = [pytest.param("bubblewrap", marks=needs_bubblewrap), "fallback"]
FULL = {"softmax": 1.0, "scaled_dot_product_attention": 5.0}
MEMORY_GROWTH = 256 << 20  # what grading one submission may add to the grading process's peak memory


@pytest.fixture(scope="module", params=SANDBOXES)
def worker(request):
    # released, as the staff would after reading them: these submissions reach /proc and descriptors, which is no
    # name the course allows (held before any code runs); the bounds are what is tested
    released = ("softmax", "scaled_dot_product_attention")
    with Worker(request.param, Limits(case_seconds=10, released=released)) as shared:
        yield shared


def status_bytes(field: str) -> int:
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field))
    return int(line.split()[1]) << 10


def graded(assignment, worker, folder: Path, results: Path) -> tuple[int, dict, int]:
    """(exit status, results file, how far the grading process's peak memory rose above where it was)."""
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = status_bytes("VmRSS")
    status = grade_one(assignment, folder, results, "cpu", worker.limits, quiet=True, worker=worker)
    return status, json.loads(results.read_text()), status_bytes("VmHWM") - before


def by_problem(data: dict) -> dict[str, float]:
    found: dict[str, float] = {}
    for test in data["tests"]:
        found[test["tags"][0]] = found.get(test["tags"][0], 0.0) + test["score"]
    return found


def write_functional(folder: Path, tail: bytes) -> None:
    with open(folder / FUNCTIONAL, "ab") as f:
        f.write(b"\n" + tail)


HOSTILE = {  # what is appended to a right functional.py, and what every test's message then says
    "38MB": (b'_BIG = "' + b"x" * 38_000_000 + b'"\n', "functional.py is 36."),  # 36.2 MiB and the reference
    "200000_terms": (b"_DEEP = " + b"+".join([b"1"] * 200_000) + b"\n", "functional.py is nested too deeply"),
    "null_bytes": (b"_X = 1\x00\n", "null bytes"),
    "bad_encoding": (b"_S = '\xff\xfe'\n", "can't decode byte 0xff"),
    "syntax_error": (b"def broken(:\n", "SyntaxError"),
}


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_source_file_too_large_too_deep_or_unparsable_ends_in_a_verdict(assignment, worker, tmp_path, kind):
    tail, verdict = HOSTILE[kind]
    folder = submission(tmp_path)
    write_functional(folder, tail)
    status, data, growth = graded(assignment, worker, folder, tmp_path / "results.json")
    assert status == 0 and data["score"] == 0
    assert all(verdict in said(data, test) for test in data["tests"]), data["tests"][0]["output"][:2000]
    assert growth < MEMORY_GROWTH, f"the grading process's peak memory rose by {growth >> 20} MiB"


METERED = """
import resource, subprocess, sys
status = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(status)
"""


def test_the_grader_reading_a_38_mb_source_stays_under_1_gib(tmp_path):
    """`cs-basics grade` as the staff run it: its own peak resident memory (and that of every process it
    waited for: its grading server, its scan) stays under 1 GiB, and it exits 0."""
    folder = submission(tmp_path)
    write_functional(folder, HOSTILE["38MB"][0])
    results = tmp_path / "results.json"
    command = [sys.executable, "-m", "cs_basics.cli", "grade", "--quiet", "--submission", str(folder)]
    # measured in a process of its own: this one's RUSAGE_CHILDREN holds whatever an earlier test on this worker
    # waited for (a platform lab's container, a uv install)
    metered = [sys.executable, "-c", METERED, *command, "--results", str(results)]
    done = subprocess.run(metered, cwd=ROOT, capture_output=True, text=True, timeout=600)
    peak = int(done.stdout.split()[-1]) << 10
    assert done.returncode == 0, done.stderr
    size = (folder / FUNCTIONAL).stat().st_size / (1 << 20)
    assert f"functional.py is {size:.1f} MiB; the limit is 1 MiB" in json.loads(results.read_text())["output"]
    assert peak < 1 << 30, f"a grading process peaked at {peak >> 20} MiB"


def deep_folder(top: Path, levels: int) -> None:
    """`top`/d/d/.../d, one folder inside the other (os.makedirs recurses)."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)


@pytest.fixture(scope="module")
def crowded(tmp_path_factory):
    """A right solution beside a folder 1,500 levels deep, 100,000 files (about 20 s to make: made once for
    both sandboxes), a link to a root-only file, and file names that are not UTF-8 or hold a newline."""
    folder = submission(tmp_path_factory.mktemp("crowded"))
    package = folder / "cs_basics"
    deep_folder(package / "deep", 1500)
    many = package / "data"
    many.mkdir()
    for i in range(100_000):
        os.close(os.open(many / f"{i:06d}.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    os.symlink("/etc/shadow", package / "nn" / "shadow.py")
    (package / "nn" / "line\nbreak.py").write_text("X = 1\n")
    Path(os.fsdecode(bytes(package / "nn") + b"/not-utf8-\xff.py")).write_text("Y = 2\n")
    yield folder
    subprocess.run(["rm", "-rf", str(package / "deep"), str(many)], check=True)  # shutil.rmtree recurses


def test_a_deep_folder_and_100000_files_beside_a_right_solution_keep_its_points(assignment, worker, crowded, tmp_path):
    """They are left out with a note naming them; the links and odd names change nothing; the re-grade
    fingerprint reads the same tree and finishes."""
    status, data, growth = graded(assignment, worker, crowded, tmp_path / "results.json")
    assert submission_digest(assignment, crowded)
    assert status == 0 and by_problem(data) == pytest.approx(FULL), data["output"]
    assert "more than 32 folders deep): cs_basics/deep/d/d/" in data["output"]
    assert "more than 10000 files and folders in all): cs_basics/data" in data["output"]
    assert growth < MEMORY_GROWTH, f"the grading process's peak memory rose by {growth >> 20} MiB"


def test_a_300_mb_exception_in_attention_leaves_softmax_its_points(assignment, worker, tmp_path):
    """The child cuts each message before it sends it: no case's error fills the progress channel, and the
    cases after it (softmax's hidden ones among them) run."""
    folder = submission(tmp_path, wrap_attention('raise ValueError("x" * 300_000_000)'))
    status, data, _ = graded(assignment, worker, folder, tmp_path / "results.json")
    assert status == 0 and by_problem(data) == pytest.approx({"softmax": 1.0, "scaled_dot_product_attention": 0.0})
    hidden_softmax = [t for t in data["tests"] if t["tags"] == ["softmax"] and t["visibility"] != "visible"]
    assert hidden_softmax and all(t["status"] == "passed" for t in hidden_softmax)
    attention = [said(data, t) for t in data["tests"] if t["tags"] == ["scaled_dot_product_attention"]]
    assert all("your code raised ValueError: xxx" in m and "characters cut" in m for m in attention), attention[0]
    assert all(len(m) < 20_000 for m in attention)


def test_a_line_the_harness_never_writes_costs_its_problem_alone(assignment, worker, tmp_path):
    """The first attention case of each process (public, then hidden) writes 100 KiB with no newline to the
    progress channel: a line over 64 KiB, which the harness never writes, is tampering (protocol.py). Attention
    loses its points, saying why; softmax keeps every point and the grader finishes (exit 0)."""
    lose_report = """
    import os
    if not os.path.exists("lost"):  # once (a file in the job's own folder: globals() would hold the problem)
        open("lost", "w").close()
        for _fd in map(int, os.listdir("/proc/self/fd")):
            _link = os.readlink(f"/proc/self/fd/{_fd}") if os.path.exists(f"/proc/self/fd/{_fd}") else ""
            if _fd > 2 and _link.startswith(("pipe:", "socket:")):  # the progress channel among them
                try:
                    os.write(_fd, b"x" * (100 << 10))
                except OSError:  # a pipe's reading end
                    pass
    """
    folder = submission(tmp_path, wrap_attention(lose_report))
    status, data, _ = graded(assignment, worker, folder, tmp_path / "results.json")
    assert status == 0 and by_problem(data) == pytest.approx({"softmax": 1.0, "scaled_dot_product_attention": 0.0})
    attention = [said(data, t) for t in data["tests"] if t["tags"] == ["scaled_dot_product_attention"]]
    assert any("a line over 64 KiB" in out for out in attention), attention[0]


def test_a_job_that_leaves_a_deep_folder_in_its_own_folder_is_cleaned_up(assignment, worker, tmp_path):
    """What a job writes into its working folder is removed after it without recursing (shutil.rmtree does)."""
    deep = """
    import os
    _fd = os.open(".", os.O_RDONLY)
    for _ in range(3000):
        os.mkdir("d", dir_fd=_fd)
        _inner = os.open("d", os.O_RDONLY, dir_fd=_fd)
        os.close(_fd)
        _fd = _inner
    os.close(_fd)
    """
    status, data, _ = graded(assignment, worker, submission(tmp_path, deep), tmp_path / "results.json")
    assert status == 0 and by_problem(data) == pytest.approx(FULL), data["output"]
    assert not list(worker.root.glob("jobs/*"))


def test_the_bounds_are_the_courses_to_set(assignment, tmp_path):
    """`[tool.cs-basics]` source_file_mib, source_total_mib, max_folder_depth and max_files."""
    folder = submission(tmp_path)

    def taken(**table):
        return take(Assignment(assignment.root, {**assignment.table, **table}), folder)

    assert taken().refused is None and taken().notes == []
    assert taken(source_file_mib=0.001).refused.endswith("; the limit is 1.02 KiB")
    assert "Python files come to over 1.02 KiB" in taken(source_total_mib=0.001).refused
    assert taken(max_folder_depth=0).notes == ["left out of grading (more than 0 folders deep): cs_basics/nn"]
    assert "more than 2 files and folders in all): cs_basics" in taken(max_files=2).notes[0]
