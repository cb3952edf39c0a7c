"""Grades as PrairieLearn's external grader results: /grade/results/results.json.

The schema is PrairieLearn's (docs/externalGrading.md, "Grading results"): `gradable`, `score` in
[0, 1], `message`, `output`, `tests[]` with `name`, `description`, `points`, `max_points`, `message`,
`output`; `format_errors` (a string or a list) when `gradable` is false. PrairieLearn records `score`
and shows everything else to the student at once: it has no per-test visibility. So a hidden case shows
its name, points and pass/fail only, or all hidden cases one line (`hidden_summary` in
[tool.cs-basics]: "each", the default, or "one_line"); what a hidden case printed or raised is in no
field, and the top-level `output` holds only what the code printed before the first hidden case ran.

PrairieLearn's grader host refuses a results.json over 1 MiB (its `runJob`: "The grading results were
larger than 1MB"), so every text from the submission is cut to a share of that, counted in the bytes
JSON takes (a control character is six).
"""

from __future__ import annotations

from cs_basics.harness.cases import Case
from cs_basics.harness.config import Assignment, ConfigError
from cs_basics.harness.grading.pipeline.grade import Grade
from cs_basics.harness.grading.pipeline.runs import stopped_for_time
from cs_basics.harness.grading.writers.results import (
    cut_to_bytes,
    hidden_verdict,
    printed_section,
    sentences,
    test_name,
)
from cs_basics.harness.rule.fromscratch import HELD

RESULTS_LIMIT = 1 << 20  # bytes: PrairieLearn's grader host refuses a larger results.json
OUTPUT_BYTES = 128 << 10  # the top-level output (what the code printed)
MESSAGES_BYTES = 640 << 10  # every test's message together; the rest is names, numbers and the notes
MESSAGE_BYTES = 16 << 10  # one test's message, at most
HIDDEN_SUMMARIES = ("each", "one_line")


def hidden_summary(assignment: Assignment) -> str:
    """How a platform with no per-test visibility shows hidden cases: `hidden_summary` in [tool.cs-basics]."""
    return assignment.choice("hidden_summary", HIDDEN_SUMMARIES)


def _entry(case: Case, points: float, max_points: float, message: str) -> dict:
    return {
        "name": test_name(case),
        "description": case.problem if case.hidden else case.description or case.problem,  # the staff's words on inputs
        "points": round(points, 6),
        "max_points": round(max_points, 6),
        "message": message,
    }


def _tests(rows: list[tuple[Case, float, float, bool, str]], summary: str) -> list[dict]:
    """Entries for (case, points, max_points, passed, message): public cases with their message, hidden
    ones with pass/fail only, each or folded into one."""
    public = [r for r in rows if not r[0].hidden]
    hidden = [r for r in rows if r[0].hidden]
    share = min(MESSAGE_BYTES, MESSAGES_BYTES // max(len(public), 1))
    tests = [_entry(case, points, most, cut_to_bytes(message, share)) for case, points, most, _, message in public]
    if summary == "each":
        tests += [_entry(case, got, most, hidden_verdict(passed, text)) for case, got, most, passed, text in hidden]
    elif hidden:
        passed = sum(1 for r in hidden if r[3])
        over = [stopped for r in hidden if not r[3] and (stopped := stopped_for_time(r[4]))]
        tests.append(
            {
                "name": "hidden cases",
                "description": f"{len(hidden)} cases whose inputs and messages stay hidden",
                "points": round(sum(r[1] for r in hidden), 6),
                "max_points": round(sum(r[2] for r in hidden), 6),
                "message": f"{passed} of {len(hidden)} hidden cases passed" + over_time_note(over),
            }
        )
    return tests


def over_time_note(stopped: list[str]) -> str:
    """What a one-line summary adds for the hidden cases stopped at their time limit."""
    return f"; {len(stopped)} ran over the time limit ({stopped[0]})" if stopped else ""


def _results(score: float, most: float, message: str, output: str, tests: list[dict]) -> dict:
    return {
        "gradable": True,
        "score": round(score / most, 6) if most else 0.0,
        "message": cut_to_bytes(message, OUTPUT_BYTES // 4),
        "output": cut_to_bytes(output, OUTPUT_BYTES),
        "tests": tests,
    }


def results_json(grade: Grade, assignment: Assignment) -> dict:
    rows = [(t.case, t.score, t.max_score, t.passed, t.output) for t in grade.tests]
    tests = _tests(rows, hidden_summary(assignment))
    held = [f"{', '.join(grade.held)}: 0 points for now, {HELD}."] if grade.held else []  # no extra_data here
    message = "\n".join([f"{grade.score:.4g} of {grade.max_score:.4g} points.", *held, *sentences(grade.notes)])
    return _results(grade.score, grade.max_score, message, printed_section(grade.output), tests)


def summary_until_graded(assignment: Assignment) -> str:
    """`hidden_summary` for a file written before grading checks it: the strictest while it is wrong."""
    try:
        return hidden_summary(assignment)
    except ConfigError:
        return HIDDEN_SUMMARIES[-1]


def placeholder(assignment: Assignment, why: str) -> dict:
    """Until grading finishes: every test at 0."""
    summary = summary_until_graded(assignment)
    rows = [(case, 0.0, assignment.points[case.id], False, why) for case in assignment.cases]
    return _results(0.0, 1.0, why, "", _tests(rows, summary))


def not_gradable(errors: list[str]) -> dict:
    """A submission that cannot be graded at all (no file, not Python): PrairieLearn marks it invalid, and
    the student keeps the attempt."""
    return {"gradable": False, "score": 0.0, "format_errors": [cut_to_bytes(e, 4096) for e in errors]}
