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
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cs_basics.harness.cgroup import killed_first
from cs_basics.harness.portable import is_linux, unix_module

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

# Code a problem runs may not reach the grader's objects in its own process, nor build names this scan
# cannot read: a use of one of these holds the problem for the staff's review (see README, "From scratch").
# Modules whose every name is held (a few harmless names of sys excepted), wherever they are reached:
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
HARMLESS = {
    "sys.float_info", "sys.maxsize", "sys.stdout", "sys.stderr", "sys.version_info", "sys.platform",
    "sys.byteorder", "sys.path", "sys.argv", "sys.exit", "sys.getsizeof", "sys.setrecursionlimit",
    "types.SimpleNamespace", "os._exit",
    # threads, not processes: the record follows them and the dispatcher's override holds in them
    "multiprocessing.dummy", "multiprocessing.pool.ThreadPool", "multiprocessing.cpu_count",
}  # fmt: skip
# a fresh interpreter, without the forbidden operators' replacement (a forked process inherits it)
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
}  # fmt: skip
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
DYNAMIC_ATTRIBUTE = {"getattr", "setattr", "delattr"}
TOOLING_NAMES = ("cs_basics.harness", "cs_basics.study", "cs_basics.cli", "tests", "hidden")  # the grader's code


@dataclass(frozen=True)
class Construct:
    what: str  # e.g. "sys.modules", "getattr with a name built at run time"
    why: str  # what it reaches
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.what} ({self.why}) at {self.path}:{self.line}"


def _held_name(full: str) -> str | None:
    """Why a resolved library name is held, else None."""
    parts = full.split(".")
    if any(full == h or full.startswith(h + ".") for h in HARMLESS):  # sys.path.append too
        return None
    if parts[0] in HELD_MODULES:
        return HELD_MODULES[parts[0]]
    pattern = matches(full, HELD_PATTERNS)
    if pattern:
        return HELD_PATTERNS[pattern]
    if any(full == t or full.startswith(t + ".") for t in TOOLING_NAMES):
        return "the grader's own code"
    for part in parts[1:]:
        if part in HELD_MODULES and part not in ("types", "operator", "code"):
            return f"a module reached as an attribute of another ({HELD_MODULES[part]})"
        if part.startswith("_") and not part.startswith("__"):
            return "a library's private name"
    return None


class OwnObjects:
    """Which expressions in the student's code plainly name the student's own objects: the first parameter of a
    method (`self`, `cls`) and `super()`, a parameter annotated with one of the student's classes, a local name
    bound only to new instances of one, the student's classes themselves, and `type(x)` of any of these.
    Attributes of these by names built at run time (getattr, setattr, delattr, vars, `__dict__`) are ordinary
    Python; on anything else (a module, a library's object, the grader's) they are held."""

    _SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    _COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)

    def __init__(self, module: Module, program: Program):
        self.module, self.program = module, program
        self.names: set[int] = set()  # ids of the ast.Name nodes that are the student's own objects

    def collect(self, node: ast.AST) -> OwnObjects:
        self._visit(node, [], method=False)
        return self

    def __contains__(self, node: ast.AST | None) -> bool:
        if isinstance(node, ast.Name):
            return id(node) in self.names
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in self.module.defs:
            if node.func.id == "super" and not node.args:
                return True
            return node.func.id == "type" and len(node.args) == 1 and node.args[0] in self
        return False

    def student_class(self, node: ast.expr) -> bool:
        chain = dotted(node)
        target = self.program.resolve(self.module, chain)[1] if chain else None
        if target is None:
            return False
        defs = self.program.modules[target[0]].defs.get(target[1], [])
        return bool(defs) and all(isinstance(d, ast.ClassDef) for d in defs)

    def _visit(self, n: ast.AST, scopes: list[dict[str, bool]], method: bool) -> None:
        if isinstance(n, self._SCOPES):
            outer = [*getattr(n, "decorator_list", []), *n.args.defaults, *[d for d in n.args.kw_defaults if d]]
            for child in outer:
                self._visit(child, scopes, method=False)
            inner = [*scopes, self._bindings(n, scopes, method)]
            for child in n.body if isinstance(n.body, list) else [n.body]:
                self._visit(child, inner, method=False)
        elif isinstance(n, ast.ClassDef):
            for child in [*n.decorator_list, *n.bases, *n.keywords]:
                self._visit(child, scopes, method=False)
            body = {t.id: False for stmt in n.body for t in ast.walk(stmt) if isinstance(t, ast.Name)}
            for stmt in n.body:  # methods do not see the class body's names
                is_def = isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef)
                self._visit(stmt, scopes if is_def else [*scopes, body], method=is_def)
        elif isinstance(n, self._COMPREHENSIONS):
            bound = {t.id: False for g in n.generators for t in ast.walk(g.target) if isinstance(t, ast.Name)}
            for child in ast.iter_child_nodes(n):
                self._visit(child, [*scopes, bound], method=False)
        elif isinstance(n, ast.Name):
            if isinstance(n.ctx, ast.Load):
                binding = next((table[n.id] for table in reversed(scopes) if n.id in table), None)
                if binding or (binding is None and self.student_class(n)):
                    self.names.add(id(n))
        else:
            for child in ast.iter_child_nodes(n):
                self._visit(child, scopes, method=False)

    def _bindings(self, function: ast.AST, scopes: list[dict[str, bool]], method: bool) -> dict[str, bool]:
        """The names a function binds, each True where it plainly holds the student's own object."""
        args = function.args
        positional = [*args.posonlyargs, *args.args]
        params = [*positional, *args.kwonlyargs, *[a for a in (args.vararg, args.kwarg) if a]]
        stores: Counter[str] = Counter()  # how many times the function binds each name
        instances: dict[str, bool] = {}  # local name -> bound only to new instances of the student's classes
        for node in _own_scope(function):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                stores[node.id] += 1
                instances.setdefault(node.id, False)
            elif isinstance(node, ast.Global | ast.Nonlocal):
                stores.update({name: 2 for name in node.names})
                instances.update(dict.fromkeys(node.names, False))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.ExceptHandler):
                instances.update(dict.fromkeys([node.name] if node.name else [], False))
            elif isinstance(node, ast.Import | ast.ImportFrom):
                instances.update(dict.fromkeys([(a.asname or a.name).split(".")[0] for a in node.names], False))
        for node in _own_scope(function):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = _targets(node)
                new = isinstance(node.value, ast.Call) and self.student_class(node.value.func)
                for name in [t.id for t in targets if isinstance(t, ast.Name)]:
                    instances[name] = bool(new and len(targets) == 1 and stores[name] == 1)
        table = {p.arg: False for p in params} | instances
        static = any(dotted(d) == ["staticmethod"] for d in getattr(function, "decorator_list", []))
        if method and positional and not static and positional[0].arg not in instances:
            table[positional[0].arg] = True
        for p in params:
            if p.annotation is not None and p.arg not in instances and self.student_class(p.annotation):
                table[p.arg] = True
        return table


def _own_scope(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of the functions, classes and comprehensions inside it."""
    todo = list(function.body) if isinstance(function.body, list) else [function.body]
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (*OwnObjects._SCOPES, *OwnObjects._COMPREHENSIONS, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def _describe(node: ast.AST | None) -> str:
    text = ast.unparse(node) if node is not None else "?"
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
            and dotted(n.func.value) in (["object"], ["type"]) and n.args and n.args[0] in own
        }  # fmt: skip
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id not in module.defs:
                name, target = n.func.id, n.args[0] if n.args else None
                if name in HELD_CALLS and not (name == "vars" and len(n.args) == 1 and target in own):
                    held(f"{name}()", HELD_CALLS[name], n.lineno)
                elif name in DYNAMIC_ATTRIBUTE and len(n.args) >= 2:
                    attribute = n.args[1]
                    if not (isinstance(attribute, ast.Constant) and isinstance(attribute.value, str)):
                        if target not in own:
                            what = f"{name} with a name built at run time on {_describe(target)}"
                            why = "an object not plainly the student's own, by a name this scan cannot read"
                            held(what, why, n.lineno)
                    elif attribute.value in HELD_DUNDERS and not (attribute.value in OWN_DUNDERS and target in own):
                        held(f".{attribute.value} (by {name})", "other code's objects", n.lineno)
            if isinstance(n, ast.Attribute) and n.attr in HELD_DUNDERS and id(n) not in naming | on_own:
                if n.attr in OWN_DUNDERS and n.value in own:
                    continue
                if n.attr in READ_ONLY and isinstance(n.ctx, ast.Load):
                    continue
                held(f".{n.attr}", "other code's objects", n.lineno)
            elif isinstance(n, ast.Name) and n.id in HELD_DUNDERS:
                held(n.id, "other code's objects", n.lineno)
        for chain, line in references(node):
            full, target = program.resolve(module, chain)
            why = None if target is not None or chain[0] not in module.aliases else _held_name(full)
            if why:
                held(full, why, line)
    unique = {(c.path, c.line, c.what): c for c in found}
    return sorted(unique.values(), key=lambda c: (c.path, c.line, c.what))


def depth(tree: ast.AST) -> int:
    """How many levels deep the tree goes (without recursing)."""
    deepest, todo = 0, [(tree, 1)]
    while todo:
        node, level = todo.pop()
        deepest = max(deepest, level)
        todo.extend((child, level + 1) for child in ast.iter_child_nodes(node))
    return deepest


def scan(job: dict) -> dict[str, tuple[list[Use], list[Construct]]]:
    """Each problem's forbidden names in the code its adapter reaches, and the constructs that reach into the
    interpreter in all the code that runs for it (what the adapters module imports runs for every problem).
    `job`: "code" (the folder), "files" (the student's files under it), "adapters" (module name),
    "adapters_path" and "problems" (name -> [adapter function, forbidden patterns])."""
    code = Path(job["code"])
    program = Program.parse(code, [Path(f) for f in job["files"]])
    try:
        adapters = Module(job["adapters"], Path(job["adapters_path"]).name, Path(job["adapters_path"]).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return {}
    imported = list(adapters.aliases.values())
    found = {}
    for name, (adapter, forbidden) in job["problems"].items():
        entries = entry_points(adapters, program, adapter)
        uses = program.uses(program.reachable(entries), forbidden)[:USES_KEPT]
        runs = program.runs(entries, imported)
        held = [c for m, nodes in runs.items() for c in constructs(program.modules[m], program, nodes)]
        found[name] = (uses, held[:USES_KEPT])
    return found


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
