"""The static half of the from-scratch rule: forbidden library names in the code a problem reaches.

The code is parsed, never imported. Imports are followed so that aliases resolve to full names
(`import torch.nn.functional as F` makes `F.softmax` read `torch.nn.functional.softmax`;
`from torch import softmax as s` makes `s` read `torch.softmax`; `getattr(torch, "softmax")`
reads `torch.softmax`). A use counts against a problem only where that problem's function can
reach it: starting from each of the problem's adapters, through the functions and classes they name in
the student's modules (a name-based call graph), and the module-level code of the modules it
reaches. A method called on something the scan cannot resolve (`self.softmax(x)`,
`scores.softmax(-1)`) is not a use: the run-time record (record.py) decides those. Patterns are
matched with fnmatch, so `torch.ops.*` forbids every operator reached through `torch.ops`.
Code that cannot run (after an unconditional `return`, under `if False:` or `if TYPE_CHECKING:`, ...) is
removed before anything is read (prune_dead_code): a name there costs nothing.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import pickle
import re
import string
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from cs_basics.harness.cgroup import killed_first
from cs_basics.harness.portable import is_linux, unix_module
from cs_basics.harness.rule.allowed import ALLOWED, Allowed

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

    def __init__(self, name: str, path: str, source: str | bytes | ast.Module, type_checking_dead: bool = True):
        """`type_checking_dead`: `if TYPE_CHECKING:` blocks never run (false where the program assigns it)."""
        self.name, self.path = name, path
        self.tree = source if isinstance(source, ast.Module) else ast.parse(source)
        self.aliases: dict[str, str] = {}
        self.defs: dict[str, list[ast.AST]] = {}  # functions, classes and assigned names
        self.other: list[ast.stmt] = []  # module-level code that runs on import
        self._package = name.split(".") if path.endswith("__init__.py") else name.split(".")[:-1]
        prune_dead_code(self.tree, self._never_true if type_checking_dead else _constant_false)
        self.aliases = {}  # read after the pruning: an import in code that never runs binds nothing
        self._read_aliases()
        for node in self.tree.body:
            self._define(node)

    def _read_aliases(self) -> None:
        for node in ast.walk(self.tree):  # imports first, wherever they are, so aliases are known
            if isinstance(node, ast.Import | ast.ImportFrom):
                self._alias(node, self._package)

    def _never_true(self, test: ast.expr) -> bool:
        """A test that is false whenever it runs: a false constant, or typing's TYPE_CHECKING imported as such
        and bound by nothing else in this module."""
        if _constant_false(test):
            return True
        chain = dotted(test)
        if not chain or chain[-1] != TYPE_CHECKING:
            return False
        head = chain[0]
        if not self.aliases:  # every import, dead or not, read once: `from typing import TYPE_CHECKING` comes first
            self._read_aliases()
        full = ".".join([self.aliases.get(head, head), *chain[1:]])
        rebound = any(
            (isinstance(n, ast.Name) and n.id == head and not isinstance(n.ctx, ast.Load))
            or (isinstance(n, ast.Global | ast.Nonlocal) and head in n.names)
            for n in ast.walk(self.tree)
        )  # fmt: skip
        return full in TYPING_FLAGS and not rebound

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


TYPE_CHECKING = "TYPE_CHECKING"
TYPING_FLAGS = {"typing.TYPE_CHECKING", "typing_extensions.TYPE_CHECKING"}
_ENDS_BLOCK = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_SCOPE_DECLARATIONS = (ast.Global, ast.Nonlocal)  # compile-time: they hold wherever they stand


def _assigns_type_checking(tree: ast.AST) -> bool:
    """`typing.TYPE_CHECKING = True`, `setattr(typing, "TYPE_CHECKING", 1)`: then no TYPE_CHECKING block is dead."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr == TYPE_CHECKING and not isinstance(n.ctx, ast.Load):
            return True
        if isinstance(n, ast.Constant) and n.value == TYPE_CHECKING:
            return True  # a string naming it: setattr, a dictionary of a namespace
    return False


def _constant_false(test: ast.expr) -> bool:
    return isinstance(test, ast.Constant) and not test.value


def _constant_true(test: ast.expr) -> bool:
    return isinstance(test, ast.Constant) and bool(test.value)


def _ends_block(node: ast.stmt) -> bool:
    """Control never reaches the statement after `node` in its block."""
    if isinstance(node, _ENDS_BLOCK):
        return True
    if not isinstance(node, ast.If):
        return False
    return _ends(node.body) and (_constant_true(node.test) or (bool(node.orelse) and _ends(node.orelse)))


def _ends(statements: list[ast.stmt]) -> bool:
    return any(_ends_block(s) for s in statements)


def prune_dead_code(tree: ast.Module, never_true: Callable[[ast.expr], bool]) -> None:
    """Remove, in place, the statements that can never run: those after an unconditional return, raise,
    continue or break in the same block (or an if whose branches all end so), the body of an `if` or `while`
    whose test `never_true` (a false constant, TYPE_CHECKING) and the `else` of an `if True:`. A name there
    costs nothing: it never runs."""

    def block(statements: list[ast.stmt]) -> list[ast.stmt]:
        kept: list[ast.stmt] = []
        ended = False
        for node in statements:
            if ended:
                if isinstance(node, _SCOPE_DECLARATIONS):
                    kept.append(node)
                continue
            if isinstance(node, ast.If | ast.While) and never_true(node.test):
                inlined = block(node.orelse)
                kept.extend(inlined)
                ended = _ends(inlined)
                continue
            if isinstance(node, ast.If) and _constant_true(node.test):
                node.orelse = []
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(node, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    setattr(node, field, block(inner) or [ast.copy_location(ast.Pass(), node)])
            for child in getattr(node, "handlers", []) + getattr(node, "cases", []):
                child.body = block(child.body) or [ast.copy_location(ast.Pass(), node)]
            kept.append(node)
            ended = _ends_block(node)
        return kept

    tree.body = block(tree.body)


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

    def __init__(self, modules: Iterable[Module], allowed: Allowed | None = None, packages: Iterable[str] = ()):
        self.modules = {m.name: m for m in modules}
        self.allowed = allowed if allowed is not None else Allowed()
        self.packages = tuple(packages)  # the student's packages, as dotted names (its modules may lie elsewhere)
        self._instances: dict[str, dict[str, bool]] = {}
        self._plain_classes: dict[tuple, bool] = {}

    def owns(self, name: str) -> bool:
        """Whether a dotted module name is the student's own (one of its modules, or a package holding them)."""
        return (
            bool(name)
            and (
                any(m == name or m.startswith(name + ".") for m in self.modules)
                or any(name == p or name.startswith(p + ".") for p in self.packages)
            )
            and not any(name == t or name.startswith(t + ".") for t in TOOLING_NAMES)
        )

    @cached_property
    def trusted_methods(self) -> set[int]:
        """The methods (by id) whose first parameter is always the student's own instance: of the candidates
        (candidate_methods), those that no student code reads unbound: every `x.m` of their name is read on an
        own instance, or called with one as its first argument (`Base.__init__(self)`). A fixpoint: `self.m`
        proves something only where that `self` is itself own."""
        candidates = candidate_methods(self)
        names = {m.name for m in candidates.values()}
        uses = {m: list(method_uses(module.tree, names)) for m, module in self.modules.items()} if names else {}
        untrusted: set[str] = set()
        while True:
            trusted = {i for i, m in candidates.items() if m.name not in untrusted}
            found = set()
            for name, module in self.modules.items():
                read = [use for use in uses.get(name, []) if use[0] not in untrusted]
                own = OwnObjects(module, self, trusted).collect(module.tree) if read else ()
                found |= {method for method, on, first in read if on not in own and first not in own}
            if not found:
                return trusted
            untrusted |= found

    @cached_property
    def _rebound(self) -> set[str]:
        """Names some student code may rebind from afar: `global`/`nonlocal` ones, attributes it assigns or deletes
        (`module.Options = ...`, `Options.__new__ = ...`, by setattr with a constant too)."""
        found = set()
        for module in self.modules.values():
            for n in ast.walk(module.tree):
                if isinstance(n, ast.Global | ast.Nonlocal):
                    found.update(n.names)
                elif isinstance(n, ast.Attribute) and not isinstance(n.ctx, ast.Load):
                    found.add(n.attr)
                elif isinstance(n, ast.Call) and dotted(n.func) in (["setattr"], ["delattr"]) and len(n.args) > 1:
                    named = n.args[1]
                    found.add(named.value if isinstance(named, ast.Constant) and isinstance(named.value, str) else "")
        return found

    def module_instances(self, module: Module) -> dict[str, bool]:
        """The module's globals that hold a student's own instance whatever the code does: bound once, at the
        top level, to a new instance of a plain class (`_DEFAULTS = Options()`), and bound nowhere else."""
        if module.name not in self._instances:
            stores = Counter(
                n.id for n in ast.walk(module.tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
            )
            self._instances[module.name] = {
                name: True
                for node in module.tree.body
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and self.plain_class(module, node.value.func)
                and stores[name := node.targets[0].id] == 1 and name not in self._rebound | module.aliases.keys()
            }  # fmt: skip
        return self._instances[module.name]

    def plain_class(self, module: Module, node: ast.expr) -> bool:
        """Whether calling `node` (a name in `module`) makes a new instance of a student class whatever the code does:
        a class defined once, never rebound, with no `__new__` or metaclass of its own or its student bases', no
        library base that is a metaclass, decorated by nothing but dataclasses.dataclass."""
        chain = dotted(node)
        target = self.resolve(module, chain)[1] if chain else None
        if target is None:
            return False
        if target not in self._plain_classes:
            self._plain_classes[target] = self._plain(target, frozenset())
        return self._plain_classes[target]

    def _plain(self, target: tuple, seen: frozenset) -> bool:
        owner = self.modules.get(target[0])
        defs = owner.defs.get(target[1], []) if owner else []
        if target in seen or len(defs) != 1 or not isinstance(defs[0], ast.ClassDef):
            return False
        cls = defs[0]
        stored = {n.id for n in ast.walk(owner.tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        imported = {
            (a.asname or a.name).split(".")[0]
            for n in ast.walk(owner.tree)
            if isinstance(n, ast.Import | ast.ImportFrom)
            for a in n.names
        }
        if cls.name in stored | imported | self._rebound or "__new__" in self._rebound:
            return False
        if any(k.arg == "metaclass" for k in cls.keywords) or "__new__" in _class_names(cls):
            return False
        for decorator in cls.decorator_list:
            chain = dotted(decorator.func if isinstance(decorator, ast.Call) else decorator)
            if not chain or self.resolve(owner, chain)[0] != "dataclasses.dataclass":
                return False
        for base in cls.bases:
            chain = dotted(base)
            if not chain:
                return False
            full, student = self.resolve(owner, chain)
            if student is not None and not self._plain(student, seen | {target}):
                return False
            if (student is None and fnmatch.fnmatchcase(full.rsplit(".", 1)[-1].lower(), "*type")) or full.endswith(
                "Meta"
            ):
                return False
        return True

    @classmethod
    def parse(cls, root: Path, files: Iterable[Path]) -> Program:
        """The files (paths under `root`), read as bytes as Python reads them (their coding cookie honoured).
        A file that does not parse (a syntax error, null bytes, bad encoding) is left out: importing it
        fails the same way. One too deep or too large to parse raises Unreadable: Python might import it
        (after `sys.setrecursionlimit`), so what it holds would go unread."""
        trees = []
        for path in sorted(files):
            relative = path.relative_to(root)
            parts = relative.with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            try:
                tree = ast.parse(path.read_bytes())
            except (SyntaxError, ValueError):
                continue
            except RecursionError:
                raise Unreadable(f"{relative.as_posix()} is nested too deeply to read") from None
            except MemoryError:
                raise Unreadable(f"{relative.as_posix()} needs more memory to read than the grader gives") from None
            if depth(tree) > DEPTH_LIMIT:
                raise Unreadable(f"{relative.as_posix()} is nested over {DEPTH_LIMIT} levels deep")
            trees.append((name, relative.as_posix(), tree))
        type_checking_dead = not any(_assigns_type_checking(tree) for _, _, tree in trees)
        return cls(Module(name, path, tree, type_checking_dead) for name, path, tree in trees)

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

    def runs(self, entries: Iterable[tuple[str, str]], imported: Iterable[str] = ()) -> dict[str, list[ast.AST]]:
        """What runs when the entries are called, by module: the definitions they reach, and everything that
        runs at import in the modules those live in, in the packages above them and in the student modules
        they import (module-level code, with the definitions it calls, decorators, defaults, class bodies)."""
        reached = self.reachable(entries)
        modules = {m for m in self.modules if any(i == m or i.startswith(m + ".") for i in imported)}
        while True:
            grown = {m for m, _ in reached} | modules
            for name in list(grown):
                parts = name.split(".")
                grown |= {".".join(parts[:end]) for end in range(1, len(parts))} & self.modules.keys()
                for full in self.modules[name].aliases.values() if name in self.modules else ():
                    target = self.definition(full)
                    grown |= {target[0]} if target else set()
                    grown |= {m for m in self.modules if full == m or full.startswith(m + ".")}
            entries = [
                target
                for name in grown
                if name in self.modules
                for chain in called(import_time(self.modules[name], set()))
                if (target := self.resolve(self.modules[name], chain)[1]) is not None
            ]
            more = self.reachable(entries) | reached
            if grown == modules and more == reached:
                break
            modules, reached = grown, more
        return {
            name: import_time(self.modules[name], {d for m, d in reached if m == name})
            for name in sorted(modules)
            if name in self.modules
        }


def called(nodes: list[ast.AST]) -> Iterator[list[str]]:
    """The name chains that code run at import calls (a name only assigned, `_mine = softmax`, runs nothing);
    a decorator counts as a call."""
    for node in nodes:
        if isinstance(node, ast.expr) and dotted(node):
            yield dotted(node)
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and dotted(n.func):
                yield dotted(n.func)


def import_time(module: Module, reached: set[str]) -> list[ast.AST]:
    """The parts of a module that run: all of its top-level code but the bodies of functions (and methods)
    not in `reached`, and `if __name__ == "__main__":` blocks."""
    nodes: list[ast.AST] = []

    def add(statements: list[ast.stmt], top: bool) -> None:
        for node in statements:
            name = getattr(node, "name", None)
            if (top and name in reached) or (not isinstance(node, _DEFINITIONS) and not _is_main_guard(node)):
                nodes.append(node)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                nodes.extend([*node.decorator_list, *args.defaults, *[d for d in args.kw_defaults if d]])
            elif isinstance(node, ast.ClassDef):
                nodes.extend([*node.decorator_list, *node.bases, *node.keywords])
                add(node.body, top=False)

    add(module.tree.body, top=True)
    return nodes


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


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


# ---------------------------------------------------------------- constructs that reach into the interpreter

# Code a problem runs may name only what the course allows (rule/allowed.py), may not reach the grader's objects
# in its own process, nor build names this scan cannot read: anything else holds the problem for the staff's
# review (docs/grading.md, "From scratch"). Why the best-known modules are held, in the hold's words:
HELD_MODULES = {
    "sys": "the interpreter's module registry and frames (sys.modules, sys._getframe)",
    "gc": "the garbage collector's list of every object",
    "inspect": "frames and other functions' globals",
    "ctypes": "raw memory and C calls",
    "importlib": "imports by a name built at run time",
    "builtins": "the interpreter's built-in names",
    "types": "code and function objects built at run time",
    "marshal": "code objects built at run time",
    "pickle": "calls of functions named in data",
    "copyreg": "calls of functions named in data",
    "_thread": "the harness's threads",
    "subprocess": "another process",
    "multiprocessing": "another process",
    "pty": "another process",
    "runpy": "code run by a name built at run time",
    "code": "code run from a string",
}
# ... and names of modules the course may allow otherwise: a fresh interpreter, without the forbidden operators'
# replacement (a forked process inherits it)
HELD_PATTERNS = {
    pattern: "another process, started by exec"
    for pattern in ("os.system", "os.popen", "os.posix_spawn*", "os.exec*", "os.spawn*", "os.startfile")
} | {
    "concurrent.futures.ProcessPoolExecutor": "another process (a process pool)",
    "concurrent.futures.process*": "another process (a process pool)",
    "concurrent.interpreters*": "another interpreter",
    "operator.attrgetter": "attribute access by a name built at run time",
    "operator.methodcaller": "a method call by a name built at run time",
}
# held wherever they appear, even on the student's own objects: they reach other code's objects
HELD_DUNDERS = {
    "__dict__", "__globals__", "__class__", "__subclasses__", "__builtins__", "__bases__", "__base__", "__mro__",
    "__code__", "__closure__", "__func__", "__self__", "__wrapped__", "__getattribute__", "__setattr__",
    "__delattr__", "__reduce__", "__reduce_ex__", "__loader__", "__spec__", "__import__", "__module__",
    "__defaults__", "__kwdefaults__", "__traceback__", "__frame__", "f_back", "f_globals", "f_locals",
    "tb_frame", "gi_frame", "cr_frame", "__objclass__", "__init_subclass__", "__set_name__",
    "__path__",  # a package's search path: a folder put first there shadows the modules imported through it
}  # fmt: skip
COMMON_WORDS = {"types", "operator", "code"}  # names of held modules that are also common attribute names
NAMING = {"__class__": {"__name__", "__qualname__", "__module__"}}  # `self.__class__.__name__` names the class
READ_ONLY = {"__module__"}  # a name, harmless to read: held only where it is assigned
# on the student's own objects (self, cls, super(), `object.__setattr__(self, ...)`), ordinary Python: a frozen
# dataclass's __post_init__, `self.__dict__.update(kwargs)`, a registry's __init_subclass__
OWN_DUNDERS = {"__dict__", "__setattr__", "__delattr__", "__getattribute__", "__init_subclass__", "__set_name__"}
HELD_CALLS = {
    "exec": "code run from a string", "eval": "code run from a string", "compile": "code built from a string",
    "__import__": "an import by a name built at run time", "globals": "a module's namespace as a dictionary",
    "vars": "an object's namespace as a dictionary", "breakpoint": "a debugger",
}  # fmt: skip
DYNAMIC_ATTRIBUTE = {"getattr", "setattr", "delattr", "hasattr"}
VALUE_HELD = {*HELD_CALLS, *DYNAMIC_ATTRIBUTE}  # passed as a value (`map(getattr, ...)`), called where no scan sees
HELD_ATTRIBUTES = set(HELD_MODULES) - COMMON_WORDS  # `anything.sys`: a module reached through any object
TOOLING_NAMES = ("cs_basics.harness", "cs_basics.study", "cs_basics.cli", "tests", "hidden")  # the grader's code


@dataclass(frozen=True)
class Construct:
    what: str  # e.g. "sys.modules", "getattr with a name built at run time"
    why: str  # what it reaches
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.what} ({self.why})" + (f" at {self.path}:{self.line}" if self.path else "")


def held_name(full: str, allowed: Allowed) -> str | None:
    """Why a resolved library name is held (the grader's own code; a name the course does not allow), else None."""
    if any(full == t or full.startswith(t + ".") for t in TOOLING_NAMES):
        return "the grader's own code"
    why = allowed.why_held(full)
    if why is None:
        return _held_attributes(full.split(".")[1:])
    parts = full.split(".")
    pattern = matches(full, HELD_PATTERNS)
    known = HELD_PATTERNS[pattern] if pattern else HELD_MODULES.get(parts[0])
    return f"{why}: {known}" if known else f"{why}; {ALLOW_MORE}"


ALLOW_MORE = "a course allows more with `allowed` in [tool.cs-basics]"


def _held_attributes(parts: list[str]) -> str | None:
    """Why attributes read through a library name are held (a held module, a private name), else None."""
    for part in parts:
        if part in HELD_MODULES and part not in COMMON_WORDS:
            return f"a module reached as an attribute of another ({HELD_MODULES[part]})"
        if part.startswith("_") and not part.startswith("__"):
            return "a library's private name"
    return None


class OwnObjects:
    """Which expressions in the student's code are, whatever the code does, instances of the student's own classes:
    the first parameter of a method the code cannot call unbound (`self`, see `trusted_methods`), a local name
    bound only once, to a new instance of a plain student class (`made = Options()`, see `Program.plain_class`),
    and `super()` inside such a method. Attributes of these by names built at run time (getattr, setattr,
    delattr, vars, `__dict__`, `object.__setattr__`) are ordinary Python; on anything else (a class, whose
    attributes are its methods unbound; a module; a library's object; the grader's) they are held. A name alone
    proves nothing: `self` of a method called unbound, or a parameter annotated with a class, can be handed any
    object."""

    _SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    _COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)

    def __init__(self, module: Module, program: Program, trusted: set[int] | None = None):
        self.module, self.program = module, program
        self.trusted = program.trusted_methods if trusted is None else trusted  # ids of methods whose self is own
        self.names: set[int] = set()  # ids of the ast.Name and super() nodes that are the student's own instances

    def collect(self, node: ast.AST) -> OwnObjects:
        self._visit(node, [self.program.module_instances(self.module)], None)
        return self

    def __contains__(self, node: ast.AST | None) -> bool:
        return node is not None and id(node) in self.names

    def _visit(self, n: ast.AST, scopes: list[dict[str, bool]], function: ast.AST | None) -> None:
        if isinstance(n, self._SCOPES):
            outer = [*getattr(n, "decorator_list", []), *n.args.defaults, *[d for d in n.args.kw_defaults if d]]
            for child in outer:
                self._visit(child, scopes, function)
            inner = [*scopes, self._bindings(n, scopes)]
            for child in n.body if isinstance(n.body, list) else [n.body]:
                self._visit(child, inner, n)
        elif isinstance(n, ast.ClassDef):
            for child in [*n.decorator_list, *n.bases, *n.keywords]:
                self._visit(child, scopes, function)
            body = {t.id: False for stmt in n.body for t in ast.walk(stmt) if isinstance(t, ast.Name)}
            for stmt in n.body:  # methods do not see the class body's names
                is_def = isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef)
                self._visit(stmt, scopes if is_def else [*scopes, body], function)
        elif isinstance(n, self._COMPREHENSIONS):
            bound = {t.id: False for g in n.generators for t in ast.walk(g.target) if isinstance(t, ast.Name)}
            for child in ast.iter_child_nodes(n):
                self._visit(child, [*scopes, bound], function)
        elif isinstance(n, ast.Name):
            if isinstance(n.ctx, ast.Load) and next((t[n.id] for t in reversed(scopes) if n.id in t), False):
                self.names.add(id(n))
        else:
            if _zero_argument_super(n) and id(function) in self.trusted and not self._rebinds_first(function):
                self.names.add(id(n))
            for child in ast.iter_child_nodes(n):
                self._visit(child, scopes, function)

    def _rebinds_first(self, function: ast.AST) -> bool:
        first = [*function.args.posonlyargs, *function.args.args][0].arg
        return _bindings_count(function)[first] != 1

    def _bindings(self, function: ast.AST, scopes: list[dict[str, bool]]) -> dict[str, bool]:
        """The names a function binds, each True where it is the student's own instance whatever the code does."""
        args = function.args
        positional = [*args.posonlyargs, *args.args]
        counts = _bindings_count(function)
        table = dict.fromkeys(counts, False)
        if id(function) in self.trusted and counts[positional[0].arg] == 1:
            table[positional[0].arg] = True
        for node in _own_scope(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name, made = node.targets[0].id, node.value
                maker = dotted(made.func) if isinstance(made, ast.Call) else None
                local = maker and (maker[0] in counts or any(maker[0] in table for table in scopes))
                new = maker and not local and self.program.plain_class(self.module, made.func)
                table[name] = bool(new and counts[name] == 1)
        return table


IMPLICIT_CLASS_METHODS = {"__new__", "__init_subclass__", "__class_getitem__"}  # bound to a class, or to none


def _zero_argument_super(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and dotted(node.func) == ["super"] and not node.args and not node.keywords


def _bindings_count(function: ast.AST) -> Counter[str]:
    """How many times a function binds each name, every way Python binds one: parameters, assignments, `del`,
    imports, definitions, `except ... as`, match captures, `:=` in its comprehensions, and `global`/`nonlocal`
    here or `nonlocal` in a function inside it (counted twice: rebound elsewhere)."""
    args = function.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs, *[a for a in (args.vararg, args.kwarg) if a]]
    counts: Counter[str] = Counter(p.arg for p in params)
    for node in _own_scope(function, comprehensions=True):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            counts[node.id] += 1
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            counts[node.target.id] += 1
        elif isinstance(node, ast.Global | ast.Nonlocal):
            counts.update(dict.fromkeys(node.names, 2))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            counts[node.name] += 1
            counts.update(dict.fromkeys([n for d in ast.walk(node) if isinstance(d, ast.Nonlocal) for n in d.names], 2))
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            counts[node.name] += 1
        elif isinstance(node, ast.MatchMapping) and node.rest:
            counts[node.rest] += 1
        elif isinstance(node, ast.Import | ast.ImportFrom):
            counts.update([(a.asname or a.name).split(".")[0] for a in node.names])
    return counts


def _own_scope(function: ast.AST, comprehensions: bool = False) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of the functions, classes (and comprehensions, unless asked:
    a `:=` in one binds in the function) inside it."""
    todo = list(function.body) if isinstance(function.body, list) else [function.body]
    stop = (
        (*OwnObjects._SCOPES, ast.ClassDef)
        if comprehensions
        else (*OwnObjects._SCOPES, *OwnObjects._COMPREHENSIONS, ast.ClassDef)
    )
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, stop):
            todo.extend(ast.iter_child_nodes(node))


def _class_names(cls: ast.ClassDef) -> set[str]:
    """The names a class body binds."""
    names = {s.name for s in cls.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    return names | {
        n.id for s in cls.body for n in ast.walk(s) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    }


def candidate_methods(program: Program) -> dict[int, ast.FunctionDef | ast.AsyncFunctionDef]:
    """The methods whose first parameter may be the student's own instance: undecorated (a decorator may hand the
    function itself on) but for properties, not bound to a class (`__new__`, `__init_subclass__`), and not named
    as a plain name in their class's body (`alias = method`, `staticmethod(method)`)."""
    found = {}
    for module in program.modules.values():
        bound = _bound_anywhere(module.tree)
        for cls in (n for n in ast.walk(module.tree) if isinstance(n, ast.ClassDef)):
            methods = {s.name: s for s in cls.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)}
            named = {
                n.id
                for stmt in cls.body
                for part in ([*stmt.decorator_list, *stmt.args.defaults] if stmt in methods.values() else [stmt])
                for n in ast.walk(part)
                if isinstance(n, ast.Name)
            }
            for name, method in methods.items():
                positional = [*method.args.posonlyargs, *method.args.args]
                binds = all(_binds_to_instances(module, program, d, bound) for d in method.decorator_list)
                if positional and binds and name not in IMPLICIT_CLASS_METHODS | named:
                    found[id(method)] = method
    return found


def _binds_to_instances(module: Module, program: Program, decorator: ast.expr, bound: set[str]) -> bool:
    """A decorator that leaves the function bound to an instance: `property`, `functools.cached_property` (their
    getter is reached unbound only through the class, `C.p.fget`, a use of the name like any other), by a name
    that nothing in the module rebinds (`bound`)."""
    chain = dotted(decorator)
    if not chain or (chain[0] in bound and chain[0] not in module.aliases):
        return False
    return program.resolve(module, chain)[0] in BINDING_DECORATORS


def _bound_anywhere(tree: ast.AST) -> set[str]:
    """Every name some code in `tree` binds, in any scope."""
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.add(n.id)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(n.name)
        elif isinstance(n, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.Global | ast.Nonlocal):
            names.update(n.names)
    return names


BINDING_DECORATORS = {"property", "functools.cached_property"}


def method_uses(tree: ast.AST, names: set[str]) -> Iterator[tuple[str, ast.expr, ast.expr | None]]:
    """Each place the code reads an attribute named like a method (`x.m`, `getattr(x, "m")`): the name, what it is
    read on, and the first argument when it is called there at once (`X.m(first, ...)`)."""
    calls = {id(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}

    def first(node: ast.AST) -> ast.expr | None:
        call = calls.get(id(node))
        if call is None or not call.args or isinstance(call.args[0], ast.Starred):
            return None
        return call.args[0]

    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr in names and isinstance(n.ctx, ast.Load):
            yield n.attr, n.value, first(n)
        elif isinstance(n, ast.Call) and dotted(n.func) == ["getattr"] and n.args:
            named = n.args[1] if len(n.args) > 1 else None
            if isinstance(named, ast.Constant) and named.value in names:
                yield named.value, n.args[0], first(n)


def _describe(node: ast.AST | None) -> str:
    """The expression as source, cut to 40 characters; ast.unparse cannot write every valid expression back
    (an f-string holding a control character in its expression part), and then its kind stands in for it."""
    try:
        text = ast.unparse(node) if node is not None else "?"
    except (ValueError, TypeError, AttributeError, RecursionError):
        text = f"an expression ({type(node).__name__})"
    return text if len(text) <= 40 else text[:37] + "..."


def constructs(module: Module, program: Program, nodes: Iterable[ast.AST]) -> list[Construct]:
    """The held constructs in `nodes` of `module`."""
    found = []

    def held(what: str, why: str, line: int) -> None:
        found.append(Construct(what, why, module.path, line))

    for node in nodes:
        own = OwnObjects(module, program).collect(node)
        naming = {  # `x.__class__` read only for its name: `x.__class__.__name__`
            id(n.value)
            for n in ast.walk(node)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute)
            and n.attr in NAMING.get(n.value.attr, ())
        }  # fmt: skip
        # `object.__setattr__(self, ...)`: a dunder of object or type applied to the student's own object
        on_own = {
            id(n.func)
            for n in ast.walk(node)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in OWN_DUNDERS
            and dotted(n.func.value) == ["object"] and n.args and n.args[0] in own
        }  # fmt: skip
        called = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
        for what, why, line in [*imports(module, program, node), *strings_run(module, program, node)]:
            held(what, why, line)
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id in VALUE_HELD and id(n) not in called and n.id not in module.defs:
                held(f"{n.id} as a value", "a call whose arguments this scan cannot read", n.lineno)
            if isinstance(n, ast.Attribute) and n.attr in HELD_ATTRIBUTES and not judged_by_name(module, program, n):
                held(f".{n.attr}", f"a module reached as an attribute ({HELD_MODULES[n.attr]})", n.lineno)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id not in module.defs:
                name, target = n.func.id, n.args[0] if n.args else None
                if name in HELD_CALLS and not (name == "vars" and len(n.args) == 1 and target in own):
                    held(f"{name}()", HELD_CALLS[name], n.lineno)
                elif name in DYNAMIC_ATTRIBUTE and len(n.args) >= 2:
                    attribute = n.args[1]
                    if not (isinstance(attribute, ast.Constant) and isinstance(attribute.value, str)):
                        if target not in own:
                            what = f"{name} with a name built at run time on {_describe(target)}"
                            why = "an object not proved the student's own instance, by a name this scan cannot read"
                            held(what, why, n.lineno)
                    elif attribute.value in HELD_DUNDERS and not (attribute.value in OWN_DUNDERS and target in own):
                        held(f".{attribute.value} (by {name})", "other code's objects", n.lineno)
                    elif attribute.value in HELD_ATTRIBUTES and not judged_by_name(module, program, target):
                        why = f"a module reached as an attribute ({HELD_MODULES[attribute.value]})"
                        held(f".{attribute.value} (by {name})", why, n.lineno)
            if isinstance(n, ast.Attribute) and n.attr in HELD_DUNDERS and id(n) not in naming | on_own:
                if n.attr in OWN_DUNDERS and n.value in own:
                    continue
                if n.attr == "__init_subclass__" and _zero_argument_super(n.value):
                    continue  # the parent's hook, bound to the class being made: `super().__init_subclass__(**kw)`
                if n.attr in READ_ONLY and isinstance(n.ctx, ast.Load):
                    continue
                held(f".{n.attr}", "other code's objects", n.lineno)
            elif isinstance(n, ast.Name) and n.id in HELD_DUNDERS:
                held(n.id, "other code's objects", n.lineno)
        for chain, line in references(node):
            full, target = program.resolve(module, chain)
            theirs = target is not None or chain[0] not in module.aliases or program.owns(full)
            why = None if theirs else held_name(full, program.allowed)
            if why:
                held(full, why, line)
    unique = {(c.path, c.line, c.what): c for c in found}
    return sorted(unique.values(), key=lambda c: (c.path, c.line, c.what))


def imports(module: Module, program: Program, node: ast.AST) -> Iterator[tuple[str, str, int]]:
    """The imports in `node` of modules and names the course does not allow (the student's own modules always are):
    (what, why, line)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            for alias in n.names:
                why = None if program.owns(alias.name) else _import_held(alias.name, program.allowed)
                if why:
                    yield f"import {alias.name}", why, n.lineno
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                package = module.name.split(".") if module.path.endswith("__init__.py") else module.name.split(".")[:-1]
                base = ".".join([*package[: len(package) - n.level + 1], *([base] if base else [])])
            for alias in n.names:
                full = base if alias.name == "*" else f"{base}.{alias.name}"
                if program.owns(full) or program.owns(base):
                    continue
                if alias.name == "*":
                    yield (
                        f"from {base} import *",
                        "a star import of a library (the names it binds cannot be read)",
                        n.lineno,
                    )
                    continue
                why = held_name(full, program.allowed) if program.allowed.why_held(full) else None
                if why is None and any(full == t or full.startswith(t + ".") for t in TOOLING_NAMES):
                    why = "the grader's own code"
                if why:
                    yield f"from {base} import {alias.name}", why, n.lineno


def _import_held(name: str, allowed: Allowed) -> str | None:
    if any(name == t or name.startswith(t + ".") for t in TOOLING_NAMES):
        return "the grader's own code"
    return None if allowed.allows_import(name) else held_name(name, allowed)


FORMAT_METHODS = ("format", "format_map")
# what jaxtyping reads in a dimension string: names, numbers, arithmetic and its marks (*, #, ..., _); it evaluates
# what else it finds there as Python
JAXTYPING_DIMENSIONS = re.compile(r"^[\w\s*#+\-/%,.]*$")


def strings_run(module: Module, program: Program, node: ast.AST) -> Iterator[tuple[str, str, int]]:
    """Strings that libraries read as code or as lookups by name: a format template's fields (`"{0.__globals__}"`:
    attributes read by name), an annotation or a jaxtyping dimension written as a string (beartype and jaxtyping
    evaluate them). (what, why, line)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in FORMAT_METHODS:
            yield from _format_template(module, n)
        annotations = []
        if isinstance(n, ast.arg | ast.AnnAssign) and n.annotation is not None:
            annotations.append(n.annotation)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.returns is not None:
            annotations.append(n.returns)
        for annotation in annotations:
            text = annotation.value if isinstance(annotation, ast.Constant) else None
            if isinstance(text, str) and not _type_expression(text):
                yield (
                    f"the annotation {_describe(annotation)}",
                    "code in a string that type checkers evaluate",
                    n.lineno,
                )
        chain = dotted(n.value) if isinstance(n, ast.Subscript) else None
        if chain and program.resolve(module, chain)[0].startswith("jaxtyping."):
            for part in n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]:
                text = part.value if isinstance(part, ast.Constant) else None
                if isinstance(text, str) and (not JAXTYPING_DIMENSIONS.fullmatch(text) or "__" in text):
                    yield f"the dimensions {_describe(part)}", "code in a string that jaxtyping evaluates", n.lineno


def _format_template(module: Module, call: ast.Call) -> Iterator[tuple[str, str, int]]:
    """`template.format(...)`: held when the template is built at run time, or a field reads a private or dunder
    attribute or item by name (`"{0.__globals__}"`)."""
    template = call.func.value
    if dotted(template) == ["str"] and call.args:  # str.format(template, ...)
        template = call.args[0]
    if not (isinstance(template, ast.Constant) and isinstance(template.value, str)):
        chain = dotted(template)
        if not (chain and chain[0] in module.aliases):  # a library's own `format` (`numpy.format_parser`)
            why = "a format template this scan cannot read (its fields read attributes by name)"
            yield f"{_describe(call.func)}()", why, call.lineno
    elif lookups := _format_lookups(template.value):
        why = "a private or dunder attribute read by a name in a string"
        yield f"the format field {lookups[0]!r}", why, call.lineno


def _format_lookups(template: str) -> list[str]:
    """The fields of a format template that read a private or dunder attribute or item by name (`{0.__class__}`)."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f]
    except ValueError:
        return []
    return [f for f in fields if re.search(r"[.\[]_", f)]


def _type_expression(text: str) -> bool:
    """Whether a string annotation is a plain type: names, attributes, subscripts, `|`, constants, `None`."""
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):
        return True  # not Python: nothing evaluates it as code (a type checker fails on it)
    allowed = (ast.Expression, ast.Name, ast.Attribute, ast.Subscript, ast.Tuple, ast.List, ast.Constant,
               ast.BinOp, ast.BitOr, ast.Load, ast.Index if hasattr(ast, "Index") else ast.Constant)  # fmt: skip
    return all(isinstance(n, allowed) for n in ast.walk(tree)) and not any(
        isinstance(n, ast.Name | ast.Attribute) and (getattr(n, "id", "") or getattr(n, "attr", "")).startswith("__")
        for n in ast.walk(tree)
    )


def judged_by_name(module: Module, program: Program, node: ast.expr | None) -> bool:
    """Whether `node` is a chain of a library name (`torch.sys`), which held_name judges whole."""
    chain = dotted(node) if node is not None else None
    return bool(chain) and chain[0] in module.aliases and program.resolve(module, chain)[1] is None


def depth(tree: ast.AST) -> int:
    """How many levels deep the tree goes (without recursing)."""
    deepest, todo = 0, [(tree, 1)]
    while todo:
        node, level = todo.pop()
        deepest = max(deepest, level)
        todo.extend((child, level + 1) for child in ast.iter_child_nodes(node))
    return deepest


def scan(job: dict) -> dict[str, tuple[list[Use], list[Construct]]]:
    """Each problem's forbidden names in the code its adapters reach, and the constructs that reach into the
    interpreter in all the code that runs for it (what the adapters module imports runs for every problem).
    `job`: "code" (the folder), "files" (the student's files under it), "adapters" (module name),
    "adapters_path" and "problems" (name -> [its adapter functions, forbidden patterns]): a problem may have
    several adapters (SiLU's and SwiGLU's), and the scan walks from each."""
    code = Path(job["code"])
    try:
        program = Program.parse(code, [Path(f) for f in job["files"]])
        program.allowed = Allowed(job.get("allowed", ALLOWED))
        program.packages = tuple(job.get("packages", ()))
    except (Unreadable, RecursionError, MemoryError):
        raise
    except Exception as err:  # a bug of the scan's on valid Python: every problem read by a person, not stopped
        return {name: ([], [unjudged(err)]) for name in job["problems"]}
    try:
        adapters = Module(job["adapters"], Path(job["adapters_path"]).name, Path(job["adapters_path"]).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return {}
    imported = list(adapters.aliases.values())
    found = {}
    for name, (functions, forbidden) in job["problems"].items():
        try:
            entries = [entry for function in functions for entry in entry_points(adapters, program, function)]
            uses = program.uses(program.reachable(entries), forbidden)[:USES_KEPT]
            runs = program.runs(entries, imported)
            held = [c for m, nodes in runs.items() for c in constructs(program.modules[m], program, nodes)]
        except (RecursionError, MemoryError):
            raise  # the code is too deep or too large to read: Unreadable, for every problem
        except Exception as err:  # valid Python this scan cannot describe: judged all the same, held for a reading
            uses, held = [], [unjudged(err)]
        found[name] = (uses, held[:USES_KEPT])
    return found


def unjudged(err: Exception) -> Construct:
    """The hold for code the scan failed to read (a bug of the scan's, never of the student's): a person reads it."""
    where = err.__traceback__
    while where is not None and where.tb_next is not None:
        where = where.tb_next
    line = where.tb_lineno if where is not None else 0
    what = f"code this scan could not read ({type(err).__name__} at scan.py:{line})"
    return Construct(what, "the staff read it instead", "", 0)


def bounded_scan(job: dict) -> dict:
    """scan(job) within the scan's bounds, in this process (fresh: main's Python, or a fork of the warm scan
    process, scanserver.py): its address space limited to job["memory"] before it reads a byte of the student's
    code, the recursion and the stack the visitors need, in a thread of its own. {"found": ...} or
    {"unreadable": why}; a bug raises."""
    resource = unix_module("resource")  # Windows has none: portable.scan_notes says the scan runs without it
    if resource is not None:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (job["memory"], job["memory"]))
        except (ValueError, OSError):  # macOS may refuse RLIMIT_AS; on Linux, the staff must hear of it
            if is_linux():
                raise
    killed_first()
    sys.setrecursionlimit(RECURSION_LIMIT)
    threading.stack_size(STACK_BYTES)
    result: dict = {}

    def work() -> None:
        try:
            result["found"] = scan(job)
        except Unreadable as err:
            result["unreadable"] = str(err)
        except RecursionError:
            result["unreadable"] = "it is nested too deeply to read"
        except MemoryError:
            result["unreadable"] = "it needs more memory to read than the grader gives"
        except BaseException as err:  # a bug, not a verdict: raised again in the caller's thread
            result["error"] = err

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result


def main() -> None:
    """The scan in a fresh Python of its own (scanprocess.start_scan starts it): the job as JSON on stdin, the
    result pickled on stdout, {"found": ...} or {"unreadable": why}."""
    sys.stdout.buffer.write(pickle.dumps(bounded_scan(json.load(sys.stdin))))
