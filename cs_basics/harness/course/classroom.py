"""The handout's GitHub Classroom workflow: .github/workflows/classroom.yml.

It checks out the student's repository, sets up uv, grades once (`cs-basics grade --format
github-classroom`: one output per problem in the reporter's format, see grading/writers/classroom.py) and runs
GitHub Classroom's grading reporter over those outputs, one runner per problem. One grading for every
problem, not a step each: each grading starts torch twice, which the student waits for and the course
pays in Actions minutes. The workflow runs in the student's repository, so the student can read all of
it and edit it: the handout holds no hidden case, and the docs say what Classroom cannot defend. Classroom's own
autograding (tests added in its assignment form) commits its workflow over this one: the file's header tells
the staff to leave it off.
"""

from __future__ import annotations

from pathlib import Path

from cs_basics.harness.config import Assignment
from cs_basics.harness.grading.writers import classroom as grading_classroom

WORKFLOW = Path(".github/workflows/classroom.yml")
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
GRADE_STEP = "grade"

TEMPLATE = """\
# GitHub Classroom's autograding, written by `cs-basics handout`. It runs in your repository, on a runner
# you can read: it grades the public cases only (the hidden ones are the staff's), each problem its full
# points over them, as `uv run cs-basics grade` does on your machine.
# Staff: in Classroom's assignment form leave autograding off (add no test under "Add autograding tests"):
# tests added there make Classroom commit its own .github/workflows/classroom.yml over this file.
name: {workflow_name}
on: [push, workflow_dispatch, repository_dispatch]
permissions:
  checks: write
  actions: read
  contents: read
jobs:
  run-autograding-tests:
    runs-on: ubuntu-latest
    if: github.actor != 'github-classroom[bot]'
    timeout-minutes: 30
    steps:
      - name: Checkout code
        uses: actions/checkout@v4
      - name: Set up uv
        uses: astral-sh/setup-uv@v6
      - name: Grade
        id: {grade_step}
        env:
          UV_PYTHON_DOWNLOADS: never
        run: uv run --frozen --no-dev cs-basics grade --format github-classroom
      - name: Autograding Reporter
        if: always()
        uses: {reporter}
        env:
{env}
        with:
          runners: {runners}
"""


def runner_variable(problem: str) -> str:
    """The variable the reporter reads a runner's results from: its id upper-cased, then _RESULTS."""
    return f"{problem.upper()}_RESULTS"


def workflow(assignment: Assignment) -> str:
    problems = list(assignment.problems)
    env = "\n".join(f'          {runner_variable(p)}: "${{{{ steps.{GRADE_STEP}.outputs.{p} }}}}"' for p in problems)
    return TEMPLATE.format(
        workflow_name=grading_classroom.WORKFLOW_NAME,
        grade_step=GRADE_STEP,
        reporter=REPORTER,
        env=env,
        runners=",".join(problems),
    )


def write_workflow(assignment: Assignment, out: Path) -> Path:
    path = out / WORKFLOW
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(workflow(assignment))
    return path
