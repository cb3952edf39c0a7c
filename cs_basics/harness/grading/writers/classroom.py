"""Grades as GitHub Classroom's grading reporter reads them: one runner per problem, in the step's outputs.

GitHub Classroom grades in a workflow of the student's own repository (the handout's
.github/workflows/classroom.yml): `cs-basics grade` writes one output per problem into the file
$GITHUB_OUTPUT names, each the base64 of a runner's JSON as Classroom's graders write it (`version`
1, `status` pass/fail/error, `max_score`, `tests[]` with `name`, `status`, `score`, `message`,
`test_code`, `filename`, `line_no`, `execution_time`), and the reporter action
(classroom-resources/autograding-grading-reporter) reads them from `<RUNNER>_RESULTS` variables. Its
notice to Classroom is the tests' scores over the runners' `max_score`; its table counts passed tests
(passed / tests x max_score), the same where a problem's cases weigh the same.

The runner, its log and its files are the student's: nothing there can be hidden. So Classroom gets
the public cases only, and each problem its full points shared over them (a handout has no hidden
cases anyway); the first line of the grade and the docs say so.
"""

from __future__ import annotations

import base64
import json
import math

from cs_basics.harness.cases import Case, points_by_case
from cs_basics.harness.config import Assignment
from cs_basics.harness.grading.pipeline.grade import Grade
from cs_basics.harness.grading.writers.results import cut_to_bytes, not_gradable_why, test_name
from cs_basics.harness.text import json_text

WORKFLOW_NAME = "Autograding Tests"  # the handout's workflow, named as Classroom names its own
CAVEAT = (
    "GitHub Classroom grades on the student's own runner, where nothing can be hidden: "
    "public cases only, each problem its full points over them"
)
# one runner's JSON: its base64 reaches the reporter as an environment variable, and Linux refuses one over
# 128 KiB (MAX_ARG_STRLEN) when it starts the action's process
RUNNER_BYTES = 64 << 10
MESSAGE_BYTES = 8 << 10
SCORE_DIGITS = 24  # what exact_total's last score may take beyond the 4 decimals of a share


def runners(rows: list[tuple[Case, bool, str, float]], problem_points: dict[str, float], status: str = "") -> dict:
    """Each problem's runner JSON from (case, passed, message, seconds) rows: its public cases, its full points
    shared over them. `status`: the runners' status when no case could run ("error")."""
    public = [r for r in rows if not r[0].hidden]
    shares = points_by_case([r[0] for r in public], problem_points)
    found = {}
    for problem in problem_points:  # the workflow's order of runners, which the reporter adds up in
        mine = [r for r in public if r[0].problem == problem]
        if not mine:
            continue
        tests = [
            {
                "name": test_name(case),
                "status": "pass" if passed else "fail",
                "score": shares[case.id] if passed else 0,
                "message": "",
                "test_code": "",
                "filename": "",
                "line_no": 0,
                "execution_time": f"{seconds:.2f}s",
            }
            for case, passed, message, seconds in mine
        ]
        found[problem] = {
            "version": 1,
            "status": status or ("pass" if all(t["status"] == "pass" for t in tests) else "fail"),
            "max_score": problem_points[problem],
            "tests": tests,
        }
        # the messages share what the rest leaves of the runner's bytes (each score may yet take a float's digits)
        rest = len(json.dumps(found[problem])) + SCORE_DIGITS * len(tests)
        share = max(0, min(MESSAGE_BYTES, (RUNNER_BYTES - rest) // len(tests)))
        for test, (_, _, message, _) in zip(tests, mine, strict=True):
            test["message"] = cut_to_bytes(message, share)
    exact_total(found)
    return found


def reporter_total(found: dict) -> float:
    """The total the reporter notifies Classroom of: every test's score added in order, as its JavaScript does."""
    total = 0.0
    for data in found.values():
        if data["max_score"]:
            for test in data["tests"]:
                total += test["score"]
    return total


def exact_total(found: dict) -> None:
    """Make the reporter's float sum of the shares (4 decimals each) come out as their total to 4 decimals, the
    points the grade gives, not 5.999999999999999: the last score given takes up the difference."""
    scored = [t for data in found.values() if data["max_score"] for t in data["tests"] if t["score"]]
    if not scored:
        return
    target = round(sum(t["score"] for t in scored), 4)
    last = scored[-1]
    last["score"] = 0.0
    before = reporter_total(found)  # what the reporter has added up when it comes to the last score
    candidate = target - before
    for _ in range(16):  # the float nearest the difference, or one a few units in the last place away
        last["score"] = candidate
        off = reporter_total(found) - target
        if off == 0:
            return
        candidate = math.nextafter(candidate, -math.inf if off > 0 else math.inf)


def encoded(found: dict) -> str:
    """The step's outputs: `<problem>=<base64 of its runner's JSON>`, a line each."""
    lines = []
    for problem, data in found.items():
        text = json_text(data, indent=None)
        lines.append(f"{problem}={base64.b64encode(text.encode()).decode()}\n")
    return "".join(lines)


def problem_points(assignment: Assignment) -> dict[str, float]:
    return {name: problem.points for name, problem in assignment.problems.items()}


def step_outputs(grade: Grade, assignment: Assignment) -> str:
    rows = [(t.case, t.passed, t.output, t.seconds) for t in grade.tests]
    return encoded(runners(rows, problem_points(assignment)))


def placeholder_outputs(assignment: Assignment, why: str) -> str:
    rows = [(case, False, why, 0.0) for case in assignment.cases]
    return encoded(runners(rows, problem_points(assignment), status="error"))


def not_gradable_outputs(assignment: Assignment, errors: list[str]) -> str:
    return placeholder_outputs(assignment, not_gradable_why(errors))
