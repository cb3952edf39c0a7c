"""The README followed literally on a fresh Debian 12 machine, as root, with the checkout under /root (issue 42):
uv installed by the README's lines, then `uv run cs-basics grade` gives 6/6 with no manual step, in bubblewrap
where it is installed, and a slice of `uv run pytest` passes (staff_tests/lab/fresh.py). In the platform lab's
images and engine: where no engine can run here, every test says so and skips.
"""

from __future__ import annotations

import json

import pytest

from .lab import fresh, images
from .lab.submissions import solution_lines

PROBLEM = images.engine_problem()
pytestmark = [
    pytest.mark.skipif(PROBLEM is not None, reason=str(PROBLEM)),
    pytest.mark.timeout(3600),
    pytest.mark.xdist_group("platform_lab"),  # one build at a time, beside the platforms' lab
]


@pytest.fixture(scope="module")
def fresh_jobs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("lab-fresh")
    built: list[str] = []
    found = fresh.fresh_images(tmp, built)
    return {kind: fresh.fresh_job(image, tmp / kind) for kind, image in found.items()}


@pytest.fixture(params=["without", "bubblewrap"])
def job(request, fresh_jobs):
    return request.param, fresh_jobs[request.param]


def text(job, name: str) -> str:
    return job.files.get(name, b"").decode("utf-8", "replace")


def test_the_readme_gives_full_marks_as_root_with_the_checkout_under_root(job):
    """6/6 from `uv run cs-basics grade`, exit 0, with no chmod or other step; in bubblewrap where installed
    (podman's default container: root may not make namespaces, but may make a user namespace)."""
    kind, done = job
    assert text(done, "grade.status").strip() == "0", done.log[-2000:] + text(done, "grade.log")[-4000:]
    results = json.loads(done.files["results.json"])
    assert results["score"] == pytest.approx(6.0), results["output"][:2000]
    if kind == "bubblewrap":
        assert "Graded in a bubblewrap sandbox in a user namespace" in results["output"], results["output"][:800]
    else:
        assert "Graded in the fallback sandbox (no bubblewrap: `bwrap` is not installed" in results["output"]
        assert "Landlock (ABI" in results["output"], results["output"][:800]


def test_a_slice_of_the_suite_passes_there(job):
    _kind, done = job
    log = text(done, "pytest.log")
    assert text(done, "pytest.status").strip() == "0", log[-6000:]
    assert " passed" in log and " failed" not in log, log[-3000:]


def test_the_spy_reads_nothing_of_the_checkout_under_root(job):
    """The spy walks every folder it may and prints each file it finds that a student must not read ("LOOT
    path ..."); here the checkout (the reference solution, `hidden/` and its expected values) lies under /root,
    beside the .venv the job imports from: it reads no file there, and no line of the solution reaches its grade.
    What it prints while the hidden cases run is in no file; its public phase's walk is."""
    _kind, done = job
    assert text(done, "spy.status").strip() == "0", text(done, "spy.log")[-4000:]
    seen = text(done, "spy.log") + json.loads(done.files["spy.json"])["output"]
    seen += "\n".join(t.get("output", "") for t in json.loads(done.files["spy.json"])["tests"])
    assert "LOOT " in seen, seen[:3000]  # the spy ran, and read what it may (the test can fail)
    read = [line[5:].split()[0] for line in seen.splitlines() if line.startswith("LOOT /")]
    assert not [path for path in read if path.startswith(f"{fresh.CHECKOUT}/")], read
    leaked = [line for line in solution_lines() if line in seen]
    assert not leaked, f"{len(leaked)} lines of the solution reached the spy's grade, e.g. {leaked[:3]}"
