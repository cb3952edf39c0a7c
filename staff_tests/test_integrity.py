"""Hostile submissions, one per attack: none crashes the grader, outlives it, touches the course's
files, or raises its own score. Defences that need a root grader (the child's own uid) run when
the tests run as root, and say so when they skip."""

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from cs_basics.harness.config import Assignment
from cs_basics.harness.grading.command import grade_one
from cs_basics.harness.grading.pipeline.grade import grade
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.worker import Worker

from .submissions import ROOT, STUBBED, fingerprint, outputs_of, run, scores, submission, wrap_attention

ATTENTION, SOFTMAX = "scaled_dot_product_attention", "softmax"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the child's own unprivileged uid needs a root grader")


@pytest.fixture
def shared_dir():
    """A folder anyone may write: where a submission would leave traces if it could."""
    folder = Path(tempfile.mkdtemp(prefix="cs-basics-traces-"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_fake_results_printed_or_written_change_nothing(assignment, tmp_path, shared_dir):
    results = shared_dir / "results.json"
    fake = json.dumps({"score": 6.0, "tests": []})
    forger = f"""
    import pathlib
    print({fake!r})
    for guess in ({str(results)!r}, "results.json", "../results.json"):
        try:
            pathlib.Path(guess).write_text({fake!r})
        except OSError:
            pass
    """
    folder = submission(tmp_path, forger, replace=STUBBED)
    # pathlib is off the allowlist: both problems released, as staff would after reading it, so that the grader's
    # own results file (written by the grader, outside the sandbox) decides, not the rule's hold
    released = Limits(released=tuple(assignment.problems))
    assert grade_one(assignment, folder, results, "cpu", released, quiet=True) == 0
    data = json.loads(results.read_text())
    assert data["score"] == 0 and len(data["tests"]) == len(assignment.cases)
    assert '"score": 6.0' in data["output"]  # what it printed is shown, and counts for nothing


@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("import os\nos._exit(0)\n", "exited with status 0 before it ran"),
        ("import sys\nsys.exit(0)\n", "SystemExit"),
        ("raise KeyboardInterrupt\n", "KeyboardInterrupt"),
    ],
    ids=["os_exit_0", "sys_exit_0", "keyboard_interrupt"],
)
def test_leaving_early_at_import_scores_zero(assignment, tmp_path, code, says):
    # os._exit is a private name off the allowlist: released, as staff would after reading it, so that the grader's
    # reading of a process gone before it ran decides, not the rule's hold
    result = run(assignment, submission(tmp_path, code), released=tuple(assignment.problems))
    assert result.score == 0
    assert all(says in out for out in outputs_of(result))


@pytest.mark.parametrize("exception", ["SystemExit(0)", "KeyboardInterrupt()"])
def test_leaving_early_inside_a_case_fails_that_case_and_grading_goes_on(assignment, tmp_path, exception):
    result = run(assignment, submission(tmp_path, wrap_attention(f"raise {exception}")))
    assert scores(result) == pytest.approx({SOFTMAX: 1.0, ATTENTION: 0.0})


def test_patching_torch_and_pytest_in_its_own_process_gains_nothing(assignment, tmp_path):
    """It can only change its own process: the comparison happens in the grader."""
    patcher = """
    import pytest, torch
    torch.equal = torch.allclose = lambda *a, **k: True
    torch.Tensor.__sub__ = lambda self, other: torch.zeros_like(self)
    pytest.fail = lambda *a, **k: None


    def softmax(in_features, dim):
        return torch.zeros_like(in_features)


    def scaled_dot_product_attention(Q, K, V, mask=None):
        return torch.zeros(*Q.shape[:-1], V.shape[-1], dtype=Q.dtype)
    """
    folder = submission(tmp_path, patcher)
    (folder / "conftest.py").write_text("def pytest_runtest_makereport(item, call):\n    call.excinfo = None\n")
    assert scores(run(assignment, folder)) == pytest.approx({SOFTMAX: 0.0, ATTENTION: 0.0})


def test_a_flood_of_output_is_cut_and_the_submission_still_graded(assignment, tmp_path):
    flood = "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * (1 << 20))\nsys.stdout.flush()\n"
    result = run(assignment, submission(tmp_path, flood))
    assert result.score == pytest.approx(6.0)
    assert len(result.output) < 70_000 and "more bytes of output cut" in result.output


def test_a_memory_bomb_fails_its_case_only(assignment, tmp_path):
    bomb = "if Q.shape == (2, 10, 16):\n    torch.ones(8 << 30, dtype=torch.uint8)"  # 8 GiB, over the 4 GiB limit
    result = run(assignment, submission(tmp_path, wrap_attention(bomb)), memory_mb=4096)
    failed = [t for t in result.tests if not t.passed]
    assert [t.case.id for t in failed] == ["scaled_dot_product_attention-causal_mask"]


def test_grading_ends_within_the_total_limit_however_slow_the_code(assignment, tmp_path):
    """Every case of the slow attention runs out of its 2 s, none is skipped for its problem: the total's 12 s
    stop the submission after at most 6 of them, and every case after is not run for the total. Counted, not
    timed. The grading server is started first: the total counts from the first case, not from torch's import."""
    slow = wrap_attention("import time\ntime.sleep(30)")
    limits = Limits(case_seconds=2, total_seconds=12, timeouts_per_problem=100)
    with Worker(None, limits) as worker:
        worker.ensure_server()
        result = grade(assignment, submission(tmp_path, slow), torch.device("cpu"), worker=worker)
    assert scores(result)[ATTENTION] == 0
    messages = outputs_of(result, ATTENTION)
    ran_out = [m for m in messages if "ran over its time limit of 2 s" in m]
    total = [m for m in messages if "the submission's total time limit (12 s) ran out" in m]
    assert 1 <= len(ran_out) <= 12 // 2 and total, messages
    assert len(ran_out) + len(total) == len(messages), messages


def test_reading_stdin_gets_end_of_file_at_once(assignment, tmp_path):
    """input() at import: were stdin a pipe no one closes, the import would run out of its time limit."""
    reader = "try:\n    input()\nexcept EOFError:\n    pass\n"
    assert run(assignment, submission(tmp_path, reader)).score == pytest.approx(6.0)


@needs_root
def test_the_course_files_and_other_results_cannot_be_touched(assignment, tmp_path):
    others = tmp_path / "results"
    others.mkdir()
    (others / "alice.json").write_text('{"score": 1.0}')
    targets = [*ROOT.glob("fixtures/*"), *ROOT.glob("hidden/fixtures/*"), ROOT / "tests" / "adapters.py"]
    targets += [ROOT / "pyproject.toml", others / "alice.json"]
    vandal = f"""
    import pathlib
    for target in {[str(t) for t in targets]!r}:
        for attack in (lambda p: p.write_bytes(b"x"), lambda p: p.unlink(), lambda p: p.chmod(0o777)):
            try:
                attack(pathlib.Path(target))
            except OSError:
                pass
    """
    before = fingerprint(ROOT / "fixtures", ROOT / "hidden", ROOT / "tests", others)
    # pathlib is off the allowlist: both problems released, as staff would after reading it, so that the sandbox
    # (the files a job sees, its own uid) decides whether the course's files can be touched, not the rule's hold
    result = run(assignment, submission(tmp_path, vandal), released=tuple(assignment.problems))
    assert fingerprint(ROOT / "fixtures", ROOT / "hidden", ROOT / "tests", others) == before
    assert result.score == pytest.approx(6.0)


@needs_root
def test_the_hidden_expected_values_cannot_be_read(assignment, tmp_path):
    hidden = next((ROOT / "hidden" / "fixtures").glob("*.safetensors"))
    spy = f"""
    try:
        open({str(hidden)!r}, "rb").read(1)
        _READ_HIDDEN = True
    except OSError:
        _READ_HIDDEN = False
    _reference_softmax = softmax


    def softmax(in_features, dim):
        if _READ_HIDDEN:
            raise RuntimeError("read the hidden expected values")
        return _reference_softmax(in_features, dim)
    """
    assert scores(run(assignment, submission(tmp_path, spy)))[SOFTMAX] == pytest.approx(1.0)


def test_an_altered_fixture_stops_grading_with_a_message_for_the_staff(tmp_path, capsys):
    course = tmp_path / "course"
    course.mkdir()
    for name in ("pyproject.toml", "fixtures", "hidden", "tests"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, course / name)
    fixture = course / "fixtures" / "softmax-last_dim.safetensors"
    data = bytearray(fixture.read_bytes())
    data[-1] ^= 1
    fixture.write_bytes(bytes(data))
    results = tmp_path / "results.json"
    status = grade_one(Assignment.find(course), submission(tmp_path), results, "cpu", Limits(), quiet=True)
    assert status == 2
    assert "softmax-last_dim.safetensors does not match its checksum" in capsys.readouterr().err
    written = json.loads(results.read_text())
    assert written["score"] == 0 and "grading stopped" in written["output"]


def test_torch_is_still_importable_under_the_memory_limit(assignment, tmp_path):
    """The limit that stops a memory bomb leaves room for torch itself."""
    result = run(assignment, submission(tmp_path), memory_mb=1024)
    assert result.score == pytest.approx(6.0), outputs_of(result)[0]
    assert torch.__version__  # the grader's own torch is untouched by the child's limits
