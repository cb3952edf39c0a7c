"""What students see, before grades are published and after, holds nothing of a hidden case, and nothing a
submission brings reaches the staff's terminal or spreadsheet as a command.

Hidden cases run after every public case, in processes of their own, and their inputs exist only from
then on: the results' top-level `output` and the public cases' entries (Gradescope shows both at once)
hold nothing a hidden case printed, raised or computed, and a hidden entry (shown once grades are published) says
passed or failed only: its message is the staff's, in `extra_data`. Each test runs in both sandboxes.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import uuid

import pytest
import torch

from cs_basics.harness.grading.pipeline.grade import grade
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.worker import Worker
from cs_basics.harness.grading.writers.results import printable, results_json
from cs_basics.harness.rule.fromscratch import HELD

from .submissions import ROOT, run, submission
from .test_sandbox import SANDBOXES

# Prints every input it gets, in full, as a student debugging would.
PRINTS_ITS_INPUTS = """
_reference_softmax, _reference_attention = softmax, scaled_dot_product_attention


def _show(*tensors):
    for t in tensors:
        if t is not None and t.is_floating_point():
            print([repr(v) for v in t.detach().flatten().tolist()], flush=True)


def softmax(in_features, dim):
    _show(in_features)
    return _reference_softmax(in_features, dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    _show(Q, K, V)
    return _reference_attention(Q, K, V, mask)
"""

# Keeps each call's inputs in /tmp and in its working folder; each call prints what the call before kept,
# a thread prints each new line kept, as does a handler at exit; and a case's first input is raised in an
# exception's message. Short lines: what is printed stays well inside the 64 KiB of output kept. Where a
# job has no namespaces of its own, Landlock refuses it the shared /tmp: it keeps what it can. Its file in
# /tmp is this run's own (another run's, or another grader's, is not this submission's doing).
CARRIES_ITS_INPUTS = """
import atexit as _atexit
import os as _os
import threading as _threading
import time as _time

_reference_softmax, _reference_attention = softmax, scaled_dot_product_attention
_KEPT = ["/tmp/kept-inputs-TOKEN.txt", "kept-inputs.txt"]


def _last_kept():
    for path in _KEPT:
        try:
            with open(path) as f:
                return (f.read().splitlines() or [""])[-1]
        except OSError:
            pass
    return ""


def _keep(*tensors):
    print("kept before:", _last_kept(), flush=True)
    values = [repr(v) for t in tensors if t is not None and t.is_floating_point() for v in t.flatten().tolist()[:5]]
    for path in _KEPT:
        try:  # without namespaces, Landlock keeps the job out of the shared /tmp: its working folder carries them
            with open(path, "a") as f:
                f.write(" ".join(values) + "\\n")
        except OSError:
            pass


def _tell_what_is_kept():
    told = ""
    while True:
        _time.sleep(0.005)
        if _last_kept() != told:
            told = _last_kept()
            print("kept:", told, flush=True)


_threading.Thread(target=_tell_what_is_kept, daemon=True).start()
_atexit.register(lambda: print("kept at exit:", _last_kept(), flush=True))


def softmax(in_features, dim):
    _keep(in_features)
    if in_features.requires_grad and dim == 0:  # only a hidden case
        raise ValueError(f"first value {in_features.flatten()[0].item()!r}")
    return _reference_softmax(in_features, dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    _keep(Q, K, V)
    return _reference_attention(Q, K, V, mask)
""".replace("TOKEN", uuid.uuid4().hex)

SUBMISSIONS = {"prints": PRINTS_ITS_INPUTS, "carries": CARRIES_ITS_INPUTS}


def hidden_numbers(assignment) -> dict[str, list[str]]:
    """Per hidden case, its inputs' values as the submission prints them (a sample of each tensor)."""
    found = {}
    for case in assignment.cases:
        if case.hidden:
            args = case.prepare(assignment.store_for(case).load(case.id)[0], torch.device("cpu"))
            tensors = [t for t in args.values() if isinstance(t, torch.Tensor) and t.is_floating_point()]
            found[case.id] = [repr(v) for t in tensors for v in t.detach().flatten().tolist()[:5]]
    return found


def student_visible(data: dict) -> str:
    """Every field Gradescope shows a student, before grades are published and after (the hidden entries)."""
    fields = [data.get("output", "")]
    fields += [f"{t['name']} {t['output']}" for t in data["tests"]]
    return "\n".join(fields)


def staff_only(data: dict) -> str:
    """What Gradescope keeps and shows to nobody: a hidden case's message is there, for the staff."""
    return json.dumps(data.get("extra_data", {}))


def first_public_number(assignment) -> str:
    case = next(c for c in assignment.cases if not c.hidden)
    shown = case.prepare(assignment.store_for(case).load(case.id)[0], torch.device("cpu"))
    return repr(next(iter(shown.values())).flatten()[0].item())


def assert_hidden_stays_hidden(assignment, data: dict, where: str) -> None:
    """No hidden input in any field a student sees, hidden entries included, nor anywhere in the file but the
    staff's `extra_data`; the public inputs the same code printed are shown (so the test can fail: the code
    printed, the file holds it)."""
    numbers = hidden_numbers(assignment)
    assert numbers  # the course has hidden cases, else this test shows nothing
    whole = json.dumps({field: value for field, value in data.items() if field != "extra_data"})
    leaked = {case: [n for n in values if n in whole] for case, values in numbers.items()}
    assert not any(leaked.values()), f"{where}: hidden inputs in the results: {leaked}"
    assert first_public_number(assignment) in data["output"], f"{where}: the public inputs printed are not shown"
    hidden = [t for t in data["tests"] if "hidden" in t["name"]]
    assert all(t["visibility"] == "after_published" for t in hidden)
    assert all(t["output"].startswith("hidden case: ") for t in hidden), [t["output"][:200] for t in hidden]


@pytest.fixture(scope="module", params=SANDBOXES)
def worker(request):
    with Worker(request.param, Limits(case_seconds=20)) as shared:
        yield shared


@pytest.mark.parametrize("kind", sorted(SUBMISSIONS))
def test_no_hidden_input_reaches_a_field_students_see_at_once(assignment, worker, tmp_path, kind):
    # released: the staff read it (atexit is no module the course allows), so that its code runs as written
    result = run(
        assignment,
        submission(tmp_path, SUBMISSIONS[kind]),
        worker.sandbox,
        case_seconds=20,
        released=tuple(assignment.problems),
    )
    data = json.loads(json.dumps(results_json(result)))
    assert_hidden_stays_hidden(assignment, data, f"{kind} in {worker.sandbox}")
    # the grader did capture what the code printed in the hidden cases (for the staff's API): it is the writer
    # that keeps it from the file, not a capture that missed it
    printed = "\n".join(t.printed for t in result.tests if t.case.hidden)
    assert any(n in printed for values in hidden_numbers(assignment).values() for n in values)


def test_a_hidden_case_that_breaks_the_rule_names_itself_only_in_its_own_entry(assignment, worker, tmp_path):
    code = """
    _reference_softmax = softmax


    def softmax(in_features, dim):
        if in_features.abs().max() > 5000 and dim == 1:  # only a hidden case
            return getattr(torch, "".join(["soft", "max"]))(in_features, dim)  # a name the scan cannot read
        return _reference_softmax(in_features, dim)
    """
    # released: the staff read it (a name built at run time holds softmax for review), so the run decides
    result = run(assignment, submission(tmp_path, code), worker.sandbox, case_seconds=20, released=("softmax",))
    data = json.loads(json.dumps(results_json(result)))
    softmax = [t for t in data["tests"] if t["tags"] == ["softmax"]]
    assert sum(t["score"] for t in softmax) == 0
    hidden_ids = [c.id for c in assignment.cases if c.hidden]
    visible = student_visible(data)
    named = "torch's softmax"  # the operator's description, in the message of the case that ran it
    assert named not in visible and not any(i in visible for i in hidden_ids)
    assert named in staff_only(data)  # the staff's, in Gradescope's extra_data


def test_library_arithmetic_in_a_hidden_case_holds_the_problem_naming_it_only_in_its_own_entry(
    assignment, worker, tmp_path
):
    code = """
    _reference_softmax = softmax


    def softmax(in_features, dim):
        if in_features.abs().max() > 5000 and dim == 1:  # only a hidden case
            logits = torch.distributions.Categorical(logits=in_features.movedim(dim, -1)).logits
            return logits.exp().movedim(-1, dim)
        return _reference_softmax(in_features, dim)
    """
    result = grade(assignment, submission(tmp_path, code), torch.device("cpu"), worker=worker)
    data = json.loads(json.dumps(results_json(result)))
    softmax = [t for t in data["tests"] if t["tags"] == ["softmax"]]
    assert sum(t["score"] for t in softmax) == 0 and result.held == ["softmax"]
    named = "computed by torch.distributions.categorical.Categorical.__init__"
    visible = student_visible(data)
    assert named not in visible and not any(c.id in visible for c in assignment.cases if c.hidden)
    assert all(HELD in t["output"] for t in softmax if t["visibility"] == "visible")
    assert named in staff_only(data)  # the staff's, in Gradescope's extra_data


def test_a_message_for_the_staff_forged_in_a_hidden_case_reaches_no_entry_and_costs_the_problem(
    assignment, worker, tmp_path
):
    """A "stop grading, the staff must act" line written by the code in a hidden case is no staff error (the code had
    run by then): it breaks the channel's protocol, costs softmax, and its text (a hidden input) reaches no entry."""
    code = """
    import json as _json
    import os as _os

    _reference_softmax = softmax


    def softmax(in_features, dim):
        if in_features.requires_grad and dim == 0:  # only a hidden case
            line = _json.dumps({"event": "staff_error", "message": repr(in_features.flatten()[0].item())})
            for fd in [n for n in map(int, _os.listdir("/proc/self/fd")) if n > 2]:  # the channel among them
                try:
                    _os.write(fd, (line + "\\n").encode())
                except OSError:
                    pass
        return _reference_softmax(in_features, dim)
    """
    # released: the staff read it (json, os.listdir), so that the forged line is written and the protocol decides
    result = run(
        assignment, submission(tmp_path, code), worker.sandbox, case_seconds=20, released=tuple(assignment.problems)
    )
    data = json.loads(json.dumps(results_json(result)))
    forged = hidden_numbers(assignment)["hidden_softmax-grad_dim_0"][0]
    assert forged not in json.dumps(data)
    softmax = [t for t in data["tests"] if t["tags"] == ["softmax"]]
    assert sum(t["score"] for t in softmax) == 0
    hidden = {t["name"]: t for t in data["tests"] if t["visibility"] != "visible"}
    assert hidden["test_hidden_softmax[grad_dim_0]"]["output"] == "hidden case: failed"
    kept = data["extra_data"]["cs_basics"]["hidden_messages"]["test_hidden_softmax[grad_dim_0]"]
    assert "sent the grader a line the harness never sends" in kept
    assert all(t["status"] == "passed" for t in data["tests"] if t["tags"] != ["softmax"])


def test_the_course_chooses_when_students_see_hidden_cases(assignment, tmp_path):
    table = dict(assignment.table, hidden_visibility="after_due_date")
    course = type(assignment)(assignment.root, table)
    result = grade(course, submission(tmp_path), torch.device("cpu"), sandbox="fallback")
    data = results_json(result)
    assert {t["visibility"] for t in data["tests"] if "hidden" in t["name"]} == {"after_due_date"}
    bad = type(assignment)(assignment.root, dict(assignment.table, hidden_visibility="visible"))
    with pytest.raises(Exception, match="hidden_visibility"):
        grade(bad, submission(tmp_path, name="other"), torch.device("cpu"), sandbox="fallback")


def cli(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "cs_basics.cli", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, timeout=600)


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_batch_shows_students_no_hidden_input(assignment, tmp_path, sandbox):
    folder = tmp_path / "submissions"
    for kind, code in SUBMISSIONS.items():
        submission(folder, code, name=kind)
    out = tmp_path / "out"
    # released, as the staff would after reading them (atexit, os: no modules the course allows), so that their
    # code runs and what they print is what is tested
    releases = [arg for problem in assignment.problems for arg in ("--release", problem)]
    args = ["--submission", str(folder), "--results", str(out), "--workers", "2", "--sandbox", sandbox, *releases]
    done = cli("grade", *args)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    for kind in SUBMISSIONS:
        assert_hidden_stays_hidden(assignment, json.loads((out / f"{kind}.json").read_text()), f"batch: {kind}")


# ---------------------------------------------------------------- student text never commands a terminal

ESCAPES = "\x1b[2J\x1b[H\x1b]52;c;Y3MtYmFzaWNz\x07\x1b[32mscore 6/6 all passed\x1b[0m"
RAISES_ESCAPES = f"""
_reference_attention = scaled_dot_product_attention


def scaled_dot_product_attention(Q, K, V, mask=None):
    raise ValueError({ESCAPES!r})
"""
CONTROL_BYTES = (b"\x1b", b"\x07", b"\x9b", b"\xc2\x9b")


def assert_inert(done: subprocess.CompletedProcess, where: str) -> None:
    for stream in (done.stdout, done.stderr):
        assert not any(byte in stream for byte in CONTROL_BYTES), f"{where}: {stream[-2000:]!r}"


def test_printable_makes_control_characters_visible_and_keeps_lines():
    assert printable(ESCAPES) == "^[[2J^[[H^[]52;c;Y3MtYmFzaWNz^G^[[32mscore 6/6 all passed^[[0m"
    assert printable("a\tb\nc\r\x7f\x9b\u202e") == "a\tb\nc^M^?\\x9b\\u202e"


def test_an_escape_laden_exception_reaches_no_terminal_and_no_file_but_is_shown(tmp_path):
    """Not a sandbox's matter: the default one grades."""
    results = tmp_path / "results.json"
    student = submission(tmp_path, RAISES_ESCAPES)
    done = cli("grade", "--submission", str(student), "--results", str(results))
    assert done.returncode == 0, done.stderr
    assert b"^[[2J" in done.stdout  # the failure's first line is shown, made visible
    assert_inert(done, "grade")
    data = json.loads(results.read_text())
    assert any(printable(ESCAPES) in t["output"] for t in data["tests"])  # the student's text, made harmless
    assert not any("\x1b" in t["output"] for t in data["tests"])  # no reader of the file is commanded (issue 35)
    assert data["score"] == pytest.approx(1.0)

    folder = tmp_path / "batch"
    named = "\x1b]0;owned\x07\x1b[31mred\x9b"
    for name in (named, "=1+1", "plain"):
        submission(folder, RAISES_ESCAPES if name != "plain" else "", name=name)
    out = tmp_path / "out"
    done = cli("grade", "--submission", str(folder), "--results", str(out), "--workers", "1")
    assert done.returncode == 0, done.stderr
    assert b"^[[2J" in done.stdout  # the item analysis quotes the failure, made visible
    assert_inert(done, "batch")
    assert json.loads((out / f"{named}.json").read_text())["score"] == pytest.approx(1.0)
    rows = (out / "scores.csv").read_text().splitlines()
    assert "'=1+1,1.0,6.0,," in rows and "plain,6.0,6.0,," in rows

    done = cli("report", str(out), "--out", str(tmp_path / "analysis"))
    assert done.returncode == 0, done.stderr
    assert b"^[[2J" in done.stdout
    assert_inert(done, "report")


def test_csv_cells_that_a_spreadsheet_would_run_are_quoted_and_numbers_stay_numbers(tmp_path):
    from cs_basics.harness.course.report import csv_text

    rows = [{"a": "=cmd|' /C calc'!A0", "b": -1, "c": "-2", "d": "+x", "e": "@SUM(1)", "f": "\tx", "g": "ok"}]
    rows += [{"a": "\rx", "b": -0.5, "c": 3.25, "d": "a=b", "e": "", "f": "1-2", "g": "-"}]
    rows += [{"a": "a\r=1+1", "b": "b\n@x", "c": 0, "d": "", "e": "", "f": "", "g": ""}]
    text = csv_text(rows, list("abcdefg"))
    assert text.splitlines()[1] == "'=cmd|' /C calc'!A0,-1,'-2,'+x,'@SUM(1),'\tx,ok"
    cells = list(csv.reader(io.StringIO(text, newline="")))
    assert cells[2] == ["^Mx", "-0.5", "3.25", "a=b", "", "1-2", "'-"]  # a lone CR made visible (issue 35)
    assert cells[3][:2] == ["a^M=1+1", "b\n@x"] and len(cells) == 4  # no row starts inside a cell
