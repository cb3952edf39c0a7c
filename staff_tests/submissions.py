"""Build student submissions in temporary folders and grade them, for the grading tests."""

from __future__ import annotations

import hashlib
import shutil
import textwrap
from pathlib import Path

import torch

from cs_basics.harness.grading.grade import Grade, grade
from cs_basics.harness.grading.sandbox import Limits

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONAL = Path("cs_basics/nn/functional.py")
# both functions start with `raise NotImplementedError`, as in the handout
STUBBED = {"    # BEGIN SOLUTION\n": "    raise NotImplementedError\n    # BEGIN SOLUTION\n"}


def submission(tmp: Path, append: str = "", replace: dict[str, str] | None = None, name: str = "student") -> Path:
    """A copy of the reference package, with `functional.py` edited: `replace` old->new, then `append`."""
    folder = tmp / name
    shutil.copytree(ROOT / "cs_basics", folder / "cs_basics", ignore=shutil.ignore_patterns("__pycache__"))
    path = folder / FUNCTIONAL
    text = path.read_text()
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text + "\n" + textwrap.dedent(append))
    return folder


def wrap_attention(body: str) -> str:
    """Append a scaled_dot_product_attention that runs `body` (which may return) before the reference."""
    return (
        "_reference_attention = scaled_dot_product_attention\n\n\n"
        "def scaled_dot_product_attention(Q, K, V, mask=None):\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
        + "\n    return _reference_attention(Q, K, V, mask)\n"
    )


def run(assignment, folder: Path, sandbox: str | None = None, **limits) -> Grade:
    return grade(assignment, folder, torch.device("cpu"), Limits(**limits), sandbox=sandbox)


def scores(result: Grade) -> dict[str, float]:
    by_problem: dict[str, float] = {}
    for t in result.tests:
        by_problem[t.case.problem] = by_problem.get(t.case.problem, 0.0) + t.score
    return by_problem


def outputs_of(result: Grade, problem: str | None = None) -> list[str]:
    return [t.output for t in result.tests if problem in (None, t.case.problem)]


def fingerprint(*folders: Path) -> dict[str, str]:
    """Every file's SHA-256 under the folders: the course's files, to compare before and after."""
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for folder in folders
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def keeps_memory(tmp: Path, mb: int = 300, name: str = "hungry", shared: bool = False) -> Path:
    """A submission whose attention keeps `mb` MiB more at each call (an inefficient honest one does the
    same): past a container's memory its problem must lose, and the grader still finish with a verdict.
    Its softmax is the reference's, and the attention's memory never reaches it: softmax must score.
    `shared`: in a shared mapping, written page by page, which RLIMIT_DATA does not count (only the
    container's limit does, and the kernel's OOM killer enforces it)."""
    if shared:
        body = (
            f"import mmap\nkept = mmap.mmap(-1, {mb} << 20)  # MAP_SHARED\n"
            "for page in range(0, len(kept), 4096):\n    kept[page] = 1\n_kept.append(kept)\n"
        )
    else:
        body = f"_kept.append(torch.ones({mb} << 18))  # {mb} MiB of float32, kept for good\n"
    return submission(tmp, "_kept = []\n\n\n" + wrap_attention(body), name=name)


def course_shipping_a_from_scratch_mistake(tmp: Path) -> Path:
    """A copy of this course whose tests/mistakes.py holds `sum_over_everything`'s code again, as before issue 37:
    a softmax from an exp over a sum, which a student reading the handout could copy."""
    from cs_basics.harness.course.handout import repository_files

    copy = tmp / "course"
    for rel in repository_files(ROOT):
        if rel.parts[0] not in ("examples", "benchmarks", "staff_tests"):
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, copy / rel)
    mistakes = copy / "tests" / "mistakes.py"
    text = mistakes.read_text()
    assert 'staff("sum_over_everything")' in text
    moved_back = "lambda x, dim: torch.exp(x - x.amax(dim, True)) / torch.exp(x - x.amax(dim, True)).sum()"
    mistakes.write_text(text.replace('staff("sum_over_everything")', moved_back))
    return copy
