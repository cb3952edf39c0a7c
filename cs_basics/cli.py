"""The `cs-basics` command for course staff (and for students who want their grade)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_fixtures(args: argparse.Namespace) -> int:
    from cs_basics.harness.config import Assignment
    from cs_basics.harness.generate import regenerate

    assignment = Assignment.find(args.project)
    regenerate(assignment)
    for store, cases in assignment.stores():
        size = sum(store.path(c.id).stat().st_size for c in cases)
        print(f"wrote {len(cases)} fixtures ({size / 1024:.0f} KiB) and the manifest to {store.root}")
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    from cs_basics.harness.batch import grade_many, is_batch
    from cs_basics.harness.config import Assignment
    from cs_basics.harness.grade_command import grade_one, limits_from

    assignment = Assignment.find(args.project)
    submission = (args.submission or assignment.root).resolve()
    if is_batch(assignment, submission):
        return grade_many(assignment, submission, args.results or Path("results"), args)
    return grade_one(assignment, submission, args.results or Path("results.json"), args.device, limits_from(args))


def cmd_handout(args: argparse.Namespace) -> int:
    from cs_basics.harness import handout
    from cs_basics.harness.config import Assignment

    assignment = Assignment.find(args.project)
    out = args.out.resolve()
    try:
        removed = handout.build(assignment, out)
    except handout.HandoutError as err:
        print(f"cs-basics handout: {err}", file=sys.stderr)
        return 2
    print(f"wrote the handout to {out} ({len(removed)} solution lines cut)")
    if args.no_check:
        return 0
    print("checking it: no solution line, `uv run pytest` fails every graded test, grades 0 and 6 ...")
    problems = handout.check(assignment, out, removed)
    for problem in problems:
        print(f"cs-basics handout: {problem}", file=sys.stderr)
    print("the handout checks out" if not problems else f"{len(problems)} problems with the handout")
    return 1 if problems else 0


def cmd_autograder(args: argparse.Namespace) -> int:
    from cs_basics.harness import bundle
    from cs_basics.harness.config import Assignment

    assignment = Assignment.find(args.project)
    names = bundle.build(assignment, args.out)
    print(f"wrote {args.out}: setup.sh, run_autograder and {len(names) - 2} course files")
    return 0


def add_grade_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default=None, help="cuda, mps or cpu (default: the best present)")
    parser.add_argument("--case-seconds", type=float, default=60.0, help="time limit per test case (default 60)")
    parser.add_argument("--total-seconds", type=float, default=900.0, help="time limit per submission (default 900)")
    parser.add_argument("--memory-mb", type=int, default=4096, help="memory limit of the student's process, 0: none")
    parser.add_argument("--quiet", action="store_true", help="no table, just the total")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cs-basics", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    project = {"type": Path, "default": None, "help": "assignment folder (default: the nearest)"}

    fixtures = sub.add_parser("fixtures", help="regenerate the stored fixtures from the float64 oracle")
    fixtures.add_argument("--project", **project)
    fixtures.set_defaults(func=cmd_fixtures)

    grade = sub.add_parser("grade", help="grade a submission (or a folder of them) into Gradescope's results format")
    grade.add_argument("--submission", type=Path, default=None, help="a student's copy, or a folder of them")
    grade.add_argument("--results", type=Path, default=None, help="results.json (a folder for many submissions)")
    grade.add_argument("--workers", type=int, default=None, help="parallel gradings for many submissions")
    grade.add_argument("--project", **project)
    add_grade_options(grade)
    grade.set_defaults(func=cmd_grade)

    handout = sub.add_parser("handout", help="cut the student handout from this solution repository, and check it")
    handout.add_argument("out", type=Path, help="a new folder for the handout")
    handout.add_argument("--no-check", action="store_true", help="skip the checks (uv run pytest, grading)")
    handout.add_argument("--project", **project)
    handout.set_defaults(func=cmd_handout)

    autograder = sub.add_parser("autograder", help="build the Gradescope autograder zip")
    autograder.add_argument("out", type=Path, help="the zip to write, e.g. autograder.zip")
    autograder.add_argument("--project", **project)
    autograder.set_defaults(func=cmd_autograder)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
