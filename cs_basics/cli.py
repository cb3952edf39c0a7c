"""The `cs-basics` command for course staff (and for students who want their grade)."""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cs_basics.harness.grading.sandbox.worker import Worker
    from cs_basics.harness.grading.settings import GradeSettings


def cmd_fixtures(args: argparse.Namespace) -> int:
    from cs_basics.harness.config import Assignment
    from cs_basics.harness.generate import regenerate

    for done in regenerate(Assignment.find(args.project)):
        print(done.report())
    return 0


def cmd_check_cases(args: argparse.Namespace) -> int:
    from cs_basics.harness.config import Assignment
    from cs_basics.harness.course.casecheck import check_cases, shipped_answers

    assignment = Assignment.find(args.project)
    report = check_cases(assignment)
    print(report.text())
    shipped = shipped_answers(assignment)
    print(*(f"PROBLEM: {line}" for line in shipped), sep="\n") if shipped else print("the handout ships no answer")
    return 1 if report.problems or shipped else 0


def cmd_new(args: argparse.Namespace) -> int:
    from cs_basics.harness.course.new import NewError, create

    try:
        written = create(args.out.resolve(), args.harness)
    except NewError as err:
        print(f"cs-basics new: {err}", file=sys.stderr)
        return 2
    print(f"wrote {len(written)} files and the fixtures to {args.out}; next: cd {args.out} && uv run pytest")
    return 0


def grade_settings(args: argparse.Namespace) -> GradeSettings:
    """`cs-basics grade`'s options, read once: what lies below this file gets them as this value."""
    from cs_basics.harness.grading.settings import GradeSettings

    return GradeSettings(
        device=args.device,
        sandbox=args.sandbox,
        case_seconds=args.case_seconds,
        total_seconds=args.total_seconds,
        timeouts_per_problem=args.timeouts_per_problem,
        memory_mb=args.memory_mb,
        tmp_mb=args.tmp_mb,
        release=args.release,
        workers=args.workers,
        shard=args.shard,
        force=args.force,
    )


def cmd_grade(args: argparse.Namespace) -> int:
    # without torch: the grading server starts first and imports torch while this process imports it too
    from cs_basics.harness.grading.sandbox.server import SINGLE_BLAS_THREAD
    from cs_basics.harness.grading.sandbox.stopping import stopping_on_signals
    from cs_basics.harness.grading.sandbox.worker import started_worker

    for name, value in SINGLE_BLAS_THREAD.items():  # before this process imports numpy (with torch)
        os.environ.setdefault(name, value)
    settings = grade_settings(args)
    with stopping_on_signals(), started_worker(settings.sandbox, settings.limits()) as worker:
        return grade_with(args, settings, worker)


def grade_with(args: argparse.Namespace, settings: GradeSettings, worker: Worker | None) -> int:
    """`cs-basics grade`, in the worker started for it (None: grading starts its own and says why it cannot)."""
    from cs_basics.harness.config import Assignment
    from cs_basics.harness.course.batch import grade_many, is_batch
    from cs_basics.harness.course.shards import ShardError
    from cs_basics.harness.grading.command import grade_one
    from cs_basics.harness.grading.writers.formats import FormatError, default_submission, outputs_for
    from cs_basics.harness.grading.writers.results import printable

    # what the imports made (torch's several hundred thousand objects) lives until the end: out of every full
    # collection's walk, which a batch sets off again and again (about 1 s in a course of 32)
    gc.freeze()
    assignment = Assignment.find(args.project)
    try:
        default = default_submission(args.format, args.results)
    except FormatError as err:
        print(printable(f"cs-basics grade: {err}"), file=sys.stderr)
        return 2
    submission = (args.submission or default or assignment.root).resolve()
    if not submission.exists():  # a typo: every platform hands over the student's folder, empty or not
        print(printable(f"cs-basics grade: --submission {args.submission}: no such file or folder"), file=sys.stderr)
        return 2
    if is_batch(assignment, submission):
        if args.format:
            why = "cs-basics grade: --format takes one submission; a folder of them is graded for Gradescope"
            print(why, file=sys.stderr)
            return 2
        try:
            return grade_many(assignment, submission, args.results or Path("results"), settings, worker)
        except ShardError as err:
            print(printable(f"cs-basics grade: {err}"), file=sys.stderr)
            return 2
    if args.shard:
        why = f"cs-basics grade: --shard needs a folder of submissions; {submission} is one"
        print(printable(why), file=sys.stderr)
        return 2
    try:
        outputs, platform = outputs_for(args.format, args.results, submission=args.submission)
    except FormatError as err:
        print(printable(f"cs-basics grade: {err}"), file=sys.stderr)
        return 2
    found = f" ({platform.found} found)" if platform and platform.format in {o.writer.name for o in outputs} else ""
    caveats = [o.writer.caveat for o in outputs if o.writer.caveat]
    first = "writing " + ", ".join(o.describe() for o in outputs) + found + "".join(f"; {c}" for c in caveats)
    print(printable(f"cs-basics grade: {first}"), flush=True)
    return grade_one(
        assignment, submission, outputs, settings.device, settings.limits(), sandbox=settings.sandbox, worker=worker
    )


def cmd_report(args: argparse.Namespace) -> int:
    from cs_basics.harness.course.report import (
        ReportError,
        analyse,
        load_folder,
        merge,
        print_analysis,
        unfinished_message,
    )
    from cs_basics.harness.course.shards import submission_folders
    from cs_basics.harness.grading.writers.results import printable

    try:
        if args.command == "merge":
            missing = merge(args.folders, args.out, args.submissions)
            if missing:
                names = [p.name for p in submission_folders(args.submissions)]
                print(printable(f"cs-basics merge: {unfinished_message(missing, names, args.shards)}"), file=sys.stderr)
                return 1
        else:
            results = load_folder(args.folder)
            print_analysis(analyse(results, args.out or args.folder), caption=f"{len(results)} submissions")
    except ReportError as err:
        print(printable(f"cs-basics {args.command}: {err}"), file=sys.stderr)
        return 2
    return 0


def cmd_handout(args: argparse.Namespace) -> int:
    from cs_basics.harness.config import Assignment
    from cs_basics.harness.course import handout

    assignment = Assignment.find(args.project)
    out = args.out.resolve()
    try:
        removed = handout.build(assignment, out, force=args.force)
    except handout.HandoutError as err:
        print(f"cs-basics handout: {err}", file=sys.stderr)
        return 2
    print(f"wrote the handout to {out} ({len(removed)} solution lines cut)")
    if args.no_check:
        return 0
    most = handout.max_score(assignment)
    print(f"checking it: no solution line, `uv run pytest` fails every graded test, grades 0 and {most:g} ...")
    problems = handout.check(assignment, out, removed)
    for problem in problems:
        print(f"cs-basics handout: {problem}", file=sys.stderr)
    print("the handout checks out" if not problems else f"{len(problems)} problems with the handout")
    return 1 if problems else 0


def cmd_autograder(args: argparse.Namespace) -> int:
    from cs_basics.harness.config import Assignment
    from cs_basics.harness.course import bundle, prairielearn

    assignment = Assignment.find(args.project)
    if args.platform == "prairielearn":
        try:
            files = prairielearn.build(assignment, args.out, args.image)
        except (prairielearn.PrairieLearnError, bundle.BundleError) as err:
            print(f"cs-basics autograder: {err}", file=sys.stderr)
            return 2
        print(
            f"wrote {args.out}: a PrairieLearn question, its grader in serverFilesCourse/ and the grading image's "
            f"Dockerfile ({len(files)} files); build and push the image as {args.out / 'README.md'} says"
        )
        if args.image == prairielearn.DEFAULT_IMAGE:
            print(f"cs-basics autograder: name your image with --image (info.json says {args.image})", file=sys.stderr)
        return 0
    try:
        names = bundle.build(assignment, args.out)
    except bundle.BundleError as err:
        print(f"cs-basics autograder: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: setup.sh, run_autograder and {len(names) - 2} course files")
    return 0


def add_grade_options(parser: argparse.ArgumentParser) -> None:
    from cs_basics.harness.grading.sandbox.limits import Limits

    parser.add_argument("--device", default=None, help="cuda, mps or cpu (default: the best present)")
    defaults = Limits()
    parser.add_argument(
        "--case-seconds",
        type=float,
        default=defaults.case_seconds,
        help="time limit per test case (default %(default)s)",
    )
    parser.add_argument(
        "--total-seconds",
        type=float,
        default=defaults.total_seconds,
        help="time limit per submission (default %(default)s)",
    )
    parser.add_argument(
        "--timeouts-per-problem",
        type=int,
        default=defaults.timeouts_per_problem,
        help="after this many cases of a problem ran out of time, its other cases are not run (default %(default)s)",
    )
    parser.add_argument(
        "--sandbox",
        choices=["bubblewrap", "fallback"],
        default=None,
        help="where the submission's code runs (default $CS_BASICS_SANDBOX, else bubblewrap where it runs)",
    )
    parser.add_argument(
        "--memory-mb",
        type=int,
        default=4096,
        help="what the student's code may allocate in MiB, 0: no limit; lowered to what the container leaves",
    )
    parser.add_argument(
        "--tmp-mb",
        type=positive,
        default=defaults.tmp_mb,
        help="what the job's /tmp, /var/tmp, /dev/shm and working folder may hold together (default %(default)s)",
    )
    parser.add_argument("--quiet", action="store_true", help="no table, just the total")
    parser.add_argument(
        "--release",
        action="append",
        default=[],
        metavar="PROBLEM",
        help="grade PROBLEM normally although its code reaches into the interpreter (after reading it); repeatable",
    )


def cmd_experiments(args: argparse.Namespace) -> int:
    from cs_basics.study.experiments import run

    try:
        run(args.out, seed=args.seed, quick=args.quick, root=args.project)
    except NotImplementedError:
        return not_written_yet("experiments")
    return 0


def not_written_yet(command: str) -> int:
    print(
        f"cs-basics {command}: the attention behind tests/adapters.py raises NotImplementedError;"
        " write scaled_dot_product_attention in cs_basics/nn/functional.py first",
        file=sys.stderr,
    )
    return 1


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def cmd_bench(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cs_basics.harness.device import choose_device
    from cs_basics.study import bench

    try:
        device = str(choose_device(args.device))
    except ValueError as err:
        print(f"cs-basics bench: {err}", file=sys.stderr)
        return 2
    config = bench.Config(
        impl=args.impl,
        device=device,
        dtype=args.dtype,
        seqs=args.seq,
        batch=args.batch,
        heads=args.heads,
        head_dim=args.head_dim,
        repeats=args.repeats,
        memory=args.memory,
        max_backward_gib=args.max_backward_gib,
    )
    try:
        result = bench.run(config, args.project)
    except NotImplementedError:
        if args.impl == "flash":
            print("cs-basics bench: cs_basics/study/flash.py (an extra) is not written yet", file=sys.stderr)
            return 1
        return not_written_yet("bench")
    Console().print(bench.table(result))
    if args.json:
        bench.write_json(result, args.json)
    if args.plot:
        bench.plot(result, args.plot)
    return 0


def add_study_commands(sub, project: dict) -> None:
    """`experiments` and `bench`: the course's experiments as figures, and the benchmark."""
    exp = sub.add_parser("experiments", help="the attention experiments as PNG figures and a summary")
    exp.add_argument("--out", type=Path, default=Path("figures"), help="folder for the PNGs (default: figures)")
    exp.add_argument("--seed", type=int, default=0)
    exp.add_argument("--quick", action="store_true", help="few draws: a smoke test, not a result")
    exp.add_argument("--project", **project)
    exp.set_defaults(func=cmd_experiments)
    b = sub.add_parser("bench", help="time and memory of your attention against torch's fused SDPA")
    b.add_argument(
        "--impl",
        choices=["adapter", "flash"],
        default="adapter",
        help="what to measure: adapter, your attention behind tests/adapters.py (default); flash, the study "
        "kernel in cs_basics/study/flash.py (blocked, FlashAttention-2's algorithm)",
    )
    b.add_argument("--device", default=None, help="cuda, mps or cpu (default: the best present)")
    b.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16", "float64"])
    b.add_argument("--seq", type=positive, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192])
    b.add_argument("--batch", type=positive, default=4)
    b.add_argument("--heads", type=positive, default=8)
    b.add_argument("--head-dim", type=positive, default=64)
    b.add_argument("--repeats", type=positive, default=5)
    b.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak-memory measurement")
    b.add_argument(
        "--max-backward-gib",
        type=float,
        default=None,
        help="skip your forward+backward where the scores would pass this many GiB (an attention that keeps them all)",
    )
    b.add_argument("--json", type=Path, default=None, help="write the results (with leaderboard entries) here")
    b.add_argument("--plot", type=Path, default=None, help="write a log-log PNG of time and memory here")
    b.add_argument("--project", **project)
    b.set_defaults(func=cmd_bench)


def cmd_gradebook(args: argparse.Namespace) -> int:
    from cs_basics.harness.config import Assignment
    from cs_basics.harness.course.gradebook import GradebookError, fill
    from cs_basics.harness.grading.writers.results import printable

    try:
        filled = fill(
            Assignment.find(args.project),
            args.results,
            args.lms,
            args.roster,
            args.column,
            args.out,
            key=args.key,
            gradescope_metadata=args.gradescope_metadata,
            mapping=args.mapping,
            submitter_field=args.submitter_field,
            add_column=args.add_column,
            points_possible=args.points_possible,
            encoding=args.encoding,
        )
    except GradebookError as err:
        print(printable(f"cs-basics gradebook: {err}"), file=sys.stderr)
        return 2
    done, todo = filled.report()
    print(printable("\n".join(done)))
    if todo:
        print(
            printable("\n".join(["cs-basics gradebook: the file is written, but not every grade is in it", *todo])),
            file=sys.stderr,
        )
    return 0 if filled.complete else 1


def add_gradebook_command(sub, project: dict) -> None:
    """`gradebook`: one assignment column of a Canvas or Moodle gradebook export, filled from a results folder.
    Its choices are checked by harness/course/gradebook.py, which is not imported here: it imports torch."""
    gb = sub.add_parser(
        "gradebook",
        help="fill one assignment column of a Canvas or Moodle gradebook export with a results folder's grades",
        description="Write --out: the export --roster with one column's cells filled, every other byte kept."
        " Exit status 0: every student has their grade; 1: written, but some cells were left as they were"
        " (listed: held, unfinished, excused, two submissions, no submission) or some submissions match no"
        " student; 2: nothing written (a missing or wrong file, named).",
    )
    gb.add_argument("results", type=Path, help="a results folder (cs-basics grade --submission FOLDER --results DIR)")
    gb.add_argument("--lms", required=True, help="whose gradebook export --roster is: canvas or moodle")
    gb.add_argument("--roster", type=Path, required=True, help="the LMS's gradebook export (CSV), read only")
    gb.add_argument("--column", required=True, help="the assignment column to fill (Canvas: `Title (id)` or Title)")
    gb.add_argument("--out", type=Path, required=True, help="the CSV to write and import (a new file)")
    gb.add_argument(
        "--key",
        default=None,
        help="the roster column that identifies students (default: Canvas's SIS Login ID, Moodle's Email address);"
        " each submission's folder name is matched to it unless --mapping or --gradescope-metadata says otherwise",
    )
    which = gb.add_mutually_exclusive_group()
    which.add_argument(
        "--gradescope-metadata",
        type=Path,
        default=None,
        help='submission_metadata.yml of Gradescope\'s "Download submissions" export: folders to submitters',
    )
    which.add_argument("--mapping", type=Path, default=None, help="a CSV: submission name, roster identifier")
    gb.add_argument(
        "--submitter-field",
        default="email",
        help="which submitter field of --gradescope-metadata (email, sid or name) is in the --key column"
        " (default %(default)s)",
    )
    gb.add_argument("--add-column", action="store_true", help="Canvas: add --column if the export has no such one")
    gb.add_argument(
        "--points-possible",
        type=float,
        default=None,
        help="what full marks are in the LMS (Moodle: the grade item's maximum grade; Canvas: a new column's);"
        " default: the course's maximum",
    )
    gb.add_argument("--encoding", default="utf-8", help="the export's text encoding (default %(default)s)")
    gb.add_argument("--project", **project)
    gb.set_defaults(func=cmd_gradebook)


SHARD_HELP = (
    "grade the I-th of N slices of a folder of submissions (I from 1 to N); without it, a Kubernetes Indexed Job"
    " (JOB_COMPLETION_INDEX, CS_BASICS_SHARDS) or a Slurm array (SLURM_ARRAY_TASK_*) chooses; 1/1: the whole folder"
)


def shard_option(text: str):
    from cs_basics.harness.course.shards import ShardError, parse_shard

    try:
        return parse_shard(text)
    except ShardError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cs-basics", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    project = {"type": Path, "default": None, "help": "assignment folder (default: the nearest)"}

    fixtures = sub.add_parser(
        "fixtures", help="make the fixtures from the float64 oracle, keeping files that agree within rounding"
    )
    fixtures.add_argument("--project", **project)
    fixtures.set_defaults(func=cmd_fixtures)

    new = sub.add_parser("new", help="a next assignment's skeleton (one problem, its cases and fixtures) that passes")
    new.add_argument("out", type=Path, help="a new folder; its name names the project and the student's package")
    new.add_argument(
        "--harness",
        default=None,
        help="the cs-basics source for [tool.uv.sources], as TOML (default: where this cs-basics came from: this "
        "checkout by a relative path, editable; a git repository at its commit; none from a package index), "
        'e.g. \'{ git = "https://github.com/COURSE/cs_basics", tag = "v1" }\'',
    )
    new.set_defaults(func=cmd_new)

    check = sub.add_parser(
        "check-cases",
        help="the reference's share of each tolerance, every known mistake failing a case and named there, "
        "and no answer computed by what the handout ships",
    )
    check.add_argument("--project", **project)
    check.set_defaults(func=cmd_check_cases)

    grade = sub.add_parser("grade", help="grade a submission (or a folder of them) into Gradescope's results format")
    grade.add_argument("--submission", type=Path, default=None, help="a student's copy, or a folder of them")
    grade.add_argument(
        "--results", type=Path, default=None, help="Gradescope's results.json (a folder for many submissions)"
    )
    grade.add_argument(
        "--format",
        action="append",
        default=[],
        metavar="NAME[=PATH]",
        help="write the grade for a platform: gradescope (results.json), prairielearn (prairielearn-results.json; "
        "/grade/results/results.json on PrairieLearn), github-classroom ($GITHUB_OUTPUT), junit (junit.xml); "
        "repeatable, one grading for all. Default: the platform found (/autograder, /grade, GITHUB_ACTIONS=true), "
        "else gradescope",
    )
    grade.add_argument(
        "--workers",
        type=int,
        default=None,
        help="parallel gradings for many submissions (default: one per core the grader may use, as memory allows)",
    )
    grade.add_argument("--shard", type=shard_option, default=None, help=SHARD_HELP)
    grade.add_argument("--force", action="store_true", help="grade again submissions whose grade is up to date")
    grade.add_argument("--project", **project)
    add_grade_options(grade)
    grade.set_defaults(func=cmd_grade)

    report = sub.add_parser("report", help="item analysis of a folder of results.json files (any Gradescope run)")
    report.add_argument("folder", type=Path, help="results folder: <name>.json or <name>/results.json files")
    report.add_argument("--out", type=Path, default=None, help="where to write items.csv etc. (default: FOLDER)")
    report.set_defaults(func=cmd_report)

    merge = sub.add_parser("merge", help="one scores.csv and item analysis from several shards' results folders")
    merge.add_argument("folders", type=Path, nargs="+", help="the shards' results folders")
    merge.add_argument("--out", type=Path, required=True, help="a folder for the merged results")
    merge.add_argument(
        "--submissions",
        type=Path,
        default=None,
        help="the course's folder of submissions: write what the shards hold, name each submission without a"
        " completed grade and exit 1 (a shard that failed or ran out of time); a shard's folder may be missing",
    )
    merge.add_argument(
        "--shards", type=positive, default=None, help="the number of shards: name the shard of each one missing"
    )
    merge.set_defaults(func=cmd_report)

    handout = sub.add_parser("handout", help="cut the student handout from this solution repository, and check it")
    handout.add_argument("out", type=Path, help="a new folder for the handout")
    handout.add_argument("--no-check", action="store_true", help="skip the checks (uv run pytest, grading)")
    handout.add_argument("--force", action="store_true", help="replace the folder if it exists")
    handout.add_argument("--project", **project)
    handout.set_defaults(func=cmd_handout)

    autograder = sub.add_parser("autograder", help="build the Gradescope autograder zip, or a PrairieLearn question")
    autograder.add_argument("out", type=Path, help="the zip to write, e.g. autograder.zip (prairielearn: a new folder)")
    autograder.add_argument(
        "--platform",
        choices=["gradescope", "prairielearn"],
        default="gradescope",
        help="gradescope: the autograder zip (default); prairielearn: the question folder, the grader for "
        "serverFilesCourse and the grading image's Dockerfile (docs/platforms.md)",
    )
    autograder.add_argument(
        "--image", default="DOCKERHUB_USER/cs-basics-grader:latest", help="prairielearn: the grading image's name"
    )
    autograder.add_argument("--project", **project)
    autograder.set_defaults(func=cmd_autograder)

    add_study_commands(sub, project)
    add_gradebook_command(sub, project)
    return parser


def main(argv: list[str] | None = None) -> int:
    from cs_basics.harness.text import safe_terminal  # light: the commands import what they need themselves

    safe_terminal()  # every command: a name or message the terminal cannot encode prints as an escape, not a crash
    args = build_parser().parse_args(argv)
    grading = argv is None and args.func is cmd_grade  # the command itself, not a caller's import
    if grading:
        from cs_basics.harness.grading.sandbox.litter import become_subreaper, reap_children

        # the orphans of all the grader starts come to it, from its first process on: the probe of bubblewrap
        # leaves its PID namespace's init an orphan (bwrap's outer process ends first), which would otherwise
        # go to a container's init that never reaps it
        become_subreaper()
    status = args.func(args)
    if grading:
        # what the grader adopted as subreaper and what ends after its workers closed (bubblewrap's own processes
        # in a user namespace die with their parent, after it): reaped as it exits, not left to a container's
        # init; only here, where the process ends (a caller's process keeps children of its own)
        reap_children()
        exit_now(status)
    return status


def exit_now(status: int) -> None:
    """End the process once everything it wrote is out: what was registered to run at exit runs, and the
    output is flushed; the interpreter's own teardown, which frees torch's objects one by one (about 0.5 s
    of CPU a process), is skipped."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:  # None where the stream was closed when Python started; a pipe whose reader left raises
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # as the interpreter's own teardown: output lost is an exit status of 120
            status = status or 120
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main())
