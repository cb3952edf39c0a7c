"""The student's program as the scan sees it: its modules (`Module`: parsed, never imported, aliases resolved)
and the name-based call graph from each problem's adapters (`Program`: what a problem's function reaches, the
forbidden names it uses, the code that runs for it; `entry_points`). Imports are followed so that aliases
resolve to full names (`import torch.nn.functional as F` makes `F.softmax` read `torch.nn.functional.softmax`).
"""

from __future__ import annotations

import ast
import fnmatch
from collections import Counter
from collections.abc import Iterable, Iterator
from functools import cached_property
from pathlib import Path

from cs_basics.harness.rule.allowed import Allowed
from cs_basics.harness.rule.methods import OwnObjects, _class_names, candidate_methods, method_uses
from cs_basics.harness.rule.syntax import (
    DEPTH_LIMIT,
    TYPE_CHECKING,
    TYPING_FLAGS,
    Unreadable,
    Use,
    _assigns_type_checking,
    _constant_false,
    _is_main_guard,
    _targets,
    depth,
    dotted,
    matches,
    prune_dead_code,
    references,
)
from cs_basics.harness.rule.tooling import is_tooling_name


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
            and not is_tooling_name(name)
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
