"""A submission uploaded as bare files, laid out as a student's copy of the repository.

PrairieLearn puts a question's uploaded files in /grade/student (here `functional.py`); a Gradescope
upload may hold just that file too. Grading reads a folder laid out like the repository, so such an
upload becomes one: the course's own student package (its files that hold no solution: `__init__.py`)
with each file the student writes (those with a `# BEGIN SOLUTION` region in the course repository)
taken from the upload of that name. A folder that already holds the student code (`cs_basics/`) is
graded as it is. A submission with no such file, or one that is no Python source (binary, not UTF-8),
cannot be graded at all: `NotGradable` names the file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from cs_basics.harness.config import Assignment
from cs_basics.harness.grading.pipeline import intake
from cs_basics.harness.rule.fromscratch import student_files

SOLUTION_MARK = "# BEGIN SOLUTION"  # the handout's marker: a file the student writes
# [tool.cs-basics] key naming those files where the markers are cut: the grader's shipped copy (course/bundle.py)
WRITTEN_KEY = "student_writes"
LISTED = 100  # entries of an upload folder read to name what was found


class NotGradable(Exception):
    """The submission cannot be graded at all; `errors` name each file missing or unreadable."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def written_files(assignment: Assignment) -> list[Path]:
    """The student code files the student writes (relative to the root): those with a solution region, or
    those `student_writes` names (the grader's shipped copy holds the handout's stubs, without the markers)."""
    if WRITTEN_KEY in assignment.table:
        return [Path(p) for p in assignment.table[WRITTEN_KEY]]
    found = []
    for path in student_files(assignment, assignment.root):
        if SOLUTION_MARK in path.read_text(errors="replace"):
            found.append(path.relative_to(assignment.root))
    return found


def holds_student_code(assignment: Assignment, folder: Path) -> bool:
    return any((folder / rel).exists() for rel in assignment.student_code)


def check_upload(assignment: Assignment, folder: Path, written: list[Path]) -> None:
    if not folder.is_dir():
        raise NotGradable([f"{intake.shown(folder)}: no such folder"])
    with os.scandir(folder) as listing:
        names = sorted(e.name for e in islice(listing, LISTED))
    wanted = ", ".join(rel.name for rel in written)
    if not names:
        raise NotGradable([f"no file was submitted: upload {wanted}"])
    errors = []
    for rel in written:
        upload = folder / rel.name
        if upload.is_symlink() or not upload.is_file():
            found = ", ".join(intake.shown(Path(n)) for n in names[:10])
            errors.append(f"{rel.name} was not submitted (the submission holds {found})")
            continue
        limit = intake.Bounds.of(assignment.table).source_file_bytes
        with open(upload, "rb") as f:
            head = f.read(limit)
        nul = head.find(b"\0")
        if nul >= 0:
            errors.append(f"{rel.name} is not Python source: byte {nul} is a NUL byte")
            continue
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as err:
            if not (len(head) == limit and err.start >= limit - 3):  # not a character cut where reading stopped
                errors.append(f"{rel.name} is not Python source: byte {err.start} is not UTF-8 text")
    if errors:
        raise NotGradable(errors)


def lay_out(assignment: Assignment, folder: Path, into: Path) -> Path:
    """`folder` itself when it holds the student code; else a new folder `into` laid out from the upload."""
    if holds_student_code(assignment, folder) or folder.resolve() == assignment.root.resolve():
        return folder
    written = written_files(assignment)
    check_upload(assignment, folder, written)
    for path in student_files(assignment, assignment.root):
        rel = path.relative_to(assignment.root)
        target = into / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel not in written:
            shutil.copyfile(path, target)
            continue
        upload = folder / rel.name
        size = upload.stat().st_size
        if size > intake.Bounds.of(assignment.table).source_file_bytes:
            # the intake refuses it by its size: a file as long, without reading what it holds
            with open(target, "wb") as f:
                f.truncate(size)
        else:
            shutil.copyfile(upload, target)
    return into


@contextlib.contextmanager
def laid_out(assignment: Assignment, folder: Path) -> Iterator[Path]:
    """`lay_out` in a temporary folder removed afterwards."""
    if holds_student_code(assignment, folder) or folder.resolve() == assignment.root.resolve():
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="cs-basics-upload-") as tmp:
        yield lay_out(assignment, folder, Path(tmp) / "submission")
