"""Cut the student handout from the solution repository, and check the cut.

Solution regions are marked in the student's files:

    def softmax(in_features, dim):
        \"\"\"docstring stays\"\"\"
        # BEGIN SOLUTION
        ...                      <- becomes `raise NotImplementedError`
        # END SOLUTION

A region at the top level of a module (a helper of the solution) is removed whole, and so
are the imports only the solution used. The student's files are cut, and so is the study kernel
(STUDY_SOLUTIONS: tooling, but a solution; writing it is an extra for students). The hidden
cases and the paths in `handout_exclude` are left out; `handout_readme` (a file in the
repository) becomes the handout's README.md. The check refuses a handout that would carry an
oracle or a known mistake computing an answer a student could copy (casecheck.shipped_answers).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from functools import partial
from pathlib import Path

import torch

from cs_basics.harness.config import Assignment
from cs_basics.harness.course import casecheck, classroom
from cs_basics.harness.grading.pipeline.grade import grade, student_files
from cs_basics.harness.rule.tooling import TOOLING

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
# tooling that computes an answer from scratch: its body is cut as the student's files are (the rule also
# forbids graded code to use it, since the grader stages its own copy of the tooling)
STUDY_SOLUTIONS = {Path("cs_basics/study/flash.py")}
ALWAYS_LEFT_OUT = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "results", "results.json"}


class HandoutError(Exception):
    pass


def cut(source: str, name: str = "<file>") -> tuple[str, list[str]]:
    """(the handout text, the solution lines removed)."""
    out, removed, indent = [], [], None
    for number, line in enumerate(source.splitlines(keepends=True), 1):
        stripped = line.strip()
        if stripped == BEGIN:
            if indent is not None:
                raise HandoutError(f"{name}:{number}: {BEGIN} inside another solution region")
            indent = line[: len(line) - len(line.lstrip())]
            if indent:
                out.append(f"{indent}raise NotImplementedError\n")
        elif stripped == END:
            if indent is None:
                raise HandoutError(f"{name}:{number}: {END} without {BEGIN}")
            indent = None
        elif indent is not None:
            removed.append(line)
        else:
            out.append(line)
    if indent is not None:
        raise HandoutError(f"{name}: {BEGIN} is never closed")
    text = without_unused_imports("".join(out), name) if removed else "".join(out)
    return re.sub(r"\n{3,}(?=\Z|\S)", "\n\n\n", text).strip("\n") + "\n", removed


def without_unused_imports(text: str, name: str = "<file>") -> str:
    """The text without the top-level imports (or the names of an import) that it no longer uses."""
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        raise HandoutError(f"{name}: the cut text does not parse ({err})") from None
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    lines = text.splitlines(keepends=True)  # removed lines become "", so line numbers keep their place
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    for node in imports:
        kept = [a for a in node.names if (a.asname or a.name.split(".")[0]) in used]
        if getattr(node, "module", None) != "__future__" and len(kept) < len(node.names):
            node.names = kept
            span = node.end_lineno - node.lineno + 1
            lines[node.lineno - 1 : node.end_lineno] = [ast.unparse(node) + "\n" if kept else ""] + [""] * (span - 1)
    if not imports:
        return text
    # the leading block of imports keeps one blank line at most between the groups left
    first, last = imports[0].lineno - 1, imports[0].end_lineno
    for node in imports[1:]:
        if any(line.strip() and not line.lstrip().startswith("#") for line in lines[last : node.lineno - 1]):
            break  # code between: this import is not part of the leading block
        last = node.end_lineno
    block = re.sub(r"\n{3,}", "\n\n", "".join(lines[first:last]))
    return "".join(lines[:first]) + block + "".join(lines[last:])


def repository_files(root: Path) -> list[Path]:
    """The files git tracks or would track (not ignored), or every file outside a git checkout, relative to the
    root."""
    listed = git_files(root, "--cached", "--others", "--exclude-standard")
    return listed if listed is not None else [p.relative_to(root) for p in root.rglob("*") if p.is_file()]


def untracked_files(root: Path) -> set[Path]:
    """The files git does not track and does not ignore (none outside a git checkout), relative to the root."""
    return set(git_files(root, "--others", "--exclude-standard") or ())


def git_files(root: Path, *which: str) -> list[Path] | None:
    try:
        listed = subprocess.run(["git", "ls-files", "-z", *which], cwd=root, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return [Path(p) for p in listed.stdout.decode().split("\0") if p]


def left_out(assignment: Assignment, path: Path) -> bool:
    hidden = assignment.table.get("hidden")
    excluded = {*assignment.handout_exclude, *([hidden] if hidden else [])}
    if ALWAYS_LEFT_OUT & set(path.parts) or (hidden and hidden in path.parts[:-1]):
        return True  # a copy of the hidden folder anywhere (PrairieLearn's serverFilesCourse/...) is hidden too
    return any(path == Path(e) or path.is_relative_to(e) for e in excluded)


def course_files(root: Path) -> list[Path]:
    """The repository's files less the copies of a course built earlier and left in it (git ignores none of
    them): a folder below the root with its own [tool.cs-basics] or `run_autograder` (a handout, PrairieLearn's
    files, a zip unpacked to build an image), or a bundle's zip. They hold the hidden cases."""
    files = repository_files(root)
    copies = {rel.parent for rel in files if rel.parent != Path(".") and holds_a_course(root / rel)}
    return [rel for rel in files if not copies & set(rel.parents) and not is_bundle_zip(root / rel)]


def holds_a_course(path: Path) -> bool:
    if path.name == "run_autograder":
        return True
    if path.name != "pyproject.toml":
        return False
    try:
        return "cs-basics" in tomllib.loads(path.read_text()).get("tool", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False


def is_bundle_zip(path: Path) -> bool:
    if path.suffix != ".zip":
        return False
    try:
        with zipfile.ZipFile(path) as zf:
            return "run_autograder" in zf.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def handout_pyproject(text: str, assignment: Assignment) -> str:
    """The staff-only keys out: the hidden folder, the student README's source (it is the handout's
    README.md), the handout's sources, and test paths the handout does not have; each dependency of
    `handout_sources` given as the students have it."""
    text = pyproject_without(
        text,
        ("hidden", "handout_readme", "handout_sources"),
        {*assignment.handout_exclude, assignment.table.get("hidden", "")},
    )
    for name, source in handout_sources(assignment).items():
        text = with_source(text, name, source)
    return text


def handout_sources(assignment: Assignment) -> dict[str, dict]:
    """`handout_sources`: the [tool.uv.sources] entries the handout gives instead of the staff's, each dependency
    as a student has it (their previous assignment, at a path the handout's README names). Only path sources:
    the handout's uv.lock names the same path (a git source's lock entry needs a commit only `uv lock` finds)."""
    sources = assignment.table.get("handout_sources", {})
    for name, source in sources.items():
        where = source.get("path") if isinstance(source, dict) else None
        if not isinstance(where, str) or Path(where).is_absolute() or set(source) - {"path", "editable"}:
            raise HandoutError(
                f"{assignment.root / 'pyproject.toml'}: handout_sources {name} = {source!r}: give a relative path, "
                'as a student has it: { path = "../cs_basics", editable = true }'
            )
    return sources


def inline_table(table: dict) -> str:
    """A TOML inline table of strings and booleans: `{ path = "../x", editable = true }`."""
    values = {k: ("true" if v else "false") if isinstance(v, bool) else f'"{v}"' for k, v in table.items()}
    return "{ " + ", ".join(f"{k} = {v}" for k, v in values.items()) + " }"


def with_source(pyproject: str, name: str, source: dict) -> str:
    """pyproject.toml with [tool.uv.sources] `name` replaced by `source` (one line either way)."""
    section = re.search(r"(?ms)^\[tool\.uv\.sources\]\s*$(.*?)(?=^\[|\Z)", pyproject)
    line = re.compile(rf'(?m)^"?{re.escape(name)}"?\s*=.*$')
    if section is None or not line.search(section[1]):
        raise HandoutError(f"handout_sources names {name}, which [tool.uv.sources] does not: nothing to replace")
    body = line.sub(lambda m: f"{name} = {inline_table(source)}", section[1], count=1)
    text = pyproject[: section.start(1)] + body + pyproject[section.end(1) :]
    if tomllib.loads(text)["tool"]["uv"]["sources"][name] != source:
        raise HandoutError(f"cannot replace [tool.uv.sources] {name} in pyproject.toml: write it on one line")
    return text


LOCK_PATH = re.compile(r'\b(editable|directory|path) = "([^"]*)"')  # where uv.lock says a local package is


def handout_lock(assignment: Assignment, lock: str) -> str:
    """uv.lock with each dependency of `handout_sources` where the handout's pyproject.toml puts it."""
    root = assignment.root
    staff = tomllib.loads((root / "pyproject.toml").read_text()).get("tool", {}).get("uv", {}).get("sources", {})
    for name, source in handout_sources(assignment).items():
        was = staff.get(name)
        if not isinstance(was, dict) or "path" not in was:
            raise HandoutError(f"handout_sources names {name}, whose [tool.uv.sources] entry is no path")
        where = (root / was["path"]).resolve()
        lock = LOCK_PATH.sub(partial(moved_to, root, where, source["path"]), lock)
    return lock


def moved_to(root: Path, where: Path, new: str, match: re.Match) -> str:
    """A uv.lock path (`editable = "../.."`): `new` where it leads to `where`, else as it is."""
    return f'{match[1]} = "{new}"' if (root / match[2]).resolve() == where else match[0]


def pyproject_without(text: str, keys: tuple[str, ...], gone: set[str]) -> str:
    """The pyproject.toml's text without these top-level keys of [tool.cs-basics], and with no test path in `gone`."""
    text = re.sub(rf"(?m)^({'|'.join(map(re.escape, keys))})\s*=.*\n", "", text)
    return re.sub(
        r"(?m)^testpaths\s*=\s*\[(.*)\]",
        lambda m: "testpaths = [" + ", ".join(p for p in m.group(1).split(", ") if p.strip("\"'") not in gone) + "]",
        text,
    )


def student_readme(assignment: Assignment) -> Path | None:
    """The handout's README.md, when the assignment keeps one apart from the staff's (`handout_readme`)."""
    name = assignment.table.get("handout_readme")
    return assignment.root / name if name else None


# a file of a cut: its new text, or the repository file to copy as it is
Content = str | Path

# What a handout may hold, and nothing else (a file the staff made beside the course, a results file with hidden
# cases' messages, a stray `oom`, never reaches a student): the project's files, the fixtures, the test packages,
# the student's files, the harness the students run (where the course holds it), the Classroom workflow the
# handout writes, and what the course adds by name (`handout_include`).
PROJECT_FILES = ("pyproject.toml", "uv.lock", "README.md", ".gitignore", "conftest.py")
WRITTEN = (Path(".github/workflows/classroom.yml"),)


def is_fixture(store: Path, rel: Path) -> bool:
    """A file of a fixture store (its manifest and its tensors) at `store`, relative to the same root as `rel`."""
    return rel.parent == store and (rel.name == "MANIFEST.json" or rel.suffix == ".safetensors")


def under(rel: Path, *folders: str | Path) -> bool:
    return any(rel == Path(f) or rel.is_relative_to(f) for f in folders)


def allowed(assignment: Assignment, rel: Path) -> str | None:
    """Why the file at `rel` (relative to the course's root, or to a handout's) belongs in the handout, or None:
    the handout's allowlist. `handout_exclude` and the hidden folder still leave out what it admits."""
    packages = {Path(module.split(".")[0]) for module in (assignment.table.get("cases", "tests.cases"),
                                                          assignment.adapters_module)}  # fmt: skip
    if rel in WRITTEN or (len(rel.parts) == 1 and rel.name in PROJECT_FILES):
        return "the project"
    if is_fixture(Path(assignment.table.get("fixtures", "fixtures")), rel):
        return "a fixture"
    if rel.suffix == ".py" and under(rel, *packages):
        return "a test module"
    if rel.suffix == ".py" and under(rel, *assignment.student_code, *TOOLING):
        return "the student's code or the harness they run"
    if under(rel, *assignment.table.get("handout_include", [])):
        return "handout_include"
    return None


def handout_files(assignment: Assignment) -> tuple[dict[Path, Content], list[str]]:
    """What the handout holds (relative path -> its content) and the solution lines cut from it: the files of the
    allowlist (`allowed`) that git tracks. HandoutError names one it would hold that git does not track."""
    root = assignment.root
    students = {p.relative_to(root) for p in student_files(assignment, root)}
    students |= {p for p in STUDY_SOLUTIONS if (root / p).is_file()}
    files: dict[Path, Content] = {}
    removed: list[str] = []
    chosen = [r for r in course_files(root) if not left_out(assignment, r) and allowed(assignment, r)]
    untracked = sorted(set(chosen) & untracked_files(root))
    if untracked:
        raise HandoutError(
            f"git does not track {', '.join(map(str, untracked[:10]))}{' ...' if len(untracked) > 10 else ''} in "
            f"{root}: a handout holds only what the repository tracks; `git add` or remove them"
        )
    for rel in chosen:
        if not (root / rel).is_file():
            continue
        if rel in students:
            files[rel], cut_lines = cut((root / rel).read_text(), str(rel))
            removed += cut_lines
        elif rel == Path("pyproject.toml"):
            files[rel] = handout_pyproject((root / rel).read_text(), assignment)
        elif rel == Path("uv.lock") and handout_sources(assignment):
            files[rel] = handout_lock(assignment, (root / rel).read_text())
        elif rel == Path("README.md") and student_readme(assignment):
            files[rel] = student_readme(assignment).read_text()
        else:
            files[rel] = root / rel
    return files, removed


def write_files(files: dict[Path, Content], out: Path) -> None:
    for rel, content in files.items():
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copy2(content, target)
        else:
            target.write_text(content)


def make_room(assignment: Assignment, out: Path, force: bool) -> None:
    """`out` must not exist; with `force` an existing one is removed first, unless it holds the course."""
    if not out.exists() and not out.is_symlink():
        return
    if not force:
        raise HandoutError(f"{out} already exists: choose a new folder, or pass --force to replace it")
    if assignment.root.is_relative_to(out.resolve()):
        raise HandoutError(f"{out} holds the course itself ({assignment.root}): --force will not remove it")
    if out.is_dir() and not out.is_symlink():
        shutil.rmtree(out)
    else:
        out.unlink()


def build(assignment: Assignment, out: Path, force: bool = False) -> list[str]:
    """Write the handout to `out` (which must not exist, or is replaced with `force`); return the solution
    lines cut."""
    make_room(assignment, out, force)
    files, removed = handout_files(assignment)
    write_files(files, out)
    classroom.write_workflow(assignment, out)  # GitHub Classroom's autograding (docs/platforms.md)
    return removed


def max_score(assignment: Assignment) -> float:
    return sum(problem.points for problem in assignment.problems.values())


def check(assignment: Assignment, out: Path, removed: list[str]) -> list[str]:
    """What is wrong with the handout at `out`; empty when it is right."""
    problems = not_allowed(assignment, out)  # first: the checks below leave an environment and caches there
    problems += leaked_solution(assignment, out, removed)
    if assignment.hidden_dir and any(
        p.is_relative_to(out / assignment.hidden_dir.name) for p in out.rglob("*") if p.is_file()
    ):
        problems.append("the hidden cases are in the handout")
    problems += staff_paths(assignment, out) + check_readme(assignment, out) + check_ruff(out)
    problems += casecheck.shipped_answers(assignment)  # an oracle or known mistake a student could copy
    problems += check_pytest(out, previous_assignments(assignment))
    device = torch.device("cpu")
    handout_grade = grade(assignment, out, device)
    if handout_grade.score != 0:
        problems.append(f"grading the handout gives {handout_grade.score:.3g}, not 0")
    solution_grade = grade(assignment, assignment.root, device)
    if abs(solution_grade.score - solution_grade.max_score) > 1e-9:
        problems.append(f"grading the solution gives {solution_grade.score:.3g}/{solution_grade.max_score:.3g}")
    return problems


def staff_paths(assignment: Assignment, out: Path) -> list[str]:
    """What in the handout only works on the staff's machine: an absolute path in any of its text files (the
    course's own folder, or any path in pyproject.toml or uv.lock), a dependency at a path outside the handout
    that `handout_sources` does not give, or one whose path the handout's README does not name."""
    problems = []
    roots = {str(assignment.root), str(assignment.root.resolve())}
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out)
        if path.is_file() and not ALWAYS_LEFT_OUT & set(rel.parts) and path.suffix not in (".safetensors", ".pyc"):
            text = path.read_text(errors="replace")
            problems += [f"{rel} names the staff's folder {root}" for root in sorted(roots) if root in text]
    pyproject, lock = out / "pyproject.toml", out / "uv.lock"
    sources = tomllib.loads(pyproject.read_text()).get("tool", {}).get("uv", {}).get("sources", {})
    listed = [(n, s) for n, one in sources.items() for s in (one if isinstance(one, list) else [one])]
    paths = {f"[tool.uv.sources] {n}": s["path"] for n, s in listed if "path" in s}
    paths |= {f"uv.lock's {m[2]}": m[2] for m in LOCK_PATH.finditer(lock.read_text() if lock.is_file() else "")}
    given = {s["path"] for s in handout_sources(assignment).values()}
    readme = (out / "README.md").read_text() if (out / "README.md").is_file() else ""
    for name, where in paths.items():
        if Path(where).is_absolute() or where.startswith("file:"):
            problems.append(f"the handout's {name} is the absolute path {where}: a student has nothing there")
        elif not (out / where).resolve().is_relative_to(out.resolve()) and where.rstrip("/") not in given:
            problems.append(
                f"the handout's {name} is at {where}, where the staff have it: give it as a student has it "
                '([tool.cs-basics] handout_sources = { NAME = { path = "../previous", editable = true } })'
            )
    problems += [f"the handout's README.md does not say where to put {where}" for where in given if where not in readme]
    return problems


def not_allowed(assignment: Assignment, out: Path) -> list[str]:
    """Each file in the handout at `out` that its allowlist does not admit, or that the course leaves out."""
    found = [p.relative_to(out) for p in sorted(out.rglob("*")) if p.is_file() or p.is_symlink()]
    return [
        f"{rel} is in the handout, but it is nothing a student needs (the handout's allowlist: {ALLOWLIST})"
        for rel in found
        if not ALWAYS_LEFT_OUT & set(rel.parts) and (left_out(assignment, rel) or not allowed(assignment, rel))
    ]


ALLOWLIST = (
    "pyproject.toml, uv.lock, README.md, .gitignore, the fixtures, the test packages' and the student's Python "
    "files, the harness, handout_include"
)


def code_lines(text: str) -> list[str]:
    """Lines that carry code of their own: not comments, not bare punctuation (a docstring's quotes, `)`)."""
    lines = (line.strip() for line in text.splitlines())
    return [s for s in lines if any(c.isalnum() for c in s) and not s.startswith("#")]


def leaked_solution(assignment: Assignment, out: Path, removed: list[str]) -> list[str]:
    """Any cut line left in the student's files, or any three cut lines in a row anywhere else
    (generic single lines, `raise ValueError(`, also occur in the harness)."""
    cut_lines = code_lines("".join(removed))
    runs = {tuple(cut_lines[i : i + 3]) for i in range(len(cut_lines) - 2)}
    students = {out / p.relative_to(assignment.root) for p in student_files(assignment, assignment.root)}
    problems = []
    for path in sorted(out.rglob("*.py")):
        lines = code_lines(path.read_text(errors="replace"))
        if path in students:
            leaked = sorted(set(lines) & set(cut_lines))
        else:
            leaked = [" / ".join(lines[i : i + 3]) for i in range(len(lines) - 2) if tuple(lines[i : i + 3]) in runs]
        problems += [f"solution code {line!r} appears in {path.relative_to(out)}" for line in leaked]
    return problems


def headings(text: str) -> list[str]:
    """A Markdown text's section headings, without their #s (lines in code blocks are not headings)."""
    found, fenced = [], False
    for line in text.splitlines():
        fenced ^= line.lstrip().startswith("```")
        if not fenced and re.match(r"#{1,6} ", line):
            found.append(line.lstrip("#").strip())
    return found


def check_readme(assignment: Assignment, out: Path) -> list[str]:
    """The handout's README is the student's, and no Markdown file in the handout has a section of the
    staff's manual (the README and the pages of docs/ beside the student's) that the student's does not
    (layout, fixtures, grading, the threat model...)."""
    readme = student_readme(assignment)
    if readme is None:
        return []
    problems = []
    if (out / "README.md").read_text() != readme.read_text():
        problems.append(f"the handout's README.md is not {readme.relative_to(assignment.root)}")
    manual = [assignment.root / "README.md", *(p for p in (assignment.root / "docs").glob("*.md") if p != readme)]
    staff = {h for page in manual if page.is_file() for h in headings(page.read_text())}
    staff -= set(headings(readme.read_text()))
    for path in sorted(out.rglob("*.md")):
        if ".venv" not in path.relative_to(out).parts:
            for heading in sorted(staff & set(headings(path.read_text()))):
                problems.append(f"{path.relative_to(out)} has the staff README's section {heading!r}")
    return problems


def check_ruff(out: Path) -> list[str]:
    """`ruff check` passes on the handout: no import left that only the cut solution used."""
    command = [sys.executable, "-m", "ruff", "check", "--no-cache", "--quiet", "."]
    try:
        done = subprocess.run(command, cwd=out, capture_output=True, text=True, timeout=300)
    except OSError as err:
        return [f"cannot run ruff on the handout ({err})"]
    if done.returncode != 0:
        return [f"`ruff check` fails on the handout:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"]
    return []


def previous_assignments(assignment: Assignment) -> dict[str, Path]:
    """Each path of `handout_sources` (where a student keeps a previous assignment, relative to the handout) and
    the folder the staff's own [tool.uv.sources] gives for it: what the handout's check puts there."""
    staff = tomllib.loads((assignment.root / "pyproject.toml").read_text()).get("tool", {}).get("uv", {})
    sources = staff.get("sources", {})
    return {
        source["path"]: (assignment.root / sources[name]["path"]).resolve()
        for name, source in handout_sources(assignment).items()
    }


def check_pytest(out: Path, previous: dict[str, Path] | None = None) -> list[str]:
    """`uv run pytest` in the handout: it runs, and every graded test fails with NotImplementedError. A handout
    that expects a student's previous assignment beside it (`previous`: its path -> a folder that stands for it)
    runs from a copy laid out that way, in a temporary folder."""
    uv = shutil.which("uv")
    if uv is None:
        return ["cannot check the handout: no `uv` on PATH (pip install uv)"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_PROJECT", "CS_BASICS"))}
    env["UV_PYTHON_DOWNLOADS"] = "never"
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        if previous:
            out = laid_out_beside(out, previous, Path(tmp) / "layout")
        command = [uv, "run", "--frozen", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
        done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=1200)
        if not report.is_file():
            return [f"`uv run pytest` did not run in the handout:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"]
        cases = list(ET.parse(report).getroot().iter("testcase"))
        graded = [c for c in cases if "[" in c.get("name", "")]
    problems = [
        f"{c.get('name')} fails in the handout, but it is not a graded test"
        for c in cases
        if c not in graded and (c.find("failure") is not None or c.find("error") is not None)
    ]
    if not graded:
        problems.append("`uv run pytest` in the handout ran no graded test")
    for case in graded:
        failure = case.find("failure")
        text = "" if failure is None else (failure.get("message", "") + (failure.text or ""))
        if "NotImplementedError" not in text:
            problems.append(f"{case.get('name')} does not fail with NotImplementedError in the handout")
    return problems


def laid_out_beside(handout: Path, previous: dict[str, Path], top: Path) -> Path:
    """A copy of the handout under `top`, each previous assignment linked at its relative path from it (deep
    enough below `top` for every `..` of those paths); returns the copy."""
    depth = max(len([part for part in Path(p).parts if part == ".."]) for p in previous)
    copy = top.joinpath(*(f"up{i}" for i in range(depth)), handout.name)
    shutil.copytree(handout, copy, ignore=shutil.ignore_patterns(*ALWAYS_LEFT_OUT))
    for where, folder in previous.items():
        link = Path(os.path.normpath(copy / where))
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(folder, target_is_directory=True)
    return copy
