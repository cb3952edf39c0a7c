"""One grading, many writers: the platforms a course grades on, and where each one's file goes.

`grade.Grade` is the one result of grading a submission. Each platform is a writer of it:
Gradescope's results.json (results.py), PrairieLearn's results.json (prairielearn.py), GitHub
Classroom's step outputs (classroom.py) and JUnit XML for any CI (junit.py). No writer grades again or
scores differently; each keeps hidden what its platform's students can see. `cs-basics grade
--format NAME[=PATH]` picks them; without it the platform found in the environment (Gradescope's
/autograder, PrairieLearn's /grade, GitHub Classroom's workflow on Actions) decides, and Gradescope's
format is the default.

Every output is written as grading writes Gradescope's: a valid file saying "grading did not finish"
first, the real one at the end, each by a rename over the old (never half a file). Every JSON file goes
through `text.json_text`: each string `printable` again, whatever a writer put there (no NUL, no lone
surrogate, no control character).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cs_basics.harness.config import Assignment
from cs_basics.harness.grading.pipeline.grade import Grade
from cs_basics.harness.grading.writers import classroom, junit, prairielearn, results
from cs_basics.harness.text import json_text

GRADE_ROOT = "CS_BASICS_GRADE_ROOT"  # PrairieLearn's /grade, moved (the staff tests lay one out in a temp folder)
AUTOGRADER_ROOT = "AUTOGRADER_ROOT"  # Gradescope's /autograder, moved (as the bundle's run_autograder reads it)


class FormatError(Exception):
    """A --format the command cannot write (an unknown name, no path where one is needed): nothing is written."""


def _json(data: dict) -> str:
    return json_text(data) + "\n"  # every string printable again: no writer can leave a NUL or a lone surrogate


@dataclass(frozen=True)
class Writer:
    """One platform's file: its text for a grade, for grading not finished, for a submission that cannot
    be graded at all (the errors name what is missing or wrong)."""

    name: str
    platform: str
    default_file: str | None  # where it goes outside its platform (None: a path must be given)
    write_grade: Callable[[Grade, Assignment], str]
    write_placeholder: Callable[[Assignment, str], str]
    write_not_gradable: Callable[[Assignment, list[str]], str]
    check: Callable[[Assignment], None] = lambda assignment: None  # the course's settings it reads (ConfigError)
    caveat: str = ""  # said on the first line: what this platform cannot show


def _gradescope_not_gradable(assignment: Assignment, errors: list[str]) -> str:
    return _json(results.placeholder(assignment, results.not_gradable_why(errors)))


WRITERS: dict[str, Writer] = {
    w.name: w
    for w in (
        Writer(
            "gradescope",
            "Gradescope",
            "results.json",
            lambda grade, assignment: _json(results.results_json(grade)),
            lambda assignment, why: _json(results.placeholder(assignment, why)),
            _gradescope_not_gradable,
        ),
        Writer(
            "prairielearn",
            "PrairieLearn",
            "prairielearn-results.json",
            lambda grade, assignment: _json(prairielearn.results_json(grade, assignment)),
            lambda assignment, why: _json(prairielearn.placeholder(assignment, why)),
            lambda assignment, errors: _json(prairielearn.not_gradable(errors)),
            check=prairielearn.hidden_summary,
        ),
        Writer(
            "github-classroom",
            "GitHub Classroom",
            None,
            classroom.step_outputs,
            classroom.placeholder_outputs,
            classroom.not_gradable_outputs,
            caveat=classroom.CAVEAT,
        ),
        Writer(
            "junit",
            "JUnit XML",
            "junit.xml",
            junit.junit_xml,
            junit.placeholder_xml,
            junit.not_gradable_xml,
            check=prairielearn.hidden_summary,
        ),
    )
}
GRADESCOPE = WRITERS["gradescope"]


@dataclass
class Output:
    """One writer's file. `kept`: what the file held before grading (a GITHUB_OUTPUT file may hold the step's
    other outputs), kept at its head each time the file is written again."""

    writer: Writer
    path: Path
    kept: bytes = field(default=b"", repr=False)

    def write(self, text: str) -> None:
        kept = self.kept if not self.kept or self.kept.endswith(b"\n") else self.kept + b"\n"
        results.write_atomic(self.path, kept + text.encode())

    def describe(self) -> str:
        return f"{self.writer.name} ({self.writer.platform}) to {self.path}"


@dataclass(frozen=True)
class Platform:
    """A platform recognised from the environment: its format, its results path, its submission folder."""

    format: str
    results: Path | None  # None: GitHub Actions without its GITHUB_OUTPUT file
    submission: Path | None
    found: str  # what showed it, for the first line


def detect(env: Mapping[str, str] | None = None) -> Platform | None:
    """PrairieLearn's /grade/student, Gradescope's /autograder/submission, GitHub Actions (GITHUB_ACTIONS=true) running
    Classroom's workflow."""
    env = os.environ if env is None else env
    grade_root = Path(env.get(GRADE_ROOT, "/grade"))
    if (grade_root / "student").is_dir():
        return Platform(
            "prairielearn", grade_root / "results" / "results.json", grade_root / "student", f"{grade_root}/student"
        )
    autograder = Path(env.get(AUTOGRADER_ROOT, "/autograder"))
    if (autograder / "submission").is_dir():
        return Platform(
            "gradescope",
            autograder / "results" / "results.json",
            autograder / "submission",
            f"{autograder}/submission",
        )
    # GitHub Actions running Classroom's workflow: not any workflow, so the course's own CI on GitHub (whose tests
    # run `cs-basics grade`) keeps Gradescope's file and never writes into its step's outputs
    if env.get("GITHUB_ACTIONS") == "true" and env.get("GITHUB_WORKFLOW") == classroom.WORKFLOW_NAME:
        output = env.get("GITHUB_OUTPUT")
        found = f"GITHUB_ACTIONS=true in the workflow {classroom.WORKFLOW_NAME!r}"
        return Platform("github-classroom", Path(output) if output else None, None, found)
    return None


def check_writable(spec: str, path: Path) -> None:
    """The file's folder, or the nearest one that exists (grading makes the rest), is a folder this process may
    write in: found before any format's file is written, not after the first one is."""
    existing = next(p for p in (path.absolute().parent, *path.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise FormatError(f"--format {spec}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise FormatError(f"--format {spec}: {existing}: cannot write there")


def parse_spec(spec: str) -> tuple[str, Path | None]:
    name, sep, path = spec.partition("=")
    if name not in WRITERS:
        raise FormatError(f"--format {spec}: unknown format {name!r}; choose from {', '.join(WRITERS)}")
    if sep and not path:
        raise FormatError(f"--format {spec}: no path after '='")
    return name, Path(path) if path else None


def asked(specs: list[str], results_path: Path | None, platform: Platform | None) -> list[str]:
    """The formats asked for: those of --format, else the platform's (unless --results names Gradescope's file)."""
    if specs:
        return [parse_spec(spec)[0] for spec in specs]
    return ["gradescope"] if results_path is not None or platform is None else [platform.format]


def default_submission(specs: list[str], results_path: Path | None, env: Mapping[str, str] | None = None):
    """The platform's submission folder (/grade/student, /autograder/submission) when its format is asked for."""
    platform = detect(os.environ if env is None else env)
    if platform is None or platform.submission is None:
        return None
    return platform.submission if platform.format in asked(specs, results_path, platform) else None


def detect_for(env: Mapping[str, str], submission: Path | None) -> Platform | None:
    """The platform found, unless `submission` is another folder than the platform's own (a staff machine that
    has a /grade or an /autograder grades ~/alice as it always did)."""
    platform = detect(env)
    if platform is None or submission is None or platform.submission is None:
        return platform
    return platform if Path(submission).resolve() == platform.submission.resolve() else None


def outputs_for(
    specs: list[str], results_path: Path | None, env: Mapping[str, str] | None = None, submission: Path | None = None
) -> tuple[list[Output], Platform | None]:
    """The outputs `--format` (and `--results`, Gradescope's path) ask for, and the platform found in the
    environment (for `submission`, when it is given). Raises FormatError before anything is written."""
    env = os.environ if env is None else env
    platform = detect_for(env, submission)
    if not specs:
        specs = asked([], results_path, platform)
        if platform is not None and platform.results is None and specs == [platform.format]:
            raise FormatError(
                "GitHub Classroom's workflow but GITHUB_OUTPUT is not set: Classroom's grade goes into the step's "
                "outputs file; run this as a step of the workflow, or name a format: --format gradescope"
            )
    outputs = []
    for spec in specs:
        name, path = parse_spec(spec)
        writer = WRITERS[name]
        if path is None and name == "gradescope" and results_path is not None:
            path = results_path
        if path is None and platform is not None and platform.format == name:
            path = platform.results
        if path is None and name == "github-classroom" and env.get("GITHUB_OUTPUT"):  # a workflow of another name
            path = Path(env["GITHUB_OUTPUT"])
        if path is None and writer.default_file is None:
            raise FormatError(
                f"--format {name} writes the step's outputs into the file GitHub Actions names in $GITHUB_OUTPUT, "
                f"which is not set: run it as a workflow step, or give a file: --format {name}=FILE"
            )
        path = path or Path(writer.default_file)
        if path.is_dir():
            raise FormatError(f"--format {spec}: {path} is a folder; give a file")
        check_writable(spec, path)
        kept = path.read_bytes() if name == "github-classroom" and path.is_file() else b""
        outputs.append(Output(writer, path, kept))
    paths = [o.path.resolve() for o in outputs]
    if len(set(paths)) != len(paths):
        raise FormatError("two formats would write the same file: give each its own path (--format NAME=PATH)")
    return outputs, platform
