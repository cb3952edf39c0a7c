"""The harness, in four layers; each imports only the layers below it (`lint-imports` checks it).

- `cs_basics.harness` (this folder's modules): an assignment's test library. Cases and their checks
  (`cases`), problems that are no function of tensors (`kinds`), comparison (`compare`), the fixture
  store and its generation (`fixtures`, `generate`), the course's declaration (`config`), the device
  (`device`), known mistakes (`diagnosis`), the memory cgroup the grader runs in (`cgroup`).
  What an assignment's tests import, in one short path: `from cs_basics.harness import Problem, Tolerance, graded`.
- `harness.rule`: the from-scratch rule (what a problem's code names, what its cases run).
- `harness.pytest_plugin`: the students' pytest run, which applies the rule as the grader does.
- `harness.grading`: the grader of one untrusted submission (staging, the sandbox, its server and
  child, results).
- `harness.course`: a course's tools (batches, shards, re-grades, the item analysis, the handout and
  the Gradescope bundle), with `cs_basics.cli` on top.
"""

from __future__ import annotations

import importlib

# name -> the module of the test library that defines it; imported on first use, so that importing one
# module of the harness (the grader's child imports the rule) does not import the whole library
EXPORTS = {
    "Case": "cases",
    "CheckContext": "cases",
    "Tensors": "cases",
    "Tolerances": "cases",
    "check_outputs": "cases",
    "randn": "cases",
    "run_case": "cases",
    "Tolerance": "compare",
    "assert_close": "compare",
    "mismatch": "compare",
    "Assignment": "config",
    "FixtureStore": "fixtures",
    "FixtureError": "fixtures",
    "Mistake": "diagnosis",
    "Problem": "problem",
    "Number": "kinds",
    "InPlace": "kinds",
    "Optimizer": "kinds",
    "Seeded": "kinds",
    "choose_device": "device",
    "graded": "pytest_plugin",
}
__all__ = sorted(EXPORTS)


def __getattr__(name: str):
    if name not in EXPORTS:
        raise AttributeError(f"module 'cs_basics.harness' has no attribute {name!r}")
    return getattr(importlib.import_module(f"cs_basics.harness.{EXPORTS[name]}"), name)
