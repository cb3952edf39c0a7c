"""The constructs that reach into the interpreter, held for the staff's review (docs/grading.md, "From scratch"):
modules the course does not allow, the grader's objects in the code's own process, names built at run time that
no scan can read (`constructs`, `imports`). Strings run as code or as names: strings.py.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cs_basics.harness.rule.allowed import STDLIB, Allowed
from cs_basics.harness.rule.methods import OwnObjects, _zero_argument_super
from cs_basics.harness.rule.program import Module, Program
from cs_basics.harness.rule.strings import _describe, judged_by_name, strings_run
from cs_basics.harness.rule.syntax import dotted, matches, references
from cs_basics.harness.rule.tooling import is_tooling_name

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
    if is_tooling_name(full):
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
            why = None if theirs or not_installed(full, program) else held_name(full, program.allowed)
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
                passes = program.owns(alias.name) or not_installed(alias.name, program)
                why = None if passes else _import_held(alias.name, program.allowed)
                if why:
                    yield f"import {alias.name}", why, n.lineno
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                package = module.name.split(".") if module.path.endswith("__init__.py") else module.name.split(".")[:-1]
                base = ".".join([*package[: len(package) - n.level + 1], *([base] if base else [])])
            for alias in n.names:
                full = base if alias.name == "*" else f"{base}.{alias.name}"
                if program.owns(full) or program.owns(base) or not_installed(base, program):
                    continue
                if alias.name == "*":
                    yield (
                        f"from {base} import *",
                        "a star import of a library (the names it binds cannot be read)",
                        n.lineno,
                    )
                    continue
                why = held_name(full, program.allowed) if program.allowed.why_held(full) else None
                if why is None and is_tooling_name(full):
                    why = "the grader's own code"
                if why:
                    yield f"from {base} import {alias.name}", why, n.lineno


def not_installed(name: str, program: Program) -> bool:
    """Whether `name`'s top-level module is nowhere: not installed where the grader runs (it scans in the job's
    environment), not the standard library's, not a module of the student's under a bare name (`import helpers`
    after a `sys.path` set-up, whose code the scan reads as the student's). Its import fails as Python's does,
    `ModuleNotFoundError` in the student's pytest run and in the grader alike: that is the student's bug to be told,
    not a hold for the staff (a typo, a library the course does not install), and no code of it runs."""
    top = name.split(".")[0]
    if not top or is_tooling_name(name) or top in STDLIB or top in sys.modules:
        return False
    if any(m == top or m.endswith("." + top) or f".{top}." in f".{m}." for m in program.modules):
        return False
    try:
        return importlib.util.find_spec(top) is None  # a top-level name: no import runs
    except (ImportError, ValueError):
        return False


def _import_held(name: str, allowed: Allowed) -> str | None:
    if is_tooling_name(name):
        return "the grader's own code"
    return None if allowed.allows_import(name) else held_name(name, allowed)
