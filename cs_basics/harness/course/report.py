"""Item analysis of a course's grades: which cases the class fails, and why.

Reads any folder of Gradescope results files (a batch's `<name>.json`, or `<name>/results.json`,
e.g. results graded elsewhere) and only Gradescope's fields: `score` and each test's `name`, `score`,
`max_score`, `status`, `output`, `tags` (the first tag is the problem) and `visibility`. It writes, into one folder:

- `scores.csv` (merge only; a batch writes its own): each submission's score, the most it could get, and
  why grading did not complete, if it did not;
- `items.csv` (for the staff: it quotes hidden cases' failure messages): per case, how many submissions
  have it, its pass rate, mean and max score, the most common diagnosed mistakes (`(known mistake:
  <name>)` in a failure message) and, for failures without one, the most common first lines of the
  failure message, each with its count, and its visibility;
- `problems.csv`: per problem, the distribution of submissions' scores;
- `totals.png` (a histogram of totals) and `pass_rates.png` (per-case pass rates as bars).

Every CSV cell of text that a spreadsheet would read as a formula gets a leading `'`, and every text shown
in a terminal passes through `printable`: names and messages come from submissions.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import statistics
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cs_basics.harness.course.regrade import EXTRA, stored
from cs_basics.harness.course.shards import shard_of, submission_folders
from cs_basics.harness.grading.writers.results import printable, write_atomic, write_results
from cs_basics.harness.text import printable_data, safe_terminal

SCORES, ITEMS, PROBLEMS = "scores.csv", "items.csv", "problems.csv"
TOTALS_PNG, PASS_RATES_PNG = "totals.png", "pass_rates.png"
MISTAKE = re.compile(r"\(known mistake: ([^()]+?)\)")
TOP = 3  # how many mistakes or failure lines per case
UNTAGGED = "(untagged)"
SCORE_FIELDS = ["submission", "score", "max_score", "held", "error"]
ITEM_FIELDS = ["case", "problem", "submissions", "passed", "pass_rate", "mean_score", "max_score", "mistakes"]
ITEM_FIELDS += ["other_failures", "visibility"]  # hidden cases' rows quote their messages: a staff file
RESULTS_BYTES = 64 << 20  # a results file is at most a few MiB (PrairieLearn's limit is 1 MiB)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a cell a spreadsheet may run (OWASP's CSV injection)
PROBLEM_FIELDS = ["problem", "max_score", "submissions", "mean", "median", "min", "max", "zero", "full"]
PROBLEM_FIELDS += ["distribution"]


class ReportError(ValueError):
    """A folder that holds no results, a file that is not one, or two shards that disagree."""


def read_one(path: Path) -> dict:
    """One results file, every text in it `printable` (a submission's text may hold lone surrogates, NUL,
    escapes), its fields of the types Gradescope's spec gives; ReportError naming the file and the field."""
    try:
        with open(path, "rb") as f:
            raw = f.read(RESULTS_BYTES + 1)
    except OSError as err:
        raise ReportError(f"{path}: cannot be read ({err.strerror})") from None
    if len(raw) > RESULTS_BYTES:
        raise ReportError(f"{path}: over {RESULTS_BYTES >> 20} MiB, too large for a results file")
    try:
        data = json.loads(raw.decode("utf-8", "replace"))  # bytes that are no UTF-8 as U+FFFD
    except (ValueError, RecursionError) as err:
        raise ReportError(f"{path}: not a readable JSON file ({printable(err)[:200]})") from None
    if not isinstance(data, dict) or not {"score", "tests"} & set(data):
        raise ReportError(f"{path}: not a Gradescope results file (neither a `score` nor a `tests` list)")
    tests = data.get("tests", [])
    if not isinstance(tests, list) or not all(isinstance(t, dict) for t in tests):
        raise ReportError(f"{path}: `tests` must be a list of objects, as in Gradescope's results.json")
    wrong = (
        [f"`score` is {printable(repr(data['score']))[:80]}"] if "score" in data and not number(data["score"]) else []
    )
    for i, test in enumerate(tests):
        wrong += [
            f"tests[{i}].{key} is {printable(repr(test[key]))[:80]}"
            for key, ok in FIELDS.items()
            if key in test and not ok(test[key])
        ]
    extra = data.get("extra_data")
    if extra is not None and not (isinstance(extra, dict) and isinstance(extra.get(EXTRA) or {}, dict)):
        wrong.append("`extra_data` is not an object")
    elif not isinstance(stored(data).get("held", []), list) or not isinstance(stored(data).get("error", ""), str):
        wrong.append(f"`extra_data.{EXTRA}` holds no list `held` or no text `error`")
    if wrong:
        raise ReportError(f"{path}: not a Gradescope results file: {'; '.join(wrong[:3])}")
    return printable_data(data)


def number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def text(value: object) -> bool:
    return value is None or isinstance(value, str)  # null: as if absent, as the report reads it


def texts(value: object) -> bool:
    return value is None or (isinstance(value, list) and all(isinstance(v, str) for v in value))


# the fields of a test the report reads, and what each must be
FIELDS = {"name": text, "score": number, "max_score": number, "status": text, "output": text, "tags": texts}
FIELDS["visibility"] = text


def read_folder(folder: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """Submission name -> results, and name -> why its file was passed over (not JSON, fields of the wrong type)."""
    results, bad = {}, {}
    for name, path in results_paths(folder).items():
        try:
            results[name] = read_one(path)
        except ReportError as err:
            bad[name] = str(err)
    return results, bad


def read_or_none(path: Path) -> dict | None:
    """`read_one`, or None where there is no file, or (with a warning) where it is no results file."""
    if not Path(path).exists():
        return None
    try:
        return read_one(path)
    except ReportError as err:
        warn_bad({path: str(err)})
        return None


def warn_bad(bad: Mapping[str, str]) -> None:
    for why in bad.values():
        print(printable(f"warning: passed over {why}"), file=sys.stderr)


def results_paths(folder: Path) -> dict[str, Path]:
    """Submission name -> its results file: `<name>.json` or `<name>/results.json` in the folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ReportError(f"{folder} is not a folder of results files")
    paths = {p.stem: p for p in sorted(folder.glob("*.json")) if not p.name.startswith(".")}
    for path in sorted(folder.glob("*/results.json")):
        if path.parent.name in paths:
            raise ReportError(f"{folder}: both {paths[path.parent.name]} and {path} are results of {path.parent.name}")
        paths[path.parent.name] = path
    if not paths:
        raise ReportError(f"no results files (<name>.json or <name>/results.json) in {folder}")
    return dict(sorted(paths.items()))


def load_folder(folder: Path) -> dict[str, dict]:
    """Submission name -> results: from `<name>.json` and `<name>/results.json` in the folder. A file that is
    no results file is passed over with a warning: one student's file does not stop the course's report."""
    results, bad = read_folder(folder)
    if bad and not results:
        raise ReportError(f"no readable results file in {folder}: " + "; ".join(bad.values()))
    warn_bad(bad)
    return results


def grade_of(data: Mapping) -> tuple:
    """What a grade is, for comparing two gradings of one submission: the scores and statuses (not the
    messages, whose tracebacks name the grading's temporary folder, nor timing or printed output)."""
    return total(data), [
        tuple(t.get(k) for k in ("name", "score", "max_score", "status")) for t in data.get("tests", [])
    ]


def has_results(folder: Path) -> bool:
    """Whether `load_folder` finds any results in it."""
    named = [p for p in folder.glob("*.json") if not p.name.startswith(".")]
    return folder.is_dir() and bool(named or [*folder.glob("*/results.json")])


def merge_results(folders: list[Path], allow_empty: bool = False, bad: dict | None = None) -> dict[str, dict]:
    """The results of several folders (a course's shards); a submission in two of them must have one grade.
    `allow_empty`: a folder that is missing or holds no results (a shard that never ran) is passed over.
    A file that is no results file is passed over with a warning, and `bad` gets its name and why."""
    merged: dict[str, dict] = {}
    where: dict[str, Path] = {}
    bad = {} if bad is None else bad
    for folder in folders:
        if allow_empty and not has_results(Path(folder)):
            print(printable(f"warning: {folder} holds no results files (a shard that did not run?)"), file=sys.stderr)
            continue
        found, passed_over = read_folder(folder)
        warn_bad(passed_over)
        bad.update(passed_over)
        for name, data in found.items():
            if name in merged and grade_of(merged[name]) != grade_of(data):
                raise ReportError(
                    f"{name} was graded in both {where[name]} and {folder} with different results "
                    f"(score {total(merged[name]):g} and {total(data):g}, or different tests): "
                    "delete the results file you do not trust and merge again"
                )
            merged.setdefault(name, data)
            where.setdefault(name, folder)
    for name in merged:  # a good file in another shard stands
        bad.pop(name, None)
    return dict(sorted(merged.items()))


def total(data: Mapping) -> float:
    """Gradescope's rule: the top-level `score` if given, else the sum of the tests' scores."""
    return data["score"] if "score" in data else sum(t.get("score", 0.0) for t in data.get("tests", []))


def passed(test: Mapping) -> bool:
    if "status" in test:
        return test["status"] == "passed"
    return test.get("score", 0.0) >= test.get("max_score", 0.0)


def problem_of(test: Mapping) -> str:
    return (test.get("tags") or [UNTAGGED])[0]


def score_row(name: str, data: Mapping) -> dict:
    """One line of scores.csv; `error` is what the batch stamped when grading did not complete."""
    error = stored(data).get("error", "")
    most = round(sum(t.get("max_score", 0.0) for t in data.get("tests", [])), 3)
    held = " ".join((data.get("extra_data") or {}).get("cs_basics", {}).get("held", []))  # for the staff to read
    return {"submission": name, "score": total(data), "max_score": most, "held": held, "error": error}


def csv_text(rows: list[dict], fields: list[str]) -> str:
    text = io.StringIO()
    # CRLF, as RFC 4180 has it: Python's csv then quotes a cell holding a carriage return, which a spreadsheet
    # would read as the end of a row (and the next "row" could start with "=")
    writer = csv.DictWriter(text, fieldnames=fields, lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(
        {key: inert(printable(value) if isinstance(value, str) else value) for key, value in row.items()}
        for row in rows
    )
    return text.getvalue()


def inert(cell: object) -> object:
    """A text cell a spreadsheet would read as a formula (`=cmd|' /C calc'!A0`, a submission's folder name),
    with a leading `'`; numbers stay numbers."""
    return f"'{cell}" if isinstance(cell, str) and cell.startswith(FORMULA_STARTS) else cell


def write_scores(path: Path, rows: list[dict]) -> None:
    write_atomic(path, csv_text(sorted(rows, key=lambda r: r["submission"]), SCORE_FIELDS))


def counted(counter: Counter) -> str:
    """`a (3); b (1)`: the most common first, ties by name, so every run writes the same."""
    ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]
    return "; ".join(f"{key} ({n})" for key, n in ranked)


def failure_line(output: str) -> str:
    """The message's first line; when it only introduces a traceback ("...failed to import:"), with the
    exception it ends on."""
    lines = [line.rstrip() for line in output.strip().splitlines()] or ["(no message)"]
    if lines[0].endswith(":"):
        raised = [line for line in lines[1:] if line and not line[0].isspace() and not line.startswith("Traceback")]
        return f"{lines[0]} {raised[-1]}" if raised else lines[0]
    return lines[0]


def item_rows(results: Mapping[str, Mapping]) -> list[dict]:
    """Per case (Gradescope test name), in the order the results list them."""
    by_case: dict[str, list[Mapping]] = {}
    for name in sorted(results):
        for i, test in enumerate(results[name].get("tests", [])):
            by_case.setdefault(test.get("name") or f"(test {i + 1})", []).append(test)
    rows = []
    for case, tests in by_case.items():
        mistakes, lines = Counter(), Counter()
        for test in tests:
            if passed(test):
                continue
            output = test.get("output") or ""
            named = MISTAKE.findall(output)
            mistakes.update(named)
            if not named:
                lines[failure_line(output)] += 1
        n_passed = sum(passed(t) for t in tests)
        rows.append(
            {
                "case": case,
                "problem": problem_of(tests[0]),
                "visibility": tests[0].get("visibility", "visible"),
                "submissions": len(tests),
                "passed": n_passed,
                "pass_rate": round(n_passed / len(tests), 4),
                "mean_score": round(statistics.fmean(t.get("score", 0.0) for t in tests), 4),
                "max_score": max(t.get("max_score", 0.0) for t in tests),
                "mistakes": counted(mistakes),
                "other_failures": counted(lines),
            }
        )
    return rows


def distribution(scores: list[float], most: float) -> str:
    """`score: count` for each score reached, or for 5 equal bins of [0, most] when there are many."""
    values = sorted(set(scores))
    if len(values) <= 6 or most <= 0:
        return ", ".join(f"{v:g}: {scores.count(v)}" for v in values)
    bins = Counter(min(int(5 * s / most), 4) for s in scores)  # the top bin holds full marks
    return ", ".join(f"{most * i / 5:.3g}-{most * (i + 1) / 5:.3g}: {bins[i]}" for i in range(5))


def problem_rows(results: Mapping[str, Mapping]) -> list[dict]:
    """Per problem, then the total: each submission's score on it, summarized."""
    per: dict[str, dict[str, list[float]]] = {}
    for name in sorted(results):
        mine: dict[str, list[float]] = {}
        for test in results[name].get("tests", []):
            got = mine.setdefault(problem_of(test), [0.0, 0.0])
            got[0] += test.get("score", 0.0)
            got[1] += test.get("max_score", 0.0)
        mine["total"] = [total(results[name]), sum(m for _, m in mine.values())]
        for problem, (score, most) in mine.items():
            per.setdefault(problem, {"scores": [], "most": []})
            per[problem]["scores"].append(round(score, 3))  # as scores.csv: 24 cases' shares sum to 4.99999
            per[problem]["most"].append(round(most, 3))
    rows = []
    for problem in sorted(per, key=lambda p: p == "total"):  # the total last, the problems as first listed
        scores, most = per[problem]["scores"], max(per[problem]["most"])
        rows.append(
            {
                "problem": problem,
                "max_score": most,
                "submissions": len(scores),
                "mean": round(statistics.fmean(scores), 4),
                "median": statistics.median(scores),
                "min": min(scores),
                "max": max(scores),
                "zero": sum(s == 0 for s in scores),
                "full": sum(s >= most for s in scores),
                "distribution": distribution(scores, most),
            }
        )
    return rows


@dataclass
class Analysis:
    items: list[dict]
    problems: list[dict]
    totals: list[float]
    max_total: float
    files: list[Path]


def warm_figures() -> None:
    """Import matplotlib and load its font now, ahead of `analyse` (about half its time): a batch does it on the
    core its last submissions leave idle."""
    from matplotlib import font_manager
    from matplotlib.backends import backend_agg  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401

    font_manager.get_font(font_manager.findfont(font_manager.FontProperties()))


def figure(width: float, height: float):
    """A figure on matplotlib's Agg canvas: no display, no pyplot state shared with the caller."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def save(fig, path: Path) -> None:
    fig.savefig(path, dpi=90, metadata={"Software": None}, bbox_inches="tight")  # no version: the same bytes


def plot_totals(totals: list[float], most: float, path: Path) -> None:
    from matplotlib.ticker import MaxNLocator

    fig, ax = figure(7, 4)
    ax.hist(totals, bins=20, range=(0, most or 1), color="C0", rwidth=0.9)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(title=f"totals of {len(totals)} submissions", xlabel=f"score (of {most:g})", ylabel="submissions")
    save(fig, path)


def label(text: str, most: int = 60) -> str:
    """A name as a figure's label: cut short, and its `$` escaped (matplotlib would read `$...$` as mathtext,
    and refuse a name that is no valid formula)."""
    text = text if len(text) <= most else text[: most - 1] + "…"
    return text.replace("$", r"\$")


def plot_pass_rates(items: list[dict], path: Path) -> None:
    from matplotlib.patches import Patch

    colors = {p: f"C{i}" for i, p in enumerate(dict.fromkeys(r["problem"] for r in items))}
    fig, ax = figure(8, 1.2 + 0.25 * len(items))
    y = list(range(len(items)))[::-1]  # the first case on top
    ax.barh(y, [100 * r["pass_rate"] for r in items], color=[colors[r["problem"]] for r in items])
    ax.set_yticks(y, [label(r["case"]) for r in items], fontsize=7)
    ax.set(xlim=(0, 100), xlabel="% of submissions passing", title="pass rate per case")
    ax.legend(handles=[Patch(color=c, label=p) for p, c in colors.items()], fontsize=7)
    save(fig, path)


def analyse(results: Mapping[str, Mapping], out: Path, figures: bool = True) -> Analysis:
    """Write items.csv, problems.csv and the two PNGs into `out` (the PNGs only when there is a result, and
    `figures` is asked: a shard's would draw its slice of the course, which the merge draws whole)."""
    out = Path(out)
    items, problems = item_rows(results), problem_rows(results)
    totals = [total(results[name]) for name in sorted(results)]
    most = max((r["max_score"] for r in problems if r["problem"] == "total"), default=0.0)
    write_atomic(out / ITEMS, csv_text(items, ITEM_FIELDS))
    write_atomic(out / PROBLEMS, csv_text(problems, PROBLEM_FIELDS))
    files = [out / ITEMS, out / PROBLEMS]
    if results and figures:
        plot_totals(totals, most, out / TOTALS_PNG)
        plot_pass_rates(items, out / PASS_RATES_PNG)
        files += [out / TOTALS_PNG, out / PASS_RATES_PNG]
    else:  # an earlier run's figures in the same folder would show another course, or the whole of it
        for name in (TOTALS_PNG, PASS_RATES_PNG):
            (out / name).unlink(missing_ok=True)
    return Analysis(items, problems, totals, most, files)


def print_analysis(analysis: Analysis, console: Console | None = None, caption: str | None = None) -> None:
    safe_terminal()
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title="cases: how the class did", caption=caption)
    table.add_column("case", no_wrap=True)
    table.add_column("passed", justify="right", no_wrap=True)
    table.add_column("mean/max", justify="right", no_wrap=True)
    table.add_column("most common failures (known mistakes first)", min_width=40)
    for r in analysis.items:
        why = "; ".join(x for x in (r["mistakes"], r["other_failures"]) if x)
        share = f"{r['passed']}/{r['submissions']} ({100 * r['pass_rate']:.0f}%)"
        case = escape(printable(r["case"]))
        table.add_row(case, share, f"{r['mean_score']:.3g}/{r['max_score']:.3g}", escape(printable(why[:160])))
    console.print(table)
    table = Table(title="problems: distribution of scores")
    for column in ("problem", "of", "mean", "median", "min", "max", "zero", "full", "score: submissions"):
        table.add_column(column, justify="left" if column in ("problem", "score: submissions") else "right")
    for r in analysis.problems:
        stats = [f"{r[k]:.3g}" for k in ("max_score", "mean", "median", "min", "max")]
        problem, spread = (escape(printable(r[k])) for k in ("problem", "distribution"))
        table.add_row(problem, *stats, str(r["zero"]), str(r["full"]), spread)
    console.print(table)
    if analysis.files:
        console.print(escape(printable("wrote " + ", ".join(str(p) for p in analysis.files))))


def stamped_parts(results: Mapping[str, Mapping]) -> set[tuple]:
    """The distinct course, fixtures, grader and settings hashes the results were graded with."""
    found = set()
    for data in results.values():
        parts = stored(data).get("parts")
        if parts:
            found.add(tuple(sorted((k, v) for k, v in parts.items() if k != "submission")))
    return found


def unfinished(results: Mapping[str, Mapping], submissions: list[str]) -> dict[str, str]:
    """The course's submissions without a completed grade, and why: no results file, or one whose grading
    did not complete (the batch stamps why into it, and a fingerprint only into a completed one)."""
    why = {}
    for name in submissions:
        ours = stored(results.get(name))
        if name not in results:
            why[name] = "no results file"
        elif ours.get("error") or not ours.get("fingerprint"):
            why[name] = ours.get("error") or "its grading did not complete (no fingerprint)"
    return why


def unfinished_message(missing: Mapping[str, str], submissions: list[str], shards: int | None) -> str:
    """What to tell the staff: each submission without a grade and, given the number of shards, its shard."""
    shard = {name: shard_of(submissions, name, shards) for name in missing} if shards else {}
    lines = [
        f"  {name}" + (f" (shard {shard[name]}/{shards})" if shards else "") + f": {why}"
        for name, why in missing.items()
    ]
    again = "re-run their shards"
    if shards:
        rerun = ",".join(map(str, sorted(set(shard.values()))))
        again = f"re-run shards {rerun} (Slurm: sbatch --array={rerun} grade.sbatch)"
    return f"{len(missing)} of {len(submissions)} submissions have no completed grade; {again}, then merge again:\n" + (
        "\n".join(lines)
    )


def merge(folders: list[Path], out: Path, submissions: Path | None = None) -> dict[str, str]:
    """One results folder from several shards': every results file, scores.csv and the item analysis.
    Given the course's folder of submissions, a shard that did not run or finish is no error: what exists is
    written, and the submissions without a completed grade are returned with why (empty: all graded)."""
    out = Path(out)
    if any(out.resolve() == Path(f).resolve() for f in folders):
        raise ReportError(f"--out {out} is one of the folders being merged: choose a new folder")
    if submissions is not None and not Path(submissions).is_dir():
        raise ReportError(f"--submissions {submissions} is not a folder of submissions")
    bad: dict[str, str] = {}
    results = merge_results(folders, allow_empty=submissions is not None, bad=bad)
    if len(stamped_parts(results)) > 1:
        print(
            "warning: these results were not all graded with the same course, fixtures, grader "
            "and settings (their fingerprints differ in more than the submission)"
        )
    for name, data in results.items():
        write_results(out / f"{name}.json", data)
    unreadable = [
        {"submission": name, "score": 0.0, "max_score": 0.0, "held": "", "error": why} for name, why in bad.items()
    ]
    write_scores(out / SCORES, [score_row(name, data) for name, data in results.items()] + unreadable)
    print_analysis(analyse(results, out), caption=f"{len(results)} submissions from {len(folders)} folders")
    print(printable(f"merged {len(results)} submissions into {out / SCORES}"))
    if submissions is None:
        return {}
    missing = unfinished(results, [p.name for p in submission_folders(Path(submissions))])
    return {name: "its results file was passed over" if name in bad else why for name, why in missing.items()}
