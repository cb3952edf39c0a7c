"""What grading takes from a submission: its student code, read within bounds set here.

A submission is hostile input, in its sizes as in its code. Its student code is walked breadth
first (the files near the top, where the packages are, before anything deep), never following a
link, never recursing, and never reading more than the bounds allow:
- a folder deeper than `depth` below a student-code root, a folder holding more entries than are
  left of `files` (files and folders, in all), and files past `total_bytes` in all are left out,
  each with a note naming the path: the rest is graded;
- a Python file over `source_file_bytes`, or Python files over `source_total_bytes` in all, make the
  code ungradable: every problem gets 0 with a message naming the file and the limit (the grader
  cannot know what such a file holds, so it cannot grade the code that imports it).
Staging (grading.py) copies what this takes, and the re-grade fingerprint (regrade.py) hashes it.
"""

from __future__ import annotations

import importlib.util
import os
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from cs_basics.harness.portable import open_unfollowed

NOTES_KEPT = 5  # notes of one kind in the results; the rest are counted


@dataclass(frozen=True)
class Bounds:
    source_file_bytes: int = 1 << 20  # one Python file
    source_total_bytes: int = 5 << 20  # all of them
    total_bytes: int = 64 << 20  # every file taken, data files too
    depth: int = 32  # folders below a student-code root
    files: int = 10_000  # files and folders read, in all

    @classmethod
    def of(cls, table: Mapping) -> Bounds:
        """The course's bounds: `[tool.cs-basics]` source_file_mib, source_total_mib, max_folder_depth, max_files."""
        default = cls()
        return cls(
            source_file_bytes=int(float(table.get("source_file_mib", default.source_file_bytes / 2**20)) * 2**20),
            source_total_bytes=int(float(table.get("source_total_mib", default.source_total_bytes / 2**20)) * 2**20),
            depth=int(table.get("max_folder_depth", default.depth)),
            files=int(table.get("max_files", default.files)),
        )


def human(size: float) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.3g} {unit}"
    return f"{int(size)} bytes"


def shown(path: Path) -> str:
    """A path for a message: bytes that are not UTF-8 as \\xNN."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


@dataclass
class Intake:
    """The files to take (source, path relative to the staged code), what was left out, and why the code
    cannot be graded at all (None when it can)."""

    bounds: Bounds
    files: list[tuple[Path, Path, int]] = field(default_factory=list)  # (source, relative path, size)
    left_out: dict[str, list[str]] = field(default_factory=dict)  # kind of note -> paths
    refused: str | None = None
    room: int = 0  # files and folders that may still be read
    source_bytes: int = 0
    all_bytes: int = 0

    def __post_init__(self) -> None:
        self.room = self.bounds.files

    def leave_out(self, why: str, path: Path) -> None:
        self.left_out.setdefault(why, []).append(shown(path))

    @property
    def notes(self) -> list[str]:
        """One note per kind of thing left out, naming the first paths."""
        notes = []
        for why, paths in self.left_out.items():
            more = f" and {len(paths) - NOTES_KEPT} more" if len(paths) > NOTES_KEPT else ""
            notes.append(f"left out of grading ({why}): {', '.join(paths[:NOTES_KEPT])}{more}")
        return notes

    def consider(self, source: Path, relative: Path, size: int) -> None:
        bounds = self.bounds
        if relative.suffix == ".py":
            self.source_bytes += size
            if size > bounds.source_file_bytes:
                self.refuse(f"{shown(relative)} is {human(size)}; the limit is {human(bounds.source_file_bytes)}")
            elif self.source_bytes > bounds.source_total_bytes:
                self.refuse(
                    f"its Python files come to over {human(bounds.source_total_bytes)} (the limit) "
                    f"with {shown(relative)}"
                )
        if self.all_bytes + size > bounds.total_bytes:
            self.leave_out(f"the submission's files may hold {human(bounds.total_bytes)} in all", relative)
            return
        self.all_bytes += size
        self.files.append((source, relative, size))

    def refuse(self, why: str) -> None:
        self.refused = self.refused or why

    def walk(self, top: Path, relative: Path, skip: set[Path]) -> None:
        """Breadth first from `top` (taken as `relative`), within the bounds."""
        if relative in skip or top.is_symlink():
            return
        if top.is_file():
            self.consider(top, relative, top.stat().st_size)
            return
        queue = deque([(top, relative, 0)] if top.is_dir() else [])
        while queue:
            folder, name, depth = queue.popleft()
            if depth > self.bounds.depth:
                self.leave_out(f"more than {self.bounds.depth} folders deep", name)
                continue
            try:
                with os.scandir(folder) as listing:
                    entries = list(islice(listing, self.room + 1))
            except OSError as err:
                self.leave_out(f"unreadable: {err.strerror}", name)
                continue
            if len(entries) > self.room:
                self.leave_out(f"more than {self.bounds.files} files and folders in all", name)
                continue
            self.room -= len(entries)
            for entry in sorted(entries, key=lambda e: e.name):
                child = name / entry.name
                if entry.name == "__pycache__" or child in skip or entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    queue.append((Path(entry.path), child, depth + 1))
                elif entry.is_file(follow_symlinks=False):  # FIFOs, sockets and devices are no code
                    self.consider(Path(entry.path), child, entry.stat(follow_symlinks=False).st_size)


def student_source(root: Path, student_code: str, submission: Path) -> Path:
    """Where a student-code path comes from: the submission; when grading one's own checkout of a
    downstream assignment, a package it does not hold (the student's cs_basics) is the installed one."""
    path = submission / student_code
    if path.exists() or submission.resolve() != root.resolve():
        return path
    spec = importlib.util.find_spec(Path(student_code).parts[0])
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]).parent / student_code if locations else path


def take(root: Path, student_code: list[str], overlaid: list[str], submission: Path, bounds: Bounds) -> Intake:
    """The submission's student code within `bounds`, less what grading lays its own files over."""
    intake = Intake(bounds)
    skip = {Path(p) for p in overlaid}
    for rel in student_code:
        intake.walk(student_source(root, rel, submission), Path(rel), skip)
    return intake


def copy_taken(intake: Intake, code: Path) -> None:
    """Copy the files taken under `code`, each at most the size it had when it was taken."""
    for source, relative, size in intake.files:
        target = code / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = open_unfollowed(source)
        with os.fdopen(fd, "rb") as src, open(target, "wb") as dst:
            left = size
            while left > 0 and (chunk := src.read(min(left, 1 << 20))):
                dst.write(chunk)
                left -= len(chunk)
