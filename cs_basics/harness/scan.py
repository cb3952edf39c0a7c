"""The static half of the from-scratch rule: forbidden library names in the code a problem reaches.

The code is parsed, never imported. Imports are followed so that aliases resolve to full names
(`import torch.nn.functional as F` makes `F.softmax` read `torch.nn.functional.softmax`;
`from torch import softmax as s` makes `s` read `torch.softmax`; `getattr(torch, "softmax")`
reads `torch.softmax`). A use counts against a problem only where that problem's function can
reach it: starting from the problem's adapter, through the functions and classes it names in
the student's modules (a name-based call graph), and the module-level code of the modules it
reaches. A method called on something the scan cannot resolve (`self.softmax(x)`,
`scores.softmax(-1)`) is not a use: the run-time record (record.py) decides those. Patterns are
matched with fnmatch, so `torch.ops.*` forbids every operator reached through `torch.ops`.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import pickle
import resource
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

MAIN_GUARD = "__name__"  # `if __name__ == "__main__":` blocks never run on import
DEPTH_LIMIT = 3000  # syntax-tree levels: deeper than Python itself compiles with its default recursion limit
RECURSION_LIMIT = 4 * DEPTH_LIMIT  # the scan's visitors recurse once or twice per level
STACK_BYTES = 256 << 20  # the scan thread's stack, for that recursion
USES_KEPT = 50  # uses reported per problem: a message needs the first, a verdict needs one


class Unreadable(Exception):
    """The student's code cannot be read within the scan's bounds (too deep, too large): it cannot be graded."""


@dataclass(frozen=True)
class Use:
    name: str  # the resolved name, e.g. "torch.nn.functional.softmax"
    path: str  # the file, relative to the submission
    line: int

    def __str__(self) -> str:
        return f"{self.name} at {self.path}:{self.line}"


def dotted(node: ast.expr) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None for anything that is not a plain name chain."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def matches(name: str, patterns: Iterable[str]) -> str | None:
    """The first pattern that `name` or one of its prefixes matches (`torch.nn.Softmax(...)` and
    `torch.nn.Softmax.forward` both use `torch.nn.Softmax`)."""
    parts = name.split(".")
    for pattern in patterns:
        for end in range(len(parts), 0, -1):
            if fnmatch.fnmatchcase(".".join(parts[:end]), pattern):
                return pattern
    return None


class Module:
    """One parsed file: its imports, its top-level definitions, and its other module-level code."""

    def __init__(self, name: str, path: str, source: str | bytes):
        self.name, self.path = name, path
        self.tree = ast.parse(source)
        self.aliases: dict[str, str] = {}
        self.defs: dict[str, list[ast.AST]] = {}  # functions, classes and assigned names
        self.other: list[ast.stmt] = []  # module-level code that runs on import
        package = name.split(".") if path.endswith("__init__.py") else name.split(".")[:-1]
        for node in ast.walk(self.tree):  # imports first, wherever they are, so aliases are known
            if isinstance(node, ast.Import | ast.ImportFrom):
                self._alias(node, package)
        for node in self.tree.body:
            self._define(node)

    def _alias(self, node: ast.Import | ast.ImportFrom, package: list[str]) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                self.aliases[alias.asname or top] = alias.name if alias.asname else top
            return
        base = node.module or ""
        if node.level:
            base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
        for alias in node.names:
            self.aliases[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name

    def _define(self, node: ast.stmt) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            self.defs.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and all(isinstance(t, ast.Name) for t in _targets(node)):
            for target in _targets(node):
                self.defs.setdefault(target.id, []).append(node)
        elif not isinstance(node, ast.Import | ast.ImportFrom) and not _is_main_guard(node):
            self.other.append(node)


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return list(node.targets) if isinstance(node, ast.Assign) else [node.target]


def _is_main_guard(node: ast.stmt) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == MAIN_GUARD


def _locals(node: ast.AST) -> set[str]:
    """Names bound inside a function (its parameters and assignments): they shadow the module's."""
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        return set()
    args = node.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            names.add(child.id)
    return names


def references(node: ast.AST) -> Iterator[tuple[list[str], int]]:
    """Every name chain in `node` (outermost chains only), with getattr(x, "const") read as x.const,
    skipping names the enclosing function binds itself."""
    shadowed: set[str] = set()

    def visit(n: ast.AST, scope: set[str]) -> Iterator[tuple[list[str], int]]:
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            scope = scope | _locals(n)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr" and len(n.args) >= 2:
            name = n.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                chain = dotted(n.args[0])
                if chain and chain[0] not in scope:
                    yield [*chain, name.value], n.lineno
        if isinstance(n, ast.Attribute | ast.Name):
            chain = dotted(n)
            if chain is not None:
                if chain[0] not in scope:
                    yield chain, n.lineno
                return
        for child in ast.iter_child_nodes(n):
            yield from visit(child, scope)

    yield from visit(node, shadowed)


class Program:
    """The student's modules, and what each problem's entry point reaches in them."""

    def __init__(self, modules: Iterable[Module]):
        self.modules = {m.name: m for m in modules}

    @classmethod
    def parse(cls, root: Path, files: Iterable[Path]) -> Program:
        """The files (paths under `root`), read as bytes as Python reads them (their coding cookie honoured).
        A file that does not parse (a syntax error, null bytes, bad encoding) is left out: importing it
        fails the same way. One too deep or too large to parse raises Unreadable: Python might import it
        (after `sys.setrecursionlimit`), so what it holds would go unread."""
        found = []
        for path in sorted(files):
            relative = path.relative_to(root)
            parts = relative.with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            try:
                module = Module(name, relative.as_posix(), path.read_bytes())
            except (SyntaxError, ValueError):
                continue
            except RecursionError:
                raise Unreadable(f"{relative.as_posix()} is nested too deeply to read") from None
            except MemoryError:
                raise Unreadable(f"{relative.as_posix()} needs more memory to read than the grader gives") from None
            if depth(module.tree) > DEPTH_LIMIT:
                raise Unreadable(f"{relative.as_posix()} is nested over {DEPTH_LIMIT} levels deep")
            found.append(module)
        return cls(found)

    def resolve(self, module: Module, chain: list[str], seen: frozenset = frozenset()) -> tuple[str, tuple | None]:
        """The full dotted name of a chain used in `module`, and the student definition it names if any."""
        head = chain[0]
        if head in module.defs and head not in module.aliases:
            return ".".join([module.name, *chain]), (module.name, head)
        full = ".".join([module.aliases[head], *chain[1:]]) if head in module.aliases else ".".join(chain)
        return full, self.definition(full, seen)

    def definition(self, full: str, seen: frozenset = frozenset()) -> tuple | None:
        """The student definition a full dotted name names, following re-exports (`from .f import g`)."""
        if full in seen:
            return None
        parts = full.split(".")
        for end in range(len(parts) - 1, 0, -1):
            owner = self.modules.get(".".join(parts[:end]))
            if owner is None:
                continue
            head = parts[end]
            if head in owner.defs:
                return owner.name, head
            if head in owner.aliases:
                return self.resolve(owner, parts[end:], seen | {full})[1]
            return None
        return None

    def reachable(self, entries: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        """The definitions reached from `entries` through the names their bodies use."""
        todo, seen = list(entries), set()
        while todo:
            key = todo.pop()
            if key in seen or key[0] not in self.modules:
                continue
            seen.add(key)
            module = self.modules[key[0]]
            for node in module.defs.get(key[1], []):
                for chain, _ in references(node):
                    target = self.resolve(module, chain)[1]
                    if target is not None:
                        todo.append(target)
        return seen

    def uses(self, reached: set[tuple[str, str]], patterns: Iterable[str]) -> list[Use]:
        """Forbidden names used in the reached definitions and in the module-level code of their modules."""
        patterns = list(patterns)
        found = set()
        for name in sorted({m for m, _ in reached}):
            module = self.modules[name]
            nodes = [n for m, d in reached if m == name for n in module.defs.get(d, [])] + module.other
            for node in nodes:
                for chain, line in references(node):
                    full, target = self.resolve(module, chain)
                    if target is None and matches(full, patterns):
                        found.add(Use(full, module.path, line))
        return sorted(found, key=lambda u: (u.path, u.line, u.name))


def entry_points(adapters: Module, program: Program, function: str) -> list[tuple[str, str]]:
    """The student definitions an adapter function names (e.g. `functional.softmax` in `run_softmax`)."""
    targets = []
    for node in adapters.defs.get(function, []):
        for chain, _ in references(node):
            full, _ = program.resolve(adapters, chain)
            target = program.definition(full)
            if target is not None:
                targets.append(target)
    return targets


def depth(tree: ast.AST) -> int:
    """How many levels deep the tree goes (without recursing)."""
    deepest, todo = 0, [(tree, 1)]
    while todo:
        node, level = todo.pop()
        deepest = max(deepest, level)
        todo.extend((child, level + 1) for child in ast.iter_child_nodes(node))
    return deepest


def scan(job: dict) -> dict[str, list[Use]]:
    """Each problem's forbidden names in the code its adapter reaches. `job`: "code" (the folder), "files"
    (the student's files under it), "adapters" (module name), "adapters_path" and "problems" (name ->
    [adapter function, forbidden patterns])."""
    code = Path(job["code"])
    program = Program.parse(code, [Path(f) for f in job["files"]])
    try:
        adapters = Module(job["adapters"], Path(job["adapters_path"]).name, Path(job["adapters_path"]).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return {}
    return {
        name: program.uses(program.reachable(entry_points(adapters, program, adapter)), forbidden)[:USES_KEPT]
        for name, (adapter, forbidden) in job["problems"].items()
    }


def main() -> None:
    """The scan in a process of its own (fromscratch.scan_bounded starts it): the job as JSON on stdin, the
    result pickled on stdout, {"uses": ...} or {"unreadable": why}. Its memory is bounded before it reads
    a byte of the student's code."""
    job = json.load(sys.stdin)
    resource.setrlimit(resource.RLIMIT_AS, (job["memory"], job["memory"]))
    sys.setrecursionlimit(RECURSION_LIMIT)
    threading.stack_size(STACK_BYTES)
    result: dict = {}

    def work() -> None:
        try:
            result["uses"] = scan(job)
        except Unreadable as err:
            result["unreadable"] = str(err)
        except RecursionError:
            result["unreadable"] = "it is nested too deeply to read"
        except MemoryError:
            result["unreadable"] = "it needs more memory to read than the grader gives"

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    sys.stdout.buffer.write(pickle.dumps(result))
