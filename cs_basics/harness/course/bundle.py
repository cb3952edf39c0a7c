"""The course's grader as it ships, and Gradescope's autograder zip of it (`setup.sh`, `run_autograder`).

What ships is what grading reads, and nothing of the reference solution: the handout's files (the student's
files cut to their stubs, as `cs-basics handout` cuts them), the hidden cases and their fixtures, the staff's
code, and the course's path dependencies outside its folder (carried, since the zip installs wherever it is
unpacked). Not staff_tests, benchmarks, docs or examples. A submission is graded from its own files; the
stubs only keep the course's package whole. PrairieLearn's serverFilesCourse and the cluster image
(docs/cluster/Dockerfile) hold the same files.

Gradescope unpacks the zip into /autograder/source, runs setup.sh once while building the image, then for
each submission runs run_autograder, which must leave /autograder/results/results.json. `AUTOGRADER_ROOT`
moves that tree (default /autograder), so the bundle can be run end to end on a simulated folder.
"""

from __future__ import annotations

import re
import stat
import time
import tomllib
import zipfile
from pathlib import Path

from cs_basics.harness.config import Assignment
from cs_basics.harness.course.handout import (
    ALWAYS_LEFT_OUT,
    LOCK_PATH,
    Content,
    HandoutError,
    course_files,
    handout_files,
    is_fixture,
    pyproject_without,
    under,
    untracked_files,
)
from cs_basics.harness.course.setup_script import SETUP
from cs_basics.harness.grading.pipeline.upload import WRITTEN_KEY, written_files

CARRIED = Path("path_dependencies")  # where the course's path dependencies outside its folder go

RUN = """#!/usr/bin/env bash
# Gradescope runs this for each submission. It always leaves results/results.json.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
cd "$ROOT/source"
export UV_PYTHON_DOWNLOADS=never
uv run --frozen --no-dev cs-basics grade --submission "$ROOT/submission" --results "$ROOT/results/results.json"
"""

SCRIPTS = {"setup.sh": SETUP, "run_autograder": RUN}


class BundleError(Exception):
    pass


def grader_files(assignment: Assignment) -> dict[Path, Content]:
    """What the grader ships (relative path -> content): the handout's files, the hidden cases, the staff's code
    and the carried path dependencies, with pyproject.toml and uv.lock naming where those now are. An allowlist,
    as the handout's: of the hidden folder its Python files and its fixtures, of the staff's code what
    `staff_code` names; only files git tracks (BundleError names one it does not)."""
    root = assignment.root
    try:
        files, _ = handout_files(assignment)
    except HandoutError as err:
        raise BundleError(str(err)) from None
    files.pop(Path(".github/workflows/classroom.yml"), None)
    staff = [rel for rel in course_files(root) if staff_file(assignment, rel) and (root / rel).is_file()]
    untracked = sorted(set(staff) & untracked_files(root))
    if untracked:
        raise BundleError(f"git does not track {', '.join(map(str, untracked))} in {root}: `git add` or remove them")
    files |= {rel: root / rel for rel in staff}
    for script in SCRIPTS:
        files.pop(Path(script), None)  # the bundle writes its own
    pyproject = (root / "pyproject.toml").read_text()
    pyproject = pyproject_without(pyproject, ("handout_readme", "handout_sources"), set(assignment.handout_exclude))
    pyproject = with_written_files(pyproject, written_files(assignment))
    lock = (root / "uv.lock").read_text() if (root / "uv.lock").is_file() else None
    for name, outside in path_dependencies(root, pyproject, lock).items():
        carried = CARRIED / name
        files |= {carried / rel: content for rel, content in dependency_files(outside, root).items()}
        pyproject, lock = moved_dependency(root, name, outside, carried, pyproject, lock)
    files[Path("pyproject.toml")] = pyproject
    if lock is not None:
        files[Path("uv.lock")] = lock
    return files


def staff_file(assignment: Assignment, rel: Path) -> bool:
    """A file of the staff's that grading needs: the hidden cases' Python files and fixtures, the `staff_code`."""
    if ALWAYS_LEFT_OUT & set(rel.parts):
        return False
    hidden = assignment.table.get("hidden")
    if hidden and ((under(rel, hidden) and rel.suffix == ".py") or is_fixture(Path(hidden) / "fixtures", rel)):
        return True
    return under(rel, *assignment.staff_code)


def with_written_files(pyproject: str, written: list[Path]) -> str:
    """The files the student writes named in [tool.cs-basics]: the stubs shipped have no solution markers left
    to find them by (an upload of bare files is laid out from them: grading/pipeline/upload.py)."""
    names = ", ".join(f'"{p.as_posix()}"' for p in written)
    line = f"{WRITTEN_KEY} = [{names}]  # written by `cs-basics autograder`: the stubs have no markers left\n"
    return re.sub(r"(?m)^\[tool\.cs-basics\]\n", lambda m: m.group(0) + line, pyproject, count=1)


def path_dependencies(root: Path, pyproject: str, lock: str | None) -> dict[str, Path]:
    """The course's path dependencies outside its folder: name -> where it is. BundleError names one the bundle
    cannot carry: missing, or reached only through another dependency (its own pyproject names its path)."""
    sources = tomllib.loads(pyproject).get("tool", {}).get("uv", {}).get("sources", {})
    found = {}
    for name, source in sources.items():
        for one in source if isinstance(source, list) else [source]:
            if "path" not in one:
                continue
            where = (root / one["path"]).resolve()
            if where.is_relative_to(root):
                continue
            if not where.exists():
                raise BundleError(
                    f"{root / 'pyproject.toml'}: [tool.uv.sources] {name} = {{ path = {one['path']!r} }} does not "
                    f"exist ({where}): the bundle cannot carry it"
                )
            if name in found and found[name] != where:
                raise BundleError(f"[tool.uv.sources] {name} names two paths outside the course: carry one")
            found[name] = where
    for path in lock_paths(lock or ""):
        where = (root / path).resolve()
        if not where.is_relative_to(root) and where not in found.values():
            raise BundleError(
                f"{root / 'uv.lock'} installs {path!r} ({where}), a path outside the course that its pyproject.toml's "
                "[tool.uv.sources] does not name (a dependency's own path dependency): the bundle cannot carry it; "
                "publish it, or make it a source of the course"
            )
    return found


def lock_paths(lock: str) -> set[str]:
    return {m.group(2) for m in LOCK_PATH.finditer(lock)}


# Of a previous course the bundle carries only what installs it and what grading runs: the harness (the grader's
# own tooling, less the previous course's study kernel and experiments) and its packages' top `__init__.py`. Its
# tests, fixtures, students' files and study are that course's: a submission brings its own student code.
HARNESS = ("cs_basics/harness", "cs_basics/cli.py")
# the tables of a previous course's pyproject.toml that its install reads (a build backend's, uv's); the rest
# ([tool.cs-basics], pytest's, ruff's ...) is that course's own
INSTALL_TABLES = ("project", "build-system", "dependency-groups", "tool.uv", "tool.hatch", "tool.setuptools")


def dependency_files(where: Path, course: Path) -> dict[Path, Content]:
    """A path dependency's files as the bundle carries them: a previous course's installable harness (never a
    test, fixture, student file or solution of it), else the files its git tracks; a wheel or an sdist, itself."""
    if where.is_file():
        return {Path(where.name): where}
    pyproject = (where / "pyproject.toml").read_text()
    table = tomllib.loads(pyproject).get("tool", {}).get("cs-basics")
    if table is not None:
        return installable_files(Assignment(where, table), pyproject)
    files: dict[Path, Content] = {}
    for rel in course_files(where):
        if (
            (where / rel).is_file()
            and not ALWAYS_LEFT_OUT & set(rel.parts)
            and not (where / rel).is_relative_to(course)
        ):
            files[rel] = where / rel
    return files


def installable_files(previous: Assignment, pyproject: str) -> dict[Path, Content]:
    """A previous course as a next course's grader carries it: its pyproject.toml's install tables, a README where
    it names one, its packages' top `__init__.py`, and the harness where it holds it."""
    root = previous.root
    files: dict[Path, Content] = {Path("pyproject.toml"): install_tables(pyproject)}
    readme = tomllib.loads(pyproject).get("project", {}).get("readme")
    readme = readme.get("file") if isinstance(readme, dict) else readme
    if isinstance(readme, str):  # the build reads it; the previous course's own README is that course's
        files[Path(readme)] = f"The grading harness of {root.name}, carried by a next course's grader.\n"
    packages = [Path(rel) / "__init__.py" for rel in previous.student_code if (root / rel).is_dir()]
    for rel in course_files(root):
        if (root / rel).is_file() and (rel in packages or (rel.suffix == ".py" and under(rel, *HARNESS))):
            files[rel] = root / rel
    return files


def install_tables(pyproject: str) -> str:
    """pyproject.toml with only the tables an install reads (INSTALL_TABLES and their sub-tables)."""
    kept, keep = [], True
    for line in pyproject.splitlines(keepends=True):
        header = re.match(r"\[\[?\s*([^\]\s]+)\s*\]", line)
        if header:
            name = header[1].replace('"', "")
            keep = any(name == t or name.startswith(t + ".") for t in INSTALL_TABLES)
        if keep:
            kept.append(line)
    return re.sub(r"\n{3,}", "\n\n", "".join(kept))


def moved_dependency(
    root: Path, name: str, where: Path, carried: Path, pyproject: str, lock: str | None
) -> tuple[str, str | None]:
    """pyproject.toml and uv.lock with the dependency's path changed to where the bundle carries it."""
    new = (carried / where.name).as_posix() if where.is_file() else carried.as_posix()

    def moved(match: re.Match) -> str:
        same = (root / match.group(2)).resolve() == where
        return f'{match.group(1)} = "{new}"' if same else match.group(0)

    line = re.compile(rf'(?m)^"?{re.escape(name)}"?\s*=.*$')
    pyproject = line.sub(lambda m: LOCK_PATH.sub(moved, m.group(0)), pyproject)
    sources = tomllib.loads(pyproject)["tool"]["uv"]["sources"][name]
    if any((root / s["path"]).resolve() == where for s in (sources if isinstance(sources, list) else [sources])):
        raise BundleError(f"cannot rewrite [tool.uv.sources] {name} in pyproject.toml: write it on one line")
    return pyproject, None if lock is None else LOCK_PATH.sub(moved, lock)


def build(assignment: Assignment, out: Path) -> list[str]:
    """Write the zip; return the paths it holds."""
    files = grader_files(assignment)
    names = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for script, text in SCRIPTS.items():
            zf.writestr(entry(script, 0o755), text)
            names.append(script)
        for rel, content in sorted(files.items()):
            if isinstance(content, Path):
                zf.write(content, rel.as_posix())
            else:
                zf.writestr(entry(rel.as_posix(), 0o644), content)
            names.append(rel.as_posix())
    return names


def entry(name: str, mode: int) -> zipfile.ZipInfo:
    """A written file's entry: readable by all as a copied one is (writestr's default is 0600)."""
    info = zipfile.ZipInfo(name, time.localtime()[:6])
    info.external_attr = (stat.S_IFREG | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info
