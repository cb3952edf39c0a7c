"""The adversarial set: solutions in the styles real students use, each with the verdict it deserves.

`staff_tests/students/<name>/` is laid out as a submission (`cs_basics/nn/functional.py`, other modules
as the style needs) with an `expected.toml`, written from the contract (docs/student/README.md) before
the solution was graded:

    style = "nn.Module classes called as self.softmax(x)"
    from_scratch = true                  # false: a problem breaks the rule (its points say which)
    [points]                             # per problem: "full", "zero", "partial" (between), or a number
    softmax = "full"
    [fails]                              # optional: exactly the cases of a problem that must fail
    scaled_dot_product_attention = ["scaled_dot_product_attention-float16"]
    [passes]                             # optional: exactly the cases of a problem that must pass
    [diagnosis]                          # optional: the known mistake its failures name, or "none"
    scaled_dot_product_attention = "fill_overflows_float16"
    [crash]                              # optional: text each crash's message must hold (a contract sentence)
    scaled_dot_product_attention = "-1e9 does not fit in float16"
    [channel]                            # optional: what a hostile submission forged on the grader's channel
    staff_error_text = "full marks by hand"  # its text, which no result may give as the reason grading stopped

`grade_all` grades the whole set in one batch run of `cs-basics grade`; `judge` compares one solution's
results.json with its expectation. The staff test and benchmarks/adversarial_set.py both use them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDENTS = Path(__file__).resolve().parent / "students"
KNOWN = re.compile(r"\(known mistake: (\w+)\)")
CRASHED = "your code raised "
CONTRACT = "This case passed "
STOPPED = "grading stopped"  # a placeholder's reason: the grader's own error, never the submission's text


@dataclass
class Judgement:
    name: str
    verdicts_right: int = 0  # problems whose points are the deserved ones
    problems: int = 0
    named: int = 0  # problems whose expected known mistake is named
    to_name: int = 0
    wrong_names: list[str] = field(default_factory=list)  # "case: mistake" named where another was expected
    crashes: int = 0
    crashes_explained: int = 0  # crashes whose message has a contract sentence (and the expected text)
    problems_found: list[str] = field(default_factory=list)  # what is not as expected, in words


def load(folder: Path) -> dict:
    return tomllib.loads((folder / "expected.toml").read_text())


def solutions() -> list[Path]:
    return sorted(p for p in STUDENTS.iterdir() if (p / "expected.toml").is_file())


def grade_all(
    results: Path, workers: int = 2, shard: str | None = None, timeout: float = 900
) -> subprocess.CompletedProcess:
    """Grade every solution of the set (or the `shard`, "I/N", of it) into `results/<name>.json` in one batch run."""
    command = [sys.executable, "-m", "cs_basics.cli", "grade", "--submission", str(STUDENTS)]
    command += ["--results", str(results), "--workers", str(workers), "--force"]
    command += ["--shard", shard] if shard else []
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def deserved(rule: str | float, score: float, full: float) -> bool:
    if rule == "full":
        return abs(score - full) < 1e-6
    if rule == "zero":
        return abs(score) < 1e-6
    if rule == "partial":
        return 1e-6 < score < full - 1e-6
    return abs(score - float(rule)) < 1e-3


def judge(folder: Path, results: dict, cases: dict[str, object], points: dict[str, float]) -> Judgement:
    """One solution's results.json against its expected.toml. `cases`: test name -> case."""
    expected, j = load(folder), Judgement(folder.name)
    tests = [(cases[t["name"]], t) for t in results.get("tests", []) if t["name"] in cases]
    # a hidden case's entry says passed or failed only; its message, as the staff read it, is in extra_data
    kept = results.get("extra_data", {}).get("cs_basics", {}).get("hidden_messages", {})
    for problem, full in points.items():
        mine = [(c, t) for c, t in tests if c.problem == problem]
        score = sum(t["score"] for _, t in mine)
        failed = {c.id: kept.get(t["name"], t["output"]) for c, t in mine if t["score"] < t["max_score"] - 1e-9}
        j.problems += 1
        right = deserved(expected["points"][problem], score, full)
        fails = expected.get("fails", {}).get(problem)
        passes = expected.get("passes", {}).get(problem)
        if passes is not None:
            fails = [c.id for c, _ in mine if c.id not in passes]
        if fails is not None and set(fails) != set(failed):
            right = False
            j.problems_found.append(f"{problem}: failed {sorted(failed)}, expected {sorted(fails)}")
        if not right:
            j.problems_found.append(f"{problem}: {score:g} of {full:g} points, expected {expected['points'][problem]}")
        j.verdicts_right += right
        mistake = expected.get("diagnosis", {}).get(problem)
        names = {case: KNOWN.findall(output) for case, output in failed.items()}
        if mistake is not None:
            # several named together as giving the same numbers here is no wrong name when the right one is among them
            wrong = [f"{case}: {n}" for case, found in names.items() if mistake not in found for n in found]
            j.wrong_names += wrong
            if mistake != "none":
                j.to_name += 1
                j.named += any(mistake in found for found in names.values())
        for case, output in failed.items():
            if output.startswith(CRASHED):
                j.crashes += 1
                text = expected.get("crash", {}).get(problem, CONTRACT)
                explained = CONTRACT in output and text in output
                j.crashes_explained += explained
                if not explained:
                    j.problems_found.append(f"{case}: crash without the contract sentence {text!r}")
    j.problems_found += [f"wrong diagnosis {w}" for w in j.wrong_names]
    forged = expected.get("channel", {}).get("staff_error_text")
    texts = [str(results.get("output", "")), *(str(t.get("output", "")) for t in results.get("tests", []))]
    if forged and any(STOPPED in text and forged in text for text in texts):
        j.problems_found.append(f"the submission's own text stopped grading as the grader's error: {forged!r}")
    return j


def judge_all(results_dir: Path, folders: list[Path] | None = None) -> list[Judgement]:
    """Every solution's results in `results_dir` judged (or those of `folders`)."""
    from cs_basics.harness.config import Assignment
    from cs_basics.harness.grading.writers import results as results_module

    assignment = Assignment.find(ROOT)
    cases = {results_module.test_name(c): c for c in assignment.cases}
    problems = {name: float(table["points"]) for name, table in assignment.table["problems"].items()}
    judged = []
    for folder in solutions() if folders is None else folders:
        path = results_dir / f"{folder.name}.json"
        data = json.loads(path.read_text()) if path.is_file() else {}
        judged.append(judge(folder, data, cases, problems))
    return judged


def summary(judged: list[Judgement]) -> dict[str, str]:
    def total(attr: str) -> int:
        return sum(getattr(j, attr) for j in judged)

    return {
        "solutions": str(len(judged)),
        "verdicts right": f"{total('verdicts_right')} of {total('problems')} problem verdicts",
        "diagnoses named": f"{total('named')} of {total('to_name')}",
        "diagnoses wrong": str(sum(len(j.wrong_names) for j in judged)),
        "crashes with a contract sentence": f"{total('crashes_explained')} of {total('crashes')}",
    }
