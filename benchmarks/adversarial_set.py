"""Grade the adversarial set (staff_tests/students) and print how the verdicts and diagnoses hold.

    uv run python benchmarks/adversarial_set.py [--workers 2]

Verdicts right: problems whose points are the deserved ones (from each solution's expected.toml,
written from the contract before grading). Diagnoses named: problems whose known mistake a failure
names. Diagnoses wrong: failures naming another mistake than the expected one. Crashes with a
contract sentence: crashed cases whose message says what the case passed in the contract's terms.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from staff_tests.adversarial import grade_all, judge_all, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--results", type=Path, default=None, help="keep the results.json files here")
    parser.add_argument("--judge-only", action="store_true", help="judge the kept results again, grade nothing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.results or Path(tmp)
        started = time.monotonic()
        if not args.judge_only:
            run = grade_all(folder, args.workers)
            if run.returncode not in (0, 1):
                print(run.stdout[-2000:], run.stderr[-2000:], file=sys.stderr)
                return 2
        seconds = time.monotonic() - started
        judged = judge_all(folder)
    for j in judged:
        for problem in j.problems_found:
            print(f"  {j.name}: {problem}")
    for key, value in summary(judged).items():
        print(f"{key}: {value}")
    print(f"graded in {seconds:.0f} s with {args.workers} workers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
