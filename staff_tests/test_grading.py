"""cs-basics grade on submissions that fail in every way a student's can: exact scores and messages."""

import io
import json
import os
import shutil
import subprocess
import sys
from fractions import Fraction

import pytest
import torch
from rich.console import Console

from cs_basics.harness.grading.pipeline.caseclock import CaseClock
from cs_basics.harness.grading.pipeline.grade import grade
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.worker import Worker
from cs_basics.harness.grading.writers.results import print_table, results_json

from .submissions import ROOT, STUBBED, outputs_of, run, scores, submission, wrap_attention

ATTENTION, SOFTMAX = "scaled_dot_product_attention", "softmax"


def test_the_reference_gets_full_marks_and_public_and_hidden_tests_are_listed(assignment, tmp_path):
    result = run(assignment, submission(tmp_path))
    assert scores(result) == pytest.approx({SOFTMAX: 1.0, ATTENTION: 5.0})
    assert all(t.passed for t in result.tests)
    assert {t.case.hidden for t in result.tests} == {True, False}


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        ({"def softmax(": "def softmax(:"}, "SyntaxError"),
        ({"import math\n": "import math\nimport numpyy\n"}, "ModuleNotFoundError: No module named 'numpyy'"),
        (STUBBED, "NotImplementedError"),
    ],
    ids=["syntax_error", "import_error", "stub"],
)
def test_code_that_does_not_import_or_run_scores_zero_and_says_why(assignment, tmp_path, edit, says):
    result = run(assignment, submission(tmp_path, replace=edit))
    assert result.score == 0
    assert all(says in out for out in outputs_of(result, SOFTMAX))


def test_attention_that_raises_loses_only_attention(assignment, tmp_path):
    result = run(assignment, submission(tmp_path, wrap_attention("raise RuntimeError('boom')")))
    assert scores(result) == pytest.approx({SOFTMAX: 1.0, ATTENTION: 0.0})
    assert all("your code raised RuntimeError: boom" in out for out in outputs_of(result, ATTENTION))


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("return _reference_attention(Q, K, V, mask), None", "not a tuple"),
        ("return _reference_attention(Q.double(), K.double(), V.double(), mask)", "dtype mismatch"),
        ("return _reference_attention(Q, K, V, mask)[..., :1, :]", "shape mismatch"),
    ],
    ids=["tuple", "dtype", "shape"],
)
def test_wrong_kind_of_output_fails_with_what_was_returned(assignment, tmp_path, body, says):
    result = run(assignment, submission(tmp_path, wrap_attention(body)))
    assert scores(result)[ATTENTION] < 1.0 and scores(result)[SOFTMAX] == pytest.approx(1.0)
    assert any(says in out for out in outputs_of(result, ATTENTION))


def test_an_endless_loop_fails_that_case_only(assignment, tmp_path):
    loop = "while Q.shape == (2, 10, 16):\n    pass"  # the 3D causal_mask case alone
    # a limit the other cases (milliseconds) meet with room on a loaded machine: only the loop runs out of it
    result = run(assignment, submission(tmp_path, wrap_attention(loop)), case_seconds=10)
    failed = [t for t in result.tests if not t.passed]
    assert [t.case.id for t in failed] == ["scaled_dot_product_attention-causal_mask"]
    assert "time limit of 10 s" in failed[0].output


def computes(seconds: float, condition: str, indent: str = "") -> str:
    """Code that computes (not sleeps: waiting is not charged) for `seconds` of CPU time where `condition`."""
    lines = ["import time", f"if {condition}:", "    start = time.process_time()"]
    lines += [f"    while time.process_time() - start < {seconds}:", "        pass"]
    return "\n".join(indent + line for line in lines) + "\n"


def test_a_problems_own_time_limit_is_honoured_and_the_others_keep_the_courses(assignment, tmp_path):
    """Attention declares 2 s a case: its 3D causal case, 4 s of computing, runs over it; softmax keeps the course's
    20 s, so its dim-0 case passes although it computes for 3 s (it would fail under attention's limit)."""
    problems = dict(assignment.table["problems"])
    problems[ATTENTION] = dict(problems[ATTENTION], case_seconds=2)
    course = type(assignment)(assignment.root, dict(assignment.table, case_seconds=20, problems=problems))
    slow = wrap_attention(computes(4, "Q.shape == (2, 10, 16)")) + (
        "\n_reference_softmax = softmax\n\n\ndef softmax(in_features, dim):\n"
        f"{computes(3, 'dim == 0', '    ')}    return _reference_softmax(in_features, dim)\n"
    )
    result = run(course, submission(tmp_path, slow), case_seconds=60)
    failed = [t for t in result.tests if not t.passed]
    assert [t.case.id for t in failed] == ["scaled_dot_product_attention-causal_mask"], [t.output for t in failed]
    assert failed[0].output.startswith("the case ran over its time limit of 2 s")


@pytest.mark.skipif(os.geteuid() != 0, reason="the wait for a core is read by the jobs' own uid: a root grader")
def test_a_case_is_not_charged_the_time_it_waited_for_a_core(assignment, tmp_path):
    """The grading runs on one core, with three busy processes on it from the first case on: attention's 3D causal
    case, 0.6 s of computing under a 2 s limit, takes 2.4 s of wall time or more (a quarter of the core at most)
    and passes, charged the time it had (caseclock.py); its 4D causal case sleeps 3 s and is stopped at 2 s, as a
    sleep is charged every second."""
    problems = dict(assignment.table["problems"])
    problems[ATTENTION] = dict(problems[ATTENTION], case_seconds=2)
    course = type(assignment)(assignment.root, dict(assignment.table, problems=problems))
    body = computes(0.6, "Q.shape == (2, 10, 16)") + "if Q.shape == (2, 3, 8, 16):\n    time.sleep(3)\n"
    folder = submission(tmp_path, wrap_attention(body))
    mine, core = os.sched_getaffinity(0), min(os.sched_getaffinity(0))
    busy: list[subprocess.Popen] = []
    os.sched_setaffinity(0, {core})  # this thread's: the grading server started from it, and its jobs, inherit it
    try:
        with Worker(None, Limits(threads=1)) as worker:
            worker.ensure_server()  # torch imported before the core is shared
            spin = [sys.executable, "-c", "while True:\n    pass\n"]  # on the same core (inherited)
            busy = [subprocess.Popen(spin, start_new_session=True) for _ in range(3)]  # autogroups: a share each
            result = grade(course, folder, torch.device("cpu"), worker=worker)
    finally:
        for process in busy:
            process.kill()
            process.wait()
        os.sched_setaffinity(0, mine)
    failed = {t.case.id: t.output for t in result.tests if not t.passed}
    assert list(failed) == ["4d_scaled_dot_product_attention-causal_mask"], failed
    slow = next(t for t in result.tests if t.case.id == "scaled_dot_product_attention-causal_mask")
    assert slow.seconds >= 2.0, slow.seconds  # the core was shared: over the limit in wall time
    assert failed["4d_scaled_dot_product_attention-causal_mask"] == (
        "the case ran over its time limit of 2 s (an endless loop?)"
    )


def test_killing_its_own_interpreter_fails_that_case_only(assignment, tmp_path):
    kill = "import os, signal\nif Q.shape == (2, 10, 16):\n    os.kill(os.getpid(), signal.SIGKILL)"
    # os.kill and signal are off the allowlist: released, as staff would after reading it, so that the grader's
    # recovery from a dead interpreter (a fresh process for the other cases) decides, not the rule's hold
    result = run(assignment, submission(tmp_path, wrap_attention(kill)), released=(ATTENTION,))
    failed = [t for t in result.tests if not t.passed]
    assert [t.case.id for t in failed] == ["scaled_dot_product_attention-causal_mask"]
    assert "killed by signal SIGKILL" in failed[0].output


def test_the_grader_stages_its_own_tooling_over_the_submissions(assignment, tmp_path):
    """A broken harness in the submission cannot stop its grading, and forbidden calls in the
    tooling (the bench calls torch's SDPA on purpose) are not the student's."""
    folder = submission(tmp_path)
    (folder / "cs_basics" / "harness" / "cases.py").write_text("raise ImportError('vandalised')\n")
    (folder / "cs_basics" / "study" / "extra.py").write_text("import torch\n\ntorch.softmax(torch.ones(2), 0)\n")
    result = run(assignment, folder)
    assert scores(result) == pytest.approx({SOFTMAX: 1.0, ATTENTION: 5.0})


def test_the_submissions_tests_and_config_are_never_used(assignment, tmp_path):
    """A stub whose own adapters, conftest and pyproject would pass everything still gets 0."""
    folder = submission(tmp_path, replace=STUBBED)
    (folder / "tests").mkdir()
    (folder / "tests" / "adapters.py").write_text(
        "import torch\n\ndef run_softmax(in_features, dim):\n    return torch.softmax(in_features, dim)\n"
    )
    (folder / "conftest.py").write_text("def pytest_runtest_makereport(item, call):\n    pass\n")
    (folder / "pyproject.toml").write_text('[tool.cs-basics]\ncases = "nothing"\n')
    assert run(assignment, folder).score == 0


def test_a_submission_without_the_package_scores_zero(assignment, tmp_path):
    (tmp_path / "empty").mkdir()
    result = run(assignment, tmp_path / "empty")
    assert result.score == 0
    assert "failed to import" in result.tests[0].output


def test_answers_looked_up_in_the_public_fixtures_miss_the_hidden_points(assignment, tmp_path):
    """The public fixtures ship with the handout, so a submission can carry them; the hidden ones it cannot
    reach (the sandbox shows no repository, and without namespaces the hidden folder is private to root)."""
    lookup = f"""
    import pathlib
    from safetensors.torch import load_file
    _answers = []
    _carried = pathlib.Path(__file__).parent / "answers"
    for _folder in (_carried, {str(ROOT / "fixtures")!r}, {str(ROOT / "hidden" / "fixtures")!r}):
        try:
            _answers += [load_file(str(p)) for p in pathlib.Path(_folder).glob("*.safetensors")]
        except OSError:
            pass


    def _look_up(name, x):
        for t in _answers:
            if name in t and t[name].shape == x.shape and torch.equal(t[name].to(x.dtype), x.detach().cpu()):
                return t["expected.out"].to(x.dtype)
        return torch.zeros(1)


    def softmax(in_features, dim):
        return _look_up("input.x", in_features)


    def scaled_dot_product_attention(Q, K, V, mask=None):
        return _look_up("input.Q", Q)
    """
    folder = submission(tmp_path, lookup)
    shutil.copytree(ROOT / "fixtures", folder / "cs_basics" / "nn" / "answers")
    # released: safetensors' load_file at import is library code running operators, which the watched import
    # holds for review; released, the look-up is graded as any code, and misses the hidden points
    result = run(assignment, folder, released=tuple(assignment.problems))
    public = sum(t.max_score for t in result.tests if not t.case.hidden)
    assert 0 < result.score < public + 1e-9 < assignment_total(assignment)
    assert not any(t.passed for t in result.tests if t.case.hidden)


def assignment_total(assignment):
    return sum(p.points for p in assignment.problems.values())


def test_results_file_has_gradescopes_fields_and_types(assignment, tmp_path):
    result = run(assignment, submission(tmp_path, wrap_attention("raise RuntimeError('boom')")))
    data = json.loads(json.dumps(results_json(result)))
    assert isinstance(data["score"], float) and isinstance(data["execution_time"], float)
    assert data["visibility"] in ("hidden", "after_due_date", "after_published", "visible")
    for test in data["tests"]:
        assert set(test) == {"name", "score", "max_score", "status", "output", "visibility", "tags"}
        assert isinstance(test["name"], str) and isinstance(test["output"], str)
        assert isinstance(test["score"], float) and isinstance(test["max_score"], float)
        assert test["status"] in ("passed", "failed") and test["tags"] in ([SOFTMAX], [ATTENTION])
        assert test["visibility"] == ("after_published" if "hidden" in test["name"] else "visible")
    assert data["score"] == pytest.approx(sum(t["score"] for t in data["tests"])) == pytest.approx(1.0)
    for problem, points in ((SOFTMAX, 1), (ATTENTION, 5)):  # 26 tests of 0.1923 or 0.1924: 5, not 4.999992
        max_scores = [t["max_score"] for t in data["tests"] if t["tags"] == [problem]]
        assert all(round(m, 4) == m for m in max_scores)
        assert sum(Fraction(str(m)) for m in max_scores) == points


def test_the_command_grades_this_checkout_and_exits_zero_for_any_score(tmp_path):
    results = tmp_path / "results.json"
    command = [sys.executable, "-m", "cs_basics.cli", "grade", "--results", str(results)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "total" in done.stdout and "6/6" in done.stdout
    assert json.loads(results.read_text())["score"] == pytest.approx(6.0)
    broken = submission(tmp_path, wrap_attention("raise RuntimeError('boom')"))
    done = subprocess.run(
        [*command, "--submission", str(broken)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(results.read_text())["score"] == pytest.approx(1.0)


def test_a_folder_of_submissions_is_graded_into_one_file_each_and_a_csv(tmp_path):
    folder = tmp_path / "submissions"
    submission(folder, name="alice")
    submission(folder, wrap_attention("raise RuntimeError('boom')"), name="bob")
    reaches_in = "_reference_softmax = softmax\n\n\ndef softmax(x, dim):\n    vars(torch)\n"
    reaches_in += "    return _reference_softmax(x, dim)\n"
    submission(folder, reaches_in, name="carol")  # held for review: softmax, and attention, which calls it
    out = tmp_path / "out"
    command = [sys.executable, "-m", "cs_basics.cli", "grade", "--submission", str(folder), "--results", str(out)]
    done = subprocess.run([*command, "--workers", "2"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = (out / "scores.csv").read_text().splitlines()
    header, *rows = lines
    assert header == "submission,score,max_score,held,error"
    assert rows == ["alice,6.0,6.0,,", "bob,1.0,6.0,,", "carol,0.0,6.0,softmax scaled_dot_product_attention,"]
    assert (
        "held for the staff's review (scores.csv's `held` column): carol (softmax scaled_dot_product_attention)"
        in done.stdout
    )
    assert json.loads((out / "bob.json").read_text())["score"] == pytest.approx(1.0)


def test_the_table_names_every_case_and_the_first_line_of_each_failure(assignment, tmp_path):
    """Case ids hold brackets (`test_softmax[last_dim]`) that rich would read as markup."""

    result = run(
        assignment, submission(tmp_path, wrap_attention("return _reference_attention(Q, K, V, mask)[..., :1, :]"))
    )
    out = io.StringIO()
    print_table(result, Console(file=out, width=200))
    text = out.getvalue()
    assert "test_softmax[last_dim]" in text and "(hidden)" in text
    failed = [t for t in result.tests if not t.passed and not t.case.hidden]
    assert failed and all(f"{t.case.test}[{t.case.param}]: {t.output.splitlines()[0]}" in text for t in failed)


def test_the_table_shows_the_diagnosis_and_no_hidden_case_offers_a_command_the_student_cannot_run(assignment, tmp_path):
    """Scores divided by d_k: the table gives the known mistake under each failure's first line, as results.json
    does; a hidden case's message says what the student can run instead of a test not in their copy."""
    result = run(assignment, submission(tmp_path, wrap_attention("Q = Q * Q.shape[-1] ** -0.5")))
    out = io.StringIO()
    print_table(result, Console(file=out, width=400))
    text = out.getvalue()
    failed = [t for t in result.tests if not t.passed]
    assert failed and any(t.case.hidden for t in failed)
    diagnosis = "This looks like: the scores are divided by d_k"
    shown = [t for t in failed if not t.case.hidden and diagnosis in t.output]
    assert shown and all(f"{t.case.test}[{t.case.param}]: {t.output.splitlines()[0]}" in text for t in shown)
    assert text.count(diagnosis) == len(shown), text
    for t in failed:
        assert ("uv run pytest -k" in t.output) != t.case.hidden, t.output
    assert all("is not in your copy" in t.output for t in failed if t.case.hidden)


class FakeWait:
    """The job's wait for a core, as a test sets it."""

    def __init__(self) -> None:
        self.seconds: float | None = 100.0

    def __call__(self) -> float | None:
        return self.seconds


@pytest.mark.parametrize(
    ("waits_per_second", "stopped_at", "kept_waiting"),
    [(0.0, 20.0, False), (0.5, 39.75, False), (0.9, 60.0, True), (2.0, 60.0, True), (None, 20.0, False)],
    ids=["had_a_core", "half_a_core", "a_tenth_of_a_core", "two_threads_waiting", "no_reading"],
)
def test_a_case_clock_stops_a_case_at_its_limit_of_time_had_or_at_three_times_it(
    waits_per_second, stopped_at, kept_waiting
):
    """Looked at as the grader does (each time the deadline it gave passes): a case that had its core is stopped
    at its limit, one given half a core once it had its limit (its first quarter second counted whole), one kept
    waiting at three times its limit; where the wait cannot be read, at its limit in wall time."""
    wait = FakeWait()
    clock = CaseClock(20.0, started=0.0, seconds_waiting=wait)
    now, deadline = 0.0, clock.first_look()
    assert deadline == 0.25
    for _ in range(1000):
        now = deadline
        wait.seconds = None if waits_per_second is None else 100.0 + waits_per_second * now
        later = clock.look(now)
        if later is None:
            break
        assert later > now
        deadline = later
    assert now == pytest.approx(stopped_at, abs=0.1) and clock.kept_waiting == kept_waiting
