"""Staging a submission for its job: the student's code taken within the course's bounds, with the staff's
code, the grader's tooling and the course's test modules laid over it (copied, or linked from a worker's
`Overlay`), each trusted Python file with its bytecode."""

from __future__ import annotations

import ast
import functools
import importlib.util
import marshal
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cs_basics.harness.config import Assignment
from cs_basics.harness.grading.pipeline import intake
from cs_basics.harness.rule.tooling import HARNESS_PACKAGE, TOOLING

PACKAGE = HARNESS_PACKAGE  # the grader's own cs_basics


def copy_regular(src: Path, dst: Path) -> None:
    """Copy the grader's own files and folders (trusted: never a submission's, see intake.py)."""
    if src.is_symlink():
        return
    if src.is_dir():
        dst.mkdir(parents=True, exist_ok=True)
        for child in src.iterdir():
            if child.name != "__pycache__":
                copy_regular(child, dst / child.name)
    elif src.is_file():
        copy_trusted(src, dst)


def copy_trusted(src: Path, dst: Path) -> None:
    """Copy one of the grader's or the course's files; a Python file with its bytecode beside it."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    if dst.suffix == ".py":
        stat = src.stat()
        pyc = dst.parent / "__pycache__" / f"{dst.stem}.{sys.implementation.cache_tag}.pyc"
        pyc.parent.mkdir(exist_ok=True)
        pyc.write_bytes(bytecode(src, stat.st_mtime_ns, stat.st_size))


@functools.cache
def bytecode(source: Path, mtime_ns: int, size: int) -> bytes:
    """A trusted file's bytecode, made once per process (per version of the file) and used unchecked (PEP 552):
    each job's child imports the staged harness and cases without compiling them again, twice a submission.
    Written where the job's uid may not write (hand_over); importing fixes the code's file name. The code is the
    grader's own bytecode of the file where its import wrote one that is still the file's, else compiled here
    (in memory: a course's overlay is about 100 files, on the way to its first job)."""
    text = source.read_bytes()
    code = cached_code(source, text, mtime_ns // 1_000_000_000, size)
    if code is None:
        code = marshal.dumps(compile(text, str(source), "exec", dont_inherit=True))
    unchecked = (0b01).to_bytes(4, "little")  # hash-based, never checked against the source
    return importlib.util.MAGIC_NUMBER + unchecked + importlib.util.source_hash(text) + code


def cached_code(source: Path, text: bytes, mtime: int, size: int) -> bytes | None:
    """The marshalled code of `source`'s bytecode in its `__pycache__`, where that bytecode is this Python's and
    still the file's (as the import system checks it: the file's time and size, or its hash); else None."""
    try:
        cached = Path(importlib.util.cache_from_source(str(source))).read_bytes()
    except (OSError, NotImplementedError, ValueError):
        return None
    if len(cached) < 16 or cached[:4] != importlib.util.MAGIC_NUMBER or len(text) != size:  # changed since its stat
        return None
    flags = int.from_bytes(cached[4:8], "little")
    if flags == 0:  # by the file's time and size
        fresh = cached[8:16] == (mtime & 0xFFFFFFFF).to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little")
    else:  # by its hash
        fresh = flags in (0b01, 0b11) and cached[8:16] == importlib.util.source_hash(text)
    return cached[16:] if fresh else None


def module_package(assignment: Assignment, module: str) -> Path:
    return assignment.root / module.split(".")[0]


def take(assignment: Assignment, submission: Path) -> intake.Intake:
    """The submission's student code, within the course's bounds, less what grading lays over it."""
    overlaid = [*assignment.staff_code, *TOOLING]
    bounds = intake.Bounds.of(assignment.table)
    return intake.take(assignment.root, assignment.student_code, overlaid, submission, bounds)


def stage(assignment: Assignment, submission: Path, code: Path, overlay: Overlay | None = None) -> intake.Intake:
    """The submission's student code (what `take` takes), the staff's code and the grader's own tooling
    over it, and the course's test modules (`overlay`, made once for a worker's jobs; else made here).
    Returns what was taken, left out or refused."""
    taken = take(assignment, submission)
    if taken.refused:
        return taken
    intake.copy_taken(taken, code)
    for rel in [*assignment.staff_code, *TOOLING]:  # what the submission has there never runs
        target = code / rel
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    if overlay is None:  # the public phase's code, as an overlay lays it: no hidden cases' code
        copy_overlaid(assignment, code, hidden=False)
    else:
        overlay.lay_over(code)
    return taken


def copy_overlaid(assignment: Assignment, folder: Path, hidden: bool = True) -> None:
    """Copy what grading lays over a submission's code into `folder`: the staff's code, the grader's tooling,
    the course's test modules (the hidden cases' too unless `hidden` is False), each Python file with its
    bytecode."""
    overlays = [(assignment.root / rel, folder / rel) for rel in assignment.staff_code]
    overlays += [(PACKAGE.parent / rel, folder / rel) for rel in TOOLING]
    for source, target in overlays:
        copy_regular(source, target)
    for module in [*case_modules(assignment, hidden), assignment.adapters_module]:
        package = module_package(assignment, module)
        if assignment.hidden_dir is not None and package == assignment.hidden_dir:
            sources = hidden_case_sources(package, assignment.root / (module.replace(".", "/") + ".py"))
        else:
            sources = list(package.rglob("*.py"))  # code only: never a fixture
        for source in sources:
            copy_trusted(source, folder / source.relative_to(assignment.root))


def hidden_case_sources(package: Path, cases: Path) -> list[Path]:
    """The hidden package's files the hidden cases' module needs: itself, the package's `__init__.py` and the
    modules of the package it imports, transitively. Nothing else of the staff's folder (their answers, the
    oracles, the hidden tests' pytest files) enters a job: the submission's code runs beside what is staged."""
    needed: set[Path] = set()
    todo = [package / "__init__.py", cases]
    while todo:
        path = todo.pop()
        if path in needed or not path.is_file():
            continue
        needed.add(path)
        todo += imported_within(package, path)
    return sorted(needed)


def imported_within(package: Path, source: Path) -> list[Path]:
    """The files of `package` that `source` imports (absolute `package.x` and relative imports alike)."""
    found: list[Path] = []
    for node in ast.walk(ast.parse(source.read_bytes(), str(source))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package itself (the hidden package is one folder)
                base = f"{package.name}.{base}".rstrip(".")
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == package.name and len(parts) > 1:
                found += [package.joinpath(*parts[1:]).with_suffix(".py"), package.joinpath(*parts[1:], "__init__.py")]
    return found


@dataclass
class Overlay:
    """The staff's code, the grader's tooling and the course's test modules, with their bytecode, copied once
    into `folder` and laid over each job's code: linked where the job runs as a uid of its own (which may read
    these files but neither write nor remove them: they are the grader's, mode 644, in the grader's folders),
    copied elsewhere (a job that runs as the grader's own user could write a link, and with it every later job's
    copy). A link is one directory entry; a copy, a new file written (about 120 of them a job)."""

    folder: Path
    folders: list[Path]  # relative to `folder`, parents first
    files: list[Path]
    link: bool = False
    hidden: Path | None = None  # the hidden cases' package (relative), laid over only for the hidden phase
    listed: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # parts(), by `hidden`

    @classmethod
    def make(cls, assignment: Assignment, folder: Path, link: bool = False) -> Overlay:
        copy_overlaid(assignment, folder)
        folders = sorted((p.relative_to(folder) for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts))
        files = [p.relative_to(folder) for p in folder.rglob("*") if p.is_file()]
        hidden = Path(assignment.hidden_dir.name) if assignment.hidden_dir is not None else None
        return cls(folder, folders, files, link, hidden)

    def lay_over(self, code: Path, hidden: bool = False) -> None:
        """The overlay's files over `code`: the hidden cases' package only where `hidden` (the hidden phase's
        code), and then only it. Twice a submission, about 30 folders and 190 files each: plain strings and one
        system call a file where nothing of the student's is in the way."""
        folders, files = self.parts(hidden)
        for rel in folders:  # parents first
            try:
                os.mkdir(os.path.join(code, rel))
            except FileExistsError:
                if not os.path.isdir(os.path.join(code, rel)):
                    raise
        for rel in files:
            source, target = os.path.join(self.folder, rel), os.path.join(code, rel)
            try:
                self.place(source, target)
            except FileExistsError:  # a student's file at the same path (an adapters module): ours runs
                os.unlink(target)
                self.place(source, target)

    def place(self, source: str, target: str) -> None:
        if self.link:
            try:
                os.link(source, target)
                return
            except FileExistsError:
                raise
            except OSError:  # a file system without links, or another one: copy this file and the rest
                self.link = False
        with open(source, "rb") as read, open(target, "xb") as written:
            shutil.copyfileobj(read, written)

    def parts(self, hidden: bool) -> tuple[list[str], list[str]]:
        """(folders, files) to lay over, relative, as strings: the hidden package's alone where `hidden`."""

        def wanted(rel: Path) -> bool:
            return hidden == (self.hidden is not None and rel.is_relative_to(self.hidden))

        if hidden not in self.listed:
            self.listed[hidden] = [str(r) for r in self.folders if wanted(r)], [str(r) for r in self.files if wanted(r)]
        return self.listed[hidden]


def case_modules(assignment: Assignment, hidden: bool = True) -> list[str]:
    """The course's modules of cases; the hidden cases' among them unless `hidden` is False (the public phase)."""
    modules = [assignment.table.get("cases", "tests.cases")]
    if assignment.hidden_dir is not None and hidden:
        modules.append(f"{assignment.hidden_dir.name}.cases")
    return modules
