"""Re-grades that redo only what changed: a fingerprint of everything a grade depends on.

A grade depends on the submission's student code (read the way `grading.stage` reads it), the
course (its `[tool.cs-basics]` table and the modules grading copies: cases, hidden cases, adapters),
the fixtures (each store's MANIFEST.json checksums), the grader (cs_basics's and torch's versions and
the harness's sources, so a grader fix re-grades) and the grading settings (device, limits). Their
hash is kept in the results file under Gradescope's optional top-level `extra_data`
(`{"cs_basics": {"fingerprint": ..., "parts": {...}}}`), which Gradescope stores and ignores. A batch
skips a submission whose results file holds the fingerprint it has now, unless forced.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cs_basics.harness.config import Assignment
from cs_basics.harness.fixtures import MANIFEST
from cs_basics.harness.grading.pipeline.grade import PACKAGE, case_modules, module_package, take
from cs_basics.harness.grading.settings import GradeSettings

EXTRA = "cs_basics"  # our key in the results file's `extra_data`


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()  # in chunks: a submission's files may be large


def digest(hashes: Iterable[tuple[str, str]]) -> str:
    """One hash of (name, hash of its content) pairs, independent of the order they come in."""
    text = "\n".join(sorted(f"{name}\0{h}" for name, h in hashes))
    return sha256(text.encode(errors="surrogateescape"))  # a submission's file names need not be UTF-8


def submission_digest(assignment: Assignment, submission: Path) -> str:
    """The submission's student code as grading takes it (intake.py: within the course's bounds, less what
    the grader overlays with its own tooling and staff code), with what was left out or refused."""
    taken = take(assignment, submission)
    files = [(relative.as_posix(), file_sha256(source)) for source, relative, _ in taken.files]
    if taken.refused:  # its files are never read: the refusal (which names the file and its size) stands for them
        return digest([("refused", sha256(taken.refused.encode()))])
    return digest([*files, *(("left out", sha256(note.encode())) for note in taken.notes)])


def python_sources(root: Path, under: Path) -> list[tuple[str, str]]:
    return [(p.relative_to(root).as_posix(), file_sha256(p)) for p in under.rglob("*.py")]


def manifest_checksums(folder: Path) -> dict:
    """The checksums a fixture store's manifest holds (grading itself says what is wrong with a bad one)."""
    path = folder / MANIFEST
    try:
        return json.loads(path.read_text()).get("sha256", {})
    except (OSError, ValueError, AttributeError):
        return {"unreadable": file_sha256(path) if path.is_file() else "missing"}


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def course_parts(assignment: Assignment, settings: Mapping[str, object], grader: Path = PACKAGE) -> dict[str, str]:
    """What every submission's fingerprint shares: compute it once per batch."""
    modules = [*case_modules(assignment), assignment.table.get("adapters", "tests.adapters")]
    packages = dict.fromkeys(module_package(assignment, m) for m in modules)
    course = [("[tool.cs-basics]", sha256(canonical(assignment.table)))]
    course += [f for p in packages for f in python_sources(assignment.root, p)]
    stores = [store.root for store in (assignment.store, assignment.hidden_store) if store is not None]
    fixtures = [(os.path.relpath(s, assignment.root), sha256(canonical(manifest_checksums(s)))) for s in stores]
    tools = [("versions", f"cs-basics {version('cs-basics')} torch {version('torch')}")]
    tools += python_sources(grader.parent, grader / "harness")
    return {
        "course": digest(course),
        "fixtures": digest(fixtures),
        "grader": digest(tools),
        "settings": sha256(canonical(dict(settings))),
    }


def fingerprint(course: Mapping[str, str], assignment: Assignment, submission: Path) -> dict:
    """{"fingerprint": one hash, "parts": the hash of each thing it depends on (to say what changed)}."""
    parts = {**course, "submission": submission_digest(assignment, submission)}
    return {"fingerprint": sha256(canonical(parts)), "parts": parts}


def settings_of(settings: GradeSettings) -> dict:
    """The grading options that can change a grade."""
    names = ("device", "case_seconds", "total_seconds", "timeouts_per_problem", "memory_mb", "tmp_mb", "release")
    return {name: getattr(settings, name) for name in names}


def stamp(data: dict, fingerprint: dict | None, error: str = "") -> dict:
    """The results with what the batch knows: the fingerprint of a completed grading, or why it did not complete
    (no fingerprint then, so the next batch grades it again)."""
    ours = {k: v for k, v in stored(data).items() if k in ("sandbox", "held")} | dict(fingerprint or {})
    if error:
        ours["error"] = error
    return {**data, "extra_data": {**(data.get("extra_data") or {}), EXTRA: ours}}


def stored(data: Mapping | None) -> dict:
    """Our part of a results file's `extra_data`: empty where the file has none, or none of the right shape."""
    extra = data.get("extra_data") if isinstance(data, Mapping) else None
    ours = extra.get(EXTRA) if isinstance(extra, Mapping) else None
    return dict(ours) if isinstance(ours, Mapping) else {}


def read_results(path: Path) -> dict | None:
    """A results file, or None when there is none (or it cannot be read: it will be graded again)."""
    try:
        data = json.loads(Path(path).read_text(errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


@dataclass
class Planned:
    submission: Path
    results: Path
    fingerprint: dict  # what to stamp once it is graded
    skip: bool  # its results file already holds this fingerprint


def plan(
    assignment: Assignment, submissions: list[Path], results_dir: Path, settings: Mapping, force: bool = False
) -> list[Planned]:
    """Which submissions to grade and which to skip, each with its fingerprint."""
    course = course_parts(assignment, settings)
    planned = []
    for submission in submissions:
        results = results_dir / f"{submission.name}.json"
        now = fingerprint(course, assignment, submission)
        before = stored(read_results(results)).get("fingerprint")
        planned.append(Planned(submission, results, now, skip=not force and before == now["fingerprint"]))
    return planned
