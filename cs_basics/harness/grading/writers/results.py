"""Grades as Gradescope's results.json, and as a table for people.

The format is Gradescope's autograder specification: top-level `score`, `execution_time`,
`output`, `visibility`, `stdout_visibility` and `tests`, each test with `name`, `score`,
`max_score`, `status`, `output`, `visibility` and `tags`. Only what the code printed before the
first hidden case's inputs existed reaches the top-level `output`. A hidden case's entry (its visibility the
course's `hidden_visibility`: students see it once grades are published) says passed or failed, or that time ran
out, as on every platform; what it compared, raised or printed reaches no student: its message is kept in
`extra_data` (Gradescope shows that to nobody), and what the code printed while it ran is in no file.

Text from a submission (what it printed, its exception messages, its file and folder names) passes
through `printable` (cs_basics/harness/text.py) as it enters the grade, and again as each file is written
and each line printed: no lone surrogate (PrairieLearn's database refuses its escape), no NUL, no control
character (an escape sequence in an exception message must not clear the staff's screen).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cs_basics.harness import diagnosis
from cs_basics.harness.config import HIDDEN_VISIBILITIES, Assignment, ConfigError
from cs_basics.harness.grading.pipeline.grade import Grade
from cs_basics.harness.grading.pipeline.runs import hidden_refused, stopped_for_time
from cs_basics.harness.text import json_text, printable, safe_terminal

OUTPUT_LIMIT = 8000  # characters of output per test


def test_name(case) -> str:
    return f"{case.test}[{case.param}]"


def test_entry(case, score: float, max_score: float, passed: bool, output: str, hidden_visibility: str) -> dict:
    return {
        "name": test_name(case),
        "score": round(score, 6),
        "max_score": round(max_score, 6),
        "status": "passed" if passed else "failed",
        "output": output[:OUTPUT_LIMIT],
        "visibility": hidden_visibility if case.hidden else "visible",
        "tags": [case.problem],
    }


def hidden_verdict(passed: bool, message: str) -> str:
    """A hidden case's entry on every platform: passed or failed, and why where the grader stopped it for time or
    did not run it because a process of the public phase was left (its own sentences: no hidden data)."""
    if passed:
        return "hidden case: passed"
    stopped = stopped_for_time(message)
    if stopped is None:
        refused = hidden_refused(message)
        return f"hidden case: {refused}" if refused else "hidden case: failed"
    return f"hidden case: {stopped}" if stopped.startswith("not run") else f"hidden case: failed: {stopped}"


def results_file(score: float, execution_time: float, output: str, tests: list[dict]) -> dict:
    return {
        "score": round(score, 6),
        "execution_time": round(execution_time, 3),
        "output": output,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def sentences(notes: list[str]) -> list[str]:
    """The grade's notes as the students read them: each a sentence."""
    return [note[0].upper() + note[1:] + "." for note in notes]


def printed_section(output: str) -> str:
    """What the code printed before any hidden case ran, under its heading (nothing when it printed nothing)."""
    return "What your code printed (cut to the first part):\n" + output if output.strip() else ""


def not_gradable_why(errors: list[str]) -> str:
    return "your submission could not be graded: " + "; ".join(errors)


def results_json(grade: Grade) -> dict:
    hidden = grade.hidden_visibility
    tests = [
        test_entry(
            t.case,
            t.score,
            t.max_score,
            t.passed,
            hidden_verdict(t.passed, t.message) if t.case.hidden else t.message,
            hidden,
        )
        for t in grade.tests
    ]
    output = "\n".join([*sentences(grade.notes), printed_section(grade.output)]).strip()
    data = results_file(grade.score, grade.execution_time, output, tests)
    if grade.sandbox:  # Gradescope keeps `extra_data` and shows it to nobody
        data["extra_data"] = {"cs_basics": {"sandbox": grade.sandbox}}
    # a hidden case's entry, which students see once grades are published, says passed or failed (or that time ran
    # out); its message (the values it compared, what the code raised) is the staff's, kept where only they read it
    kept = {test_name(t.case): t.message[:OUTPUT_LIMIT] for t in grade.tests if t.case.hidden and not t.passed}
    if kept:
        data.setdefault("extra_data", {}).setdefault("cs_basics", {})["hidden_messages"] = kept
    if grade.held:  # problems the staff must read (`--release PROBLEM` once they have)
        data.setdefault("extra_data", {}).setdefault("cs_basics", {})["held"] = list(grade.held)
    return data


def placeholder(assignment: Assignment, why: str) -> dict:
    """What the results file says until grading finishes: every test at 0."""
    try:
        hidden = assignment.hidden_visibility
    except ConfigError:  # grading says so; until then the strictest
        hidden = HIDDEN_VISIBILITIES[-1]
    tests = [test_entry(case, 0.0, assignment.points[case.id], False, why, hidden) for case in assignment.cases]
    return results_file(0.0, 0.0, why, tests)


def write_atomic(path: Path, text: str | bytes) -> None:
    """A fresh file in the same folder (never one that already exists), then a rename over `path`. Bytes are
    written as they are (a gradebook keeps its encoding, byte order mark and line endings)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:  # a full disk, `path` a folder: no temporary file left beside it
        Path(tmp).unlink(missing_ok=True)
        raise


def write_results(path: Path, data: dict) -> None:
    write_atomic(path, json_text(data) + "\n")


def print_table(grade: Grade, console: Console | None = None) -> None:
    """Each test's points, grouped by problem, with each problem's total and the grand total."""
    safe_terminal()
    console = console or Console()
    table = Table(title="cs-basics grade")
    table.add_column("test", no_wrap=True)
    table.add_column("points", justify="right")
    table.add_column("")
    for problem in dict.fromkeys(t.case.problem for t in grade.tests):
        tests = [t for t in grade.tests if t.case.problem == problem]
        for t in tests:
            mark = "[green]passed[/]" if t.passed else "[red]failed[/]"
            hidden = " (hidden)" if t.case.hidden else ""
            table.add_row(escape(printable(test_name(t.case))) + hidden, f"{t.score:.3g}/{t.max_score:.3g}", mark)
        score, most = sum(t.score for t in tests), sum(t.max_score for t in tests)
        table.add_row(f"[bold]{problem}[/]", f"[bold]{score:.3g}/{most:.3g}[/]", "", end_section=True)
    table.add_row("[bold]total[/]", f"[bold]{grade.score:.3g}/{grade.max_score:.3g}[/]", "")
    console.print(table)
    for t in grade.tests:
        if not t.passed and not t.case.hidden:
            first_line = t.output.splitlines()[0] if t.output else ""
            # never wrapped: a wrap could start a line with the student's `::command::`, which GitHub's runner obeys
            name = escape(printable(test_name(t.case)))
            console.print(f"[red]{name}[/]: {escape(printable(first_line))}", soft_wrap=True)
            for line in diagnosis.said(t.output):  # the known mistake it looks like, where the message names one
                console.print(f"  {escape(printable(line))}", soft_wrap=True)


def cut_to_bytes(text: str, limit: int, note: str = "\n[... cut]") -> str:
    """`text`, cut (with `note`) so that it takes at most `limit` bytes as a JSON string: what a submission
    printed may be control characters, each six bytes once escaped, or four-byte characters."""

    def size(t: str) -> int:
        return len(json.dumps(t).encode())

    if size(text) <= limit:
        return text
    low, high = 0, len(text)  # the longest prefix that fits with the note
    while low < high:
        middle = (low + high + 1) // 2
        if size(text[:middle] + note) <= limit:
            low = middle
        else:
            high = middle - 1
    return text[:low] + note if size(text[:low] + note) <= limit else ""
