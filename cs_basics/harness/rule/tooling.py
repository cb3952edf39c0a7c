"""Which code is the grader's and which the student's: the one owner of that answer (issue 41). The stager lays
`TOOLING` over a submission, the scan holds a name of `TOOLING_NAMES`, the record's frames and the library's
calls tell the student's files from the rest with `student_predicate` and `HARNESS_PACKAGE`, the handout and
the bundle ship by the same paths. Loaded by the grading server for its children too (child.GRADER_MODULES): no
torch here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

HARNESS_PACKAGE = Path(__file__).resolve().parents[2]  # this harness's `cs_basics` (tooling, study, reference)

# cs_basics's tooling, not the student's: the grader stages its own copy over the submission's and
# never scans it, in this assignment and in any later one that grades the student's cs_basics
TOOLING = ("cs_basics/harness", "cs_basics/study", "cs_basics/cli.py")
# the packages that hold the tooling: the student's own `cs_basics` (its `__init__.py` is the student's), which the
# grader's child makes a shell of to load its own modules from before any file of the submission runs
TOOLING_PACKAGES = sorted({path.split("/")[0] for path in TOOLING if "/" in path})
COURSE_TESTS = ("tests", "hidden")  # the course's test packages: the grader's code as much as the tooling
# the same code by module name: a name of it in the student's code reaches the grader's objects (constructs.py)
TOOLING_NAMES = (*(path.removesuffix(".py").replace("/", ".") for path in TOOLING), *COURSE_TESTS)


def is_tooling_name(name: str) -> bool:
    """Whether a module or attribute name (`cs_basics.harness.cases.run_call`) is of the grader's code."""
    return any(name == t or name.startswith(t + ".") for t in TOOLING_NAMES)


def student_predicate(student_code: Iterable[str], excluded: Iterable[str]) -> Callable[[Path], bool]:
    """Whether a path relative to the code's root is the student's: under `student_code`, not `excluded` (the
    staff's code and `TOOLING`: fromscratch.excluded_code)."""
    owned = [PurePosixPath(p) for p in student_code]
    staff = [PurePosixPath(p) for p in excluded]

    def is_student(relative: Path) -> bool:
        path = PurePosixPath(Path(relative).as_posix())
        inside = any(path == p or path.is_relative_to(p) for p in owned)
        return inside and not any(path == s or path.is_relative_to(s) for s in staff)

    return is_student
