"""Every platform a course grades on, from one grading: Gradescope, PrairieLearn, GitHub Classroom, JUnit XML.

One submission set (the reference, two known mistakes, a hostile one that floods its output with forged
text) is graded once per sandbox, each grading written in every format; each file is then read as its
platform reads it: PrairieLearn's grader host (apps/grader-host: the 1 MiB cap, then `makeGradingResult`:
NUL bytes replaced, `score` a number, `format_errors` a string or a list) and its reference schema
(docs/externalGrading.md), GitHub Classroom's grading reporter (src/notify-classroom.js adds the tests'
scores over the runners' `max_score`; src/helpers/test-helpers.js: its table counts passed tests), and
junitparser (PyPI) for JUnit XML. The same points everywhere, hidden cases hidden where the platform shows
everything, every file within its platform's size limit.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from junitparser import JUnitXml

from cs_basics.cli import main
from cs_basics.harness.cases import points_by_case
from cs_basics.harness.course import classroom as workflow
from cs_basics.harness.course import prairielearn as question
from cs_basics.harness.grading.command import grade_one
from cs_basics.harness.grading.pipeline.grade import Grade
from cs_basics.harness.grading.pipeline.grade import TestResult as CaseResult
from cs_basics.harness.grading.pipeline.upload import NotGradable, lay_out
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.worker import Worker
from cs_basics.harness.grading.writers import classroom
from cs_basics.harness.grading.writers.formats import WRITERS, FormatError, Output, detect, outputs_for

from .submissions import ROOT, fingerprint, submission
from .test_sandbox import SANDBOXES
from .test_what_students_see import hidden_numbers

STUDENTS = ROOT / "staff_tests" / "students"
MISTAKES = ("no_scale", "softmax_global_max")  # a scale left out; a softmax shifted by the tensor's global max
SECRET = "HIDDEN-CASE-SECRET"
# Floods what it prints (about 1.5 MB a call) with text forged for each format and for the terminal: JSON that
# closes the results early, XML that closes the failure, a line of GitHub's outputs file, a workflow command,
# escapes, a NUL, four-byte characters. Its hidden softmax case prints and raises a secret with its input.
FORGED = (
    '"}], "score": 1.0, "gradable": true}</failure></testcase><testcase name="forged"/>'
    "\nsoftmax=eyJ2ZXJzaW9uIjogMX0=\n::notice title=Autograding complete::Points 6/6\n\x1b[2J\x00\x07\U0001f600"
)
HOSTILE = f"""
_reference_softmax, _reference_attention = softmax, scaled_dot_product_attention
_FORGED = {FORGED!r}


def softmax(in_features, dim):
    print(_FORGED * 8000, flush=True)
    if in_features.requires_grad and dim == 0:  # only a hidden case
        print({SECRET!r}, repr(in_features.flatten()[0].item()), flush=True)
        raise ValueError({SECRET!r} + repr(in_features.flatten()[0].item()) + _FORGED * 4000)
    return _reference_softmax(in_features, dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    if mask is not None and Q.dim() == 3:
        raise ValueError(_FORGED * 20000)
    return _reference_attention(Q, K, V, mask)
"""
FILES = {"gradescope": "results.json", "prairielearn": "pl.json", "junit": "junit.xml", "github-classroom": "gh.txt"}
PL_LIMIT = 1 << 20  # apps/grader-host: "The grading results were larger than 1MB"
ENV_LIMIT = 128 << 10  # Linux's MAX_ARG_STRLEN: one environment variable of the reporter's process


def submission_set(tmp: Path) -> dict[str, Path]:
    found = {"reference": submission(tmp, name="reference"), "hostile": submission(tmp, HOSTILE, name="hostile")}
    return found | {name: STUDENTS / name for name in MISTAKES}


@pytest.fixture(scope="module", params=SANDBOXES)
def graded(request, assignment, tmp_path_factory):
    """Each submission of the set graded once in this sandbox, written in every format: {name: folder}."""
    tmp = tmp_path_factory.mktemp(f"platforms-{request.param}")
    folders = {}
    with Worker(request.param, Limits(case_seconds=20)) as worker:
        for name, folder in submission_set(tmp).items():
            out = tmp / "out" / name
            outputs = [Output(WRITERS[f], out / file) for f, file in FILES.items()]
            status = grade_one(assignment, folder, outputs, "cpu", worker.limits, quiet=True, worker=worker)
            assert status == 0, name
            folders[name] = out
    return folders


# ---------------------------------------------------------------- each platform's own reading


def prairielearn_reads(raw: bytes) -> dict:
    """results.json as PrairieLearn's grader host and makeGradingResult read it; fails where they fail the job."""
    assert len(raw) <= PL_LIMIT, f"{len(raw)} bytes: over PrairieLearn's 1 MiB"
    data = json.loads(raw.decode("utf-8").replace("\0", "\ufffd"))
    score = data.get("score")
    assert isinstance(score, int | float) and 0 <= score <= 1, f"score {score!r} is no number in [0, 1]"
    errors = data.get("format_errors", [])
    assert isinstance(errors, str | list)
    return data


def reporter_reads(text: str) -> dict[str, dict]:
    """The step's outputs as Actions passes them to the reporter: <ID>_RESULTS, base64 of the runner's JSON."""
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition("=")
        assert len(value.encode()) < ENV_LIMIT, f"{name}: {len(value)} bytes, over one variable's limit"
        found[name] = json.loads(base64.b64decode(value))
    return found


def reporter_table(data: dict) -> float:
    """The reporter's table (getTestScore): passed tests over all of them, times max_score."""
    passed = sum(1 for t in data["tests"] if t["status"] == "pass")
    return passed / len(data["tests"]) * data["max_score"]


def case_points(suite) -> dict[str, tuple[float, float]]:
    """Each case's (points, max_points) from the suite's properties (`points <case>` = `points/most`): the schemas
    readers validate with allow no properties inside a testcase."""
    found = {}
    for p in suite.properties():
        if p.name.startswith("points "):
            got, most = p.value.split("/")
            found[p.name.removeprefix("points ")] = (float(got), float(most))
    return found


def junit_points(path: Path) -> dict[str, tuple[float, float, str]]:
    """{(name): (points, max_points, result)} as junitparser reads the file."""
    found = {}
    for suite in JUnitXml.fromfile(str(path)):
        points = case_points(suite)
        for case in suite:
            result = "skipped" if case.is_skipped else "passed" if case.is_passed else "failed"
            found[case.name] = (*points[case.name], result)
    return found


def public_points(assignment, results: dict) -> float:
    """GitHub Classroom's points from Gradescope's file: each problem's full points shared over its public cases."""
    public = [c for c in assignment.cases if not c.hidden]
    shares = points_by_case(public, {n: p.points for n, p in assignment.problems.items()})
    status = {t["name"]: t["status"] for t in results["tests"]}
    return round(sum(shares[c.id] for c in public if status[f"{c.test}[{c.param}]"] == "passed"), 4)


# ---------------------------------------------------------------- one grading, every platform


def test_one_grading_gives_every_platform_the_same_points(assignment, graded):
    full = sum(p.points for p in assignment.problems.values())
    for name, out in graded.items():
        results = json.loads((out / "results.json").read_text())
        points = results["score"]
        pl = prairielearn_reads((out / "pl.json").read_bytes())
        assert pl["score"] * sum(t["max_points"] for t in pl["tests"]) == pytest.approx(points, abs=1e-5), name
        junit = junit_points(out / "junit.xml")
        assert sum(p for p, _, _ in junit.values()) == pytest.approx(points, abs=1e-6), name
        runners = reporter_reads((out / "gh.txt").read_text())
        notified = classroom.reporter_total(runners)
        assert notified == public_points(assignment, results), name  # exactly: the reporter's float sum
        if name == "reference":
            assert points == notified == full
        else:
            assert 0 < points < full and notified < full, f"{name} should lose points: {points}"


def test_prairielearn_file_is_read_as_its_grader_host_reads_it(assignment, graded):
    hidden = [c for c in assignment.cases if c.hidden]
    numbers = [n for values in hidden_numbers(assignment).values() for n in values]
    for name, out in graded.items():
        raw = (out / "pl.json").read_bytes()
        data = prairielearn_reads(raw)
        most = sum(t["max_points"] for t in data["tests"])
        assert data["gradable"] is True and most == pytest.approx(sum(p.points for p in assignment.problems.values()))
        assert sum(t["points"] for t in data["tests"]) == pytest.approx(data["score"] * most, abs=1e-5)
        for test in data["tests"]:
            assert set(test) == {"name", "description", "points", "max_points", "message"}, test
            assert 0 <= test["points"] <= test["max_points"]
        text = raw.decode()
        assert SECRET not in text and not any(n in text for n in numbers), f"{name}: a hidden case's text is shown"
        by_name = {t["name"]: t for t in data["tests"]}
        assert {by_name[f"{c.test}[{c.param}]"]["message"] for c in hidden} <= {
            "hidden case: passed",
            "hidden case: failed",
        }
    hostile = json.loads((graded["hostile"] / "results.json").read_text())
    assert SECRET in json.dumps(hostile)  # Gradescope's hidden entry holds it: the check above can fail
    # the flood reached the file, cut (its control characters now take two bytes, `^[`, where JSON took six)
    assert len((graded["hostile"] / "pl.json").read_bytes()) > 150_000


def test_junit_reads_back_to_the_counts_and_points_of_results_json(graded):
    for name, out in graded.items():
        results = json.loads((out / "results.json").read_text())
        junit = junit_points(out / "junit.xml")
        xml = JUnitXml.fromfile(str(out / "junit.xml"))
        assert xml.tests == len(results["tests"]) == len(junit), name
        failed = [t for t in results["tests"] if t["status"] == "failed"]
        assert xml.failures + xml.skipped == len(failed), name
        for test in results["tests"]:
            points, most, result = junit[test["name"]]
            assert (points, most) == (test["score"], test["max_score"]), test["name"]
            assert result == ("passed" if test["status"] == "passed" else result), test["name"]
        raw = (out / "junit.xml").read_bytes()
        assert SECRET.encode() not in raw and b"\x1b" not in raw and b"\x00" not in raw, name
    # a public failure carries the message pytest and Gradescope give (its first line as the failure's message)
    results = json.loads((graded["no_scale"] / "results.json").read_text())
    first = next(t for t in results["tests"] if t["status"] == "failed" and "hidden" not in t["name"])
    for suite in JUnitXml.fromfile(str(graded["no_scale"] / "junit.xml")):
        case = next(c for c in suite if c.name == first["name"])
        assert case.result[0].message == first["output"].splitlines()[0]
        assert case.result[0].text == first["output"]


def test_classroom_outputs_are_what_the_reporter_reads(assignment, graded):
    for name, out in graded.items():
        runners = reporter_reads((out / "gh.txt").read_text())
        assert list(runners) == list(assignment.problems), name
        for problem, data in runners.items():
            assert data["version"] == 1 and data["status"] in ("pass", "fail")
            assert data["max_score"] == assignment.problems[problem].points
            assert not any("hidden" in t["name"] for t in data["tests"])  # public cases only
            for test in data["tests"]:
                assert {"name", "status", "score", "message", "test_code", "filename", "line_no"} <= set(test)
                assert test["status"] in ("pass", "fail") and (test["score"] > 0) == (test["status"] == "pass")
            # the reporter's table counts passes: the same points where a problem's cases weigh the same
            assert reporter_table(data) == pytest.approx(sum(t["score"] for t in data["tests"]), abs=1e-3)
            assert (data["status"] == "pass") == all(t["status"] == "pass" for t in data["tests"])
        assert SECRET not in (out / "gh.txt").read_text()


# ---------------------------------------------------------------- PrairieLearn: the question and its entrypoint


def lay_out_grade(tmp: Path, built: Path, files: dict[str, bytes]) -> Path:
    """/grade as PrairieLearn lays it out for a job: student/, tests/, serverFilesCourse/, data/data.json."""
    grade = tmp / "grade"
    shutil.copytree(built / "serverFilesCourse", grade / "serverFilesCourse")
    shutil.copytree(next((built / "questions").iterdir()) / "tests", grade / "tests")
    (grade / "student").mkdir()
    (grade / "data").mkdir()
    (grade / "data" / "data.json").write_text(json.dumps({"submitted_answers": {}, "gradable": True}))
    for name, data in files.items():
        (grade / "student" / name).write_bytes(data)
    tmp.chmod(0o755)  # as root the grader's child runs under a uid of its own, which must reach the grader
    return grade


def run_entrypoint(grade: Path, entrypoint: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "CS_BASICS", "GITHUB"))}
    env |= {"CS_BASICS_GRADE_ROOT": str(grade), "CS_BASICS_PYTHON": sys.executable}
    script = grade / entrypoint.removeprefix("/grade/")
    script.chmod(0o755)  # PrairieLearn's grader host makes the entrypoint executable before it runs it
    return subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("prairielearn") / "course"
    assert main(["autograder", "--platform", "prairielearn", str(out), "--image", "course/grader:1"]) == 0
    return out


def test_prairielearn_question_grades_an_upload_in_a_laid_out_grade_folder(assignment, built, tmp_path):
    info = json.loads(next((built / "questions").iterdir()).joinpath("info.json").read_text())
    options = info["externalGradingOptions"]
    assert info["gradingMethod"] == "External" and options["enabled"] and options["enableNetworking"] is False
    assert options["image"] == "course/grader:1" and 0 < options["timeout"] <= 600
    assert options["entrypoint"] == f"/grade/serverFilesCourse/{question.GRADER}/run.sh"
    html = next((built / "questions").iterdir()).joinpath("question.html").read_text()
    assert '<pl-file-upload file-names="functional.py">' in html and "<pl-external-grader-results>" in html
    dockerfile = (built / "Dockerfile").read_text()
    assert (
        "uv sync --frozen --no-dev" in dockerfile and "bubblewrap" in dockerfile and "--compile-bytecode" in dockerfile
    )
    assert "python3 " in dockerfile and "UV_PYTHON_DOWNLOADS=never" in dockerfile  # the machine's Python
    # built where only Debian's archive and PyPI are reachable: no image but the base one; for PrairieLearn's amd64
    assert [line for line in dockerfile.splitlines() if "FROM" in line] == ["FROM debian:bookworm-slim"], dockerfile
    assert "docker build --platform linux/amd64 -t course/grader:1 ." in (built / "README.md").read_text()
    assert (built / "serverFilesCourse" / question.GRADER / "hidden").is_dir()
    assert not list((built / "questions").rglob("*.safetensors"))  # no case files where students' files are

    upload = (STUDENTS / "no_scale" / "cs_basics" / "nn" / "functional.py").read_bytes()
    grade = lay_out_grade(tmp_path, built, {"functional.py": upload})
    done = run_entrypoint(grade, options["entrypoint"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.splitlines()[0].startswith("cs-basics grade: writing prairielearn (PrairieLearn) to ")
    data = prairielearn_reads((grade / "results" / "results.json").read_bytes())
    most = sum(t["max_points"] for t in data["tests"])
    points = sum(t["points"] for t in data["tests"])
    assert data["gradable"] and 0 < points < most and data["score"] == pytest.approx(points / most, abs=1e-6)
    assert not any(n in json.dumps(data) for v in hidden_numbers(assignment).values() for n in v)


def test_prairielearn_marks_a_submission_with_nothing_to_grade_not_gradable(built, tmp_path):
    named = "no file was submitted"
    grade = lay_out_grade(tmp_path, built, {})
    done = run_entrypoint(grade, f"/grade/serverFilesCourse/{question.GRADER}/run.sh")
    assert done.returncode == 0, done.stderr[-3000:]  # PrairieLearn reads the file only after a 0
    assert named in done.stderr
    data = prairielearn_reads((grade / "results" / "results.json").read_bytes())
    assert data["gradable"] is False and any(named in e for e in data["format_errors"])


def test_an_upload_is_laid_out_as_a_submission_and_a_missing_file_is_named(assignment, tmp_path):
    upload = tmp_path / "upload"
    upload.mkdir()
    (upload / "notes.txt").write_text("my answer is in functionl.py")
    with pytest.raises(NotGradable, match=r"functional.py was not submitted \(the submission holds notes.txt\)"):
        lay_out(assignment, upload, tmp_path / "laid")
    assert not (tmp_path / "laid").exists()
    (upload / "functional.py").write_bytes(b"def softmax(x):\n    return x\x00\x01")
    with pytest.raises(NotGradable, match=r"functional\.py is not Python source: byte 28 is a NUL byte"):
        lay_out(assignment, upload, tmp_path / "laid")
    (upload / "functional.py").write_bytes(b"# caf\xe9\n")
    with pytest.raises(NotGradable, match=r"functional\.py is not Python source: byte 5 is not UTF-8 text"):
        lay_out(assignment, upload, tmp_path / "laid")
    (upload / "functional.py").write_text("# mine\n")
    laid = lay_out(assignment, upload, tmp_path / "laid")
    assert (laid / "cs_basics" / "nn" / "functional.py").read_text() == "# mine\n"
    assert (laid / "cs_basics" / "nn" / "__init__.py").read_bytes() == (ROOT / "cs_basics/nn/__init__.py").read_bytes()
    assert lay_out(assignment, laid, tmp_path / "again") == laid  # a cs_basics package is graded as it is


# ---------------------------------------------------------------- GitHub Classroom: the workflow's grading step


def test_the_handout_workflow_grades_as_actions_runs_its_step(assignment, tmp_path):
    flow = yaml.safe_load(workflow.workflow(assignment))
    steps = flow["jobs"]["run-autograding-tests"]["steps"]
    assert [s.get("uses", "").split("@")[0] for s in steps[:2]] == ["actions/checkout", "astral-sh/setup-uv"]
    grading = next(s for s in steps if s.get("id") == workflow.GRADE_STEP)
    reporter = steps[-1]
    assert reporter["uses"] == workflow.REPORTER
    runners = reporter["with"]["runners"].split(",")
    assert runners == list(assignment.problems)
    assert reporter["env"] == {
        f"{r.upper()}_RESULTS": f"${{{{ steps.{workflow.GRADE_STEP}.outputs.{r} }}}}" for r in runners
    }
    # the step as the runner runs it: bash, in the checkout, Actions' variables and the step's own env
    output = tmp_path / "github_output"
    output.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_PROJECT", "CS_BASICS"))}
    env |= {"GITHUB_ACTIONS": "true", "CI": "true", "GITHUB_OUTPUT": str(output), "GITHUB_WORKSPACE": str(ROOT)}
    env |= {"GITHUB_WORKFLOW": flow["name"]}
    env |= {"RUNNER_TEMP": str(tmp_path), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"), **grading["env"]}
    done = subprocess.run(
        ["bash", "-e", "-c", grading["run"]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    first = done.stdout.splitlines()[0]
    assert f"github-classroom (GitHub Classroom) to {output}" in first and classroom.CAVEAT in first
    found = reporter_reads(output.read_text())
    assert list(found) == runners  # each runner's variable the reporter reads is set
    assert classroom.reporter_total(found) == sum(p.points for p in assignment.problems.values())


# ---------------------------------------------------------------- bad input


def test_formats_and_platforms_found_in_the_environment(tmp_path):
    assert detect({}) is None or detect({}).format != "github-classroom"
    (tmp_path / "grade" / "student").mkdir(parents=True)
    found = detect({"CS_BASICS_GRADE_ROOT": str(tmp_path / "grade")})
    assert (found.format, found.results) == ("prairielearn", tmp_path / "grade" / "results" / "results.json")
    (tmp_path / "ag" / "submission").mkdir(parents=True)
    env = {"CS_BASICS_GRADE_ROOT": str(tmp_path / "none"), "AUTOGRADER_ROOT": str(tmp_path / "ag")}
    assert detect(env).results == tmp_path / "ag" / "results" / "results.json"
    env = {"CS_BASICS_GRADE_ROOT": str(tmp_path / "none"), "AUTOGRADER_ROOT": str(tmp_path / "none")}
    actions = env | {"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(tmp_path / "o")}
    outputs, _ = outputs_for([], None, actions | {"GITHUB_WORKFLOW": classroom.WORKFLOW_NAME})
    assert [(o.writer.name, o.path) for o in outputs] == [("github-classroom", tmp_path / "o")]
    outputs, _ = outputs_for([], None, actions | {"GITHUB_WORKFLOW": "CI"})  # the course's own CI on GitHub
    assert [(o.writer.name, o.path) for o in outputs] == [("gradescope", Path("results.json"))]
    outputs, _ = outputs_for(["github-classroom"], None, actions | {"GITHUB_WORKFLOW": "CI"})
    assert [(o.writer.name, o.path) for o in outputs] == [("github-classroom", tmp_path / "o")]
    outputs, _ = outputs_for(["junit", "gradescope"], tmp_path / "r.json", env)
    assert [(o.writer.name, o.path) for o in outputs] == [
        ("junit", Path("junit.xml")),
        ("gradescope", tmp_path / "r.json"),
    ]
    with pytest.raises(FormatError, match="GITHUB_OUTPUT is not set"):
        outputs_for([], None, env | {"GITHUB_ACTIONS": "true", "GITHUB_WORKFLOW": classroom.WORKFLOW_NAME})
    with pytest.raises(FormatError, match=r"\$GITHUB_OUTPUT, which is not set"):
        outputs_for(["github-classroom"], None, env)
    with pytest.raises(FormatError, match="unknown format 'canvas'"):
        outputs_for(["canvas"], None, env)
    with pytest.raises(FormatError, match="the same file"):
        outputs_for(["junit=x", "prairielearn=x"], None, env)


def test_bad_input_is_named_and_nothing_is_written(assignment, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKFLOW", classroom.WORKFLOW_NAME)
    assert main(["grade", "--project", str(ROOT)]) == 2
    assert "GITHUB_OUTPUT is not set" in capsys.readouterr().err
    assert main(["grade", "--project", str(ROOT), "--format", "junit=", "--format", "gradescope"]) == 2
    assert "no path after '='" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "course").mkdir()
    (tmp_path / "course" / "kept").write_text("mine")
    assert main(["autograder", "--platform", "prairielearn", str(tmp_path / "course"), "--project", str(ROOT)]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "course").iterdir()] == ["kept"]


def test_a_bad_hidden_summary_stops_grading_before_student_code_runs(assignment, tmp_path):
    course = type(assignment)(assignment.root, dict(assignment.table, hidden_summary="all"))
    before = fingerprint(ROOT / "hidden", ROOT / "fixtures")
    outputs = [Output(WRITERS["prairielearn"], tmp_path / "pl.json"), Output(WRITERS["junit"], tmp_path / "j.xml")]
    status = grade_one(course, submission(tmp_path), outputs, "cpu", Limits(), quiet=True, sandbox="fallback")
    assert status == 2
    data = prairielearn_reads((tmp_path / "pl.json").read_bytes())
    assert "hidden_summary = 'all'" in data["message"] and data["score"] == 0
    assert "hidden_summary" in (tmp_path / "j.xml").read_text()
    assert fingerprint(ROOT / "hidden", ROOT / "fixtures") == before


def test_every_file_stays_within_its_platform_limit_whatever_the_text(assignment):
    """Written without grading: a grade whose every message and output is a flood of what escapes longest."""
    flood = ("\x00\x1b\ud800\U0001f600" * 100_000) + "end"
    tests = [CaseResult(c, assignment.points[c.id], False, flood, printed=flood) for c in assignment.cases]
    grade = Grade(tests, 1.0, output=flood, notes=[flood])
    raw = WRITERS["prairielearn"].write_grade(grade, assignment).encode()
    assert prairielearn_reads(raw)["tests"] and len(raw) > PL_LIMIT // 2
    reporter_reads(WRITERS["github-classroom"].write_grade(grade, assignment))
    tests[0].output = "not run: your function did not return on cases a and b"  # a case never run: skipped
    xml = WRITERS["junit"].write_grade(grade, assignment)
    read = JUnitXml.fromstring(xml.encode())
    assert len(xml.encode()) < 4 * PL_LIMIT and read.tests == len(tests)
    assert read.skipped == 1 and read.failures == len(tests) - 1


def test_the_course_may_fold_hidden_cases_into_one_line(assignment):
    course = type(assignment)(assignment.root, dict(assignment.table, hidden_summary="one_line"))
    tests = [CaseResult(c, assignment.points[c.id], c.id.endswith("grad_dim_0"), "why") for c in assignment.cases]
    grade = Grade(tests, 1.0)
    hidden = [t for t in tests if t.case.hidden]
    data = prairielearn_reads(WRITERS["prairielearn"].write_grade(grade, course).encode())
    folded = [t for t in data["tests"] if t["name"] == "hidden cases"]
    assert len(data["tests"]) == len(tests) - len(hidden) + 1 and len(folded) == 1
    assert folded[0]["points"] == pytest.approx(sum(t.score for t in hidden))
    assert folded[0]["message"] == f"1 of {len(hidden)} hidden cases passed"
    assert sum(t["points"] for t in data["tests"]) == pytest.approx(grade.score)
    assert not any(f"{t.case.test}[{t.case.param}]" in json.dumps(data) for t in hidden)
    xml = JUnitXml.fromstring(WRITERS["junit"].write_grade(grade, course).encode())
    assert xml.tests == len(tests) - len(hidden) + 1


# ---------------------------------------------------------------- what a hostile submission tries (review)


def hidden_and_public(assignment, seconds: float = 0.25):
    """A grade whose every case failed after `seconds`, each with its own message."""
    tests = [
        CaseResult(c, assignment.points[c.id], False, f"message of {c.id}", seconds=seconds) for c in assignment.cases
    ]
    return Grade(tests, 100.0), [t for t in tests if t.case.hidden]


def test_junit_shows_no_time_a_hidden_case_took(assignment):
    """A hidden case's seconds are what it computed: sleeping for an input's value would print it in `time`."""
    grade, hidden = hidden_and_public(assignment)
    hidden[0].seconds = 12.345  # as if it slept for its first input's value
    grade.execution_time = 99.875
    xml = WRITERS["junit"].write_grade(grade, assignment)
    assert "12.345" not in xml and "99.875" not in xml
    read = JUnitXml.fromstring(xml.encode())
    public = sum(1 for c in assignment.cases if not c.hidden)
    for suite in read:
        assert float(suite.time) == pytest.approx(0.25 * public, abs=1e-3)  # the public cases' seconds only
        for case in suite:
            shown = next(c for c in assignment.cases if f"{c.test}[{c.param}]" == case.name)
            assert float(case.time) == (0.0 if shown.hidden else 0.25)


def test_an_output_that_cannot_be_written_is_named_before_anything_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("kept")
    (tmp_path / "read_only").mkdir(mode=0o555)
    for bad in ("a_file/pl.json", "a_file/deeper/pl.json"):
        args = ["grade", "--project", str(ROOT), "--format", "junit=j.xml", "--format", f"prairielearn={bad}"]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "a_file is not a folder" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "read_only"]
    assert (tmp_path / "a_file").read_text() == "kept"
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path).name != "read_only")  # root may write anywhere
    with pytest.raises(FormatError, match="read_only: cannot write there"):
        outputs_for([f"junit={tmp_path / 'read_only' / 'j.xml'}"], None, {})


@pytest.mark.parametrize("gradable", [True, False])
def test_prairielearn_entrypoint_passes_status_1_only_for_nothing_to_grade(tmp_path, gradable):
    """Python exits 1 on any uncaught exception too: a grader crash must fail the job for the staff, not give the
    student the placeholder's 0 (PrairieLearn reads results.json after a 0 and records its score)."""
    grade = tmp_path / "grade"
    (grade / "results").mkdir(parents=True)
    results = {"gradable": gradable, "score": 0.0, "message": "grading did not finish", "tests": []}
    fake = tmp_path / "python"  # writes what grading writes (the placeholder, or nothing to grade), then exits 1
    fake.write_text(
        f"#!/bin/sh\ncat > \"$CS_BASICS_GRADE_ROOT/results/results.json\" <<'EOF'\n{json.dumps(results)}\nEOF\nexit 1\n"
    )
    fake.chmod(0o755)
    script = tmp_path / "run.sh"
    script.write_text(question.RUN)
    script.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "CS_BASICS_GRADE_ROOT": str(grade), "CS_BASICS_PYTHON": str(fake)}
    done = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == (1 if gradable else 0), done.stderr


def test_prairielearn_shows_a_hidden_case_by_its_name_only(assignment):
    """A case's description is the staff's text about its inputs ("a 3x7 mask with one row all False"): Gradescope
    writes none, and PrairieLearn shows every field at once."""
    import dataclasses

    cases = [dataclasses.replace(c, description=f"inputs of {c.id}") if c.hidden else c for c in assignment.cases]
    tests = [CaseResult(c, assignment.points[c.id], True, "passed") for c in cases]
    data = WRITERS["prairielearn"].write_grade(Grade(tests, 1.0), assignment)
    assert "inputs of" not in data


def test_a_platform_folder_on_a_staff_machine_does_not_take_another_submissions_grade(tmp_path):
    """/grade/student on the staff's machine (a PrairieLearn image used to grade by hand): `--submission ~/alice`
    writes Gradescope's results.json as it always did, not PrairieLearn's file into /grade/results."""
    (tmp_path / "grade" / "student").mkdir(parents=True)
    (tmp_path / "alice").mkdir()
    env = {"CS_BASICS_GRADE_ROOT": str(tmp_path / "grade"), "AUTOGRADER_ROOT": str(tmp_path / "none")}
    outputs, platform = outputs_for([], None, env, submission=tmp_path / "alice")
    assert platform is None and [(o.writer.name, o.path) for o in outputs] == [("gradescope", Path("results.json"))]
    outputs, platform = outputs_for([], None, env, submission=tmp_path / "grade" / "student")
    assert [(o.writer.name, o.path) for o in outputs] == [("prairielearn", tmp_path / "grade/results/results.json")]
    outputs, _ = outputs_for(["prairielearn"], None, env, submission=tmp_path / "alice")
    assert [o.path for o in outputs] == [Path("prairielearn-results.json")]


def test_junit_points_are_results_json_points_to_the_same_digits(assignment):
    """A course of 100 points over 7 cases: 14.285714 each in results.json, not 14.2857 (`:g` keeps 6 digits)."""
    grade = Grade([CaseResult(c, 100 / 7, True, "passed") for c in assignment.cases], 1.0)
    scores = [t["score"] for t in json.loads(WRITERS["gradescope"].write_grade(grade, assignment))["tests"]]
    read = JUnitXml.fromstring(WRITERS["junit"].write_grade(grade, assignment).encode())
    shown = [case_points(suite)[case.name][0] for suite in read for case in suite]
    assert shown == scores  # hidden_summary "each": every case, in order
    suite_points = next(float(p.value) for suite in read for p in suite.properties() if p.name == "points")
    assert suite_points == json.loads(WRITERS["gradescope"].write_grade(grade, assignment))["score"]


def test_a_held_problem_is_0_on_every_platform_and_each_says_it_is_held(assignment):
    """The from-scratch rule's hold: 0 for now everywhere (as on Gradescope), and where a platform has no
    extra_data for the staff, its file says which problems wait for their review."""
    from cs_basics.harness.rule.fromscratch import HELD, hold_message

    held = "softmax"
    message = hold_message(held, ["sys.modules"])
    tests = [CaseResult(c, assignment.points[c.id], c.problem != held, "passed") for c in assignment.cases]
    for t in tests:
        t.output = message if t.case.problem == held else "passed"
    grade = Grade(tests, 1.0, held=[held])
    gradescope = json.loads(WRITERS["gradescope"].write_grade(grade, assignment))
    pl = prairielearn_reads(WRITERS["prairielearn"].write_grade(grade, assignment).encode())
    assert pl["score"] * sum(t["max_points"] for t in pl["tests"]) == pytest.approx(gradescope["score"], abs=1e-5)
    assert HELD in pl["message"] and held in pl["message"]
    read = JUnitXml.fromstring(WRITERS["junit"].write_grade(grade, assignment).encode())
    assert {p.name: p.value for suite in read for p in suite.properties()}.get("held") == held
    runners = reporter_reads(WRITERS["github-classroom"].write_grade(grade, assignment))
    assert sum(t["score"] for t in runners[held]["tests"]) == 0
    assert all(HELD in t["message"] for t in runners[held]["tests"])


def test_a_problem_of_many_public_cases_still_fits_one_environment_variable(assignment):
    """Each test's message had at least 256 bytes: 400 failing cases of one problem made a runner of 216 KB of
    base64, which Linux refuses to pass to the reporter's process (the whole Classroom grade lost)."""
    import dataclasses

    case = next(c for c in assignment.cases if not c.hidden and c.problem == "softmax")
    rows = [(dataclasses.replace(case, param=f"shape{i}"), False, "x" * 100_000, 1.0) for i in range(400)]
    found = reporter_reads(classroom.encoded(classroom.runners(rows, {"softmax": 1.0})))
    assert len(found["softmax"]["tests"]) == 400


@pytest.mark.parametrize("pad", [20, 57, 64, 93])
def test_no_line_a_submission_writes_in_the_log_starts_a_workflow_command(assignment, pad):
    """GitHub's runner reads `::command::` at the start of any line of a step's log (spaces aside): the table's
    line of a failed case, wrapped at the console's width, must not let the message start one."""
    import io

    from rich.console import Console

    from cs_basics.harness.grading.writers.results import print_table

    forged = "ValueError: " + "x" * pad + " ::error title=Autograding complete::Points 6/6"
    grade = Grade([CaseResult(c, assignment.points[c.id], False, forged) for c in assignment.cases], 1.0)
    console = Console(file=io.StringIO(), width=100)  # as grade_one's console where stdout is no terminal
    print_table(grade, console)
    assert not [line for line in console.file.getvalue().splitlines() if line.lstrip().startswith("::")]


def test_a_submission_path_that_does_not_exist_is_the_staffs_error_and_nothing_is_written(tmp_path, capsys):
    """No platform hands over a missing folder: `--submission ~/alcie` is a typo, not a student's empty upload."""
    missing = tmp_path / "alcie"
    args = ["grade", "--project", str(ROOT), "--submission", str(missing), "--format", f"junit={tmp_path / 'j.xml'}"]
    assert main(args) == 2
    assert f"--submission {missing}: no such file or folder" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def failing(assignment, messages: dict[str, str]) -> Grade:
    """A grade where the cases in `messages` failed with those messages, and every other case passed."""
    return Grade(
        [
            CaseResult(c, assignment.points[c.id], c.id not in messages, messages.get(c.id, "passed"))
            for c in assignment.cases
        ],
        1.0,
    )


def prairielearn_messages(grade: Grade, assignment) -> dict[str, str]:
    """Each test's message in PrairieLearn's results, as its reader takes them."""
    written = WRITERS["prairielearn"].write_grade(grade, assignment).encode()
    return {t["name"]: t["message"] for t in prairielearn_reads(written)["tests"]}


def test_a_case_stopped_for_time_says_so_on_every_platform(assignment):
    """A hidden case's entry says only passed or failed on PrairieLearn and in JUnit, but a case the grader stopped at
    its time limit (or left out after its problem's ran out of time) says so: the sentence is the grader's, and holds
    no hidden data."""
    hidden = [c for c in assignment.cases if c.hidden]
    over, stuck, failed = hidden[0], hidden[1], hidden[2]
    messages = {
        over.id: "the case ran over its time limit of 20 s (an endless loop?)",
        stuck.id: f"not run: your function did not return on cases {over.id} and {over.id}",
        failed.id: f"{failed.id}: out: 3 of 12 elements differ",
    }
    grade = failing(assignment, messages)
    shown = prairielearn_messages(grade, assignment)
    assert shown[f"{over.test}[{over.param}]"] == "hidden case: failed: the case ran over its time limit of 20 s"
    assert (
        shown[f"{stuck.test}[{stuck.param}]"]
        == f"hidden case: not run: your function did not return on cases {over.id} and {over.id}"
    )
    assert shown[f"{failed.test}[{failed.param}]"] == "hidden case: failed"  # its own message stays hidden
    xml = WRITERS["junit"].write_grade(grade, assignment)
    assert 'message="hidden case: failed: the case ran over its time limit of 20 s"' in xml
    assert "3 of 12 elements differ" not in xml
    course = type(assignment)(assignment.root, dict(assignment.table, hidden_summary="one_line"))
    folded = prairielearn_reads(WRITERS["prairielearn"].write_grade(grade, course).encode())["tests"][-1]["message"]
    over_time = "2 ran over the time limit (the case ran over its time limit of 20 s)"
    assert folded == f"{len(hidden) - 3} of {len(hidden)} hidden cases passed; {over_time}"
    written = json.loads(WRITERS["gradescope"].write_grade(grade, assignment))["tests"]
    gradescope = {t["name"]: t["output"] for t in written}
    assert gradescope[f"{over.test}[{over.param}]"] == "hidden case: failed: the case ran over its time limit of 20 s"


def test_hidden_cases_not_run_because_a_process_was_left_say_so_on_every_platform(assignment, monkeypatch):
    """Hidden cases the grader did not run because a process of the public phase could not be ended say so (the
    worker's sentence names a pid and a uid, no hidden data): "hidden case: failed" alone left CI's lab, and a
    student, unable to tell why a correct submission lost every hidden case. A message that only looks like it, or
    holds it with more, stays hidden."""
    import cs_basics.harness.grading.sandbox.worker as worker_module
    from cs_basics.harness.grading.pipeline.runs import NO_HIDDEN_RUN
    from cs_basics.harness.grading.sandbox.worker import Worker

    worker = Worker.__new__(Worker)  # only processes_left is asked, as run_cases asks it
    worker.uid, worker.swept_left = 61999, 0
    monkeypatch.setattr(worker_module, "processes_of", lambda uid: [4242])
    sentences = []
    for dying in (False, True):
        monkeypatch.setattr(worker_module, "dying", lambda pid, uid, dying=dying: dying)
        sentences.append(f"not run: {worker.processes_left()}, {NO_HIDDEN_RUN}")
    refused, still_ending = sentences
    assert "still ending" in still_ending and "4242" in refused
    hidden = [c for c in assignment.cases if c.hidden]
    forged = [f"your code raised ValueError: {refused}", f"{refused}\n", f"{refused} and 3 of 12 elements differ"]
    messages = dict(zip([c.id for c in hidden], [refused, still_ending, *forged], strict=False))
    assert len(messages) == 5
    grade = failing(assignment, messages)
    names = [f"{c.test}[{c.param}]" for c in hidden]
    expected = [f"hidden case: {refused}", f"hidden case: {still_ending}", *["hidden case: failed"] * 3]
    shown = prairielearn_messages(grade, assignment)
    assert [shown[name] for name in names] == expected
    written = json.loads(WRITERS["gradescope"].write_grade(grade, assignment))["tests"]
    gradescope = {t["name"]: t["output"] for t in written}
    assert [gradescope[name] for name in names] == expected
    xml = WRITERS["junit"].write_grade(grade, assignment)
    assert f'message="hidden case: {refused}"' in xml and f'message="hidden case: {still_ending}"' in xml
    assert "your code raised" not in xml and "elements differ" not in xml
