"""Which objects and methods are the student's own (the scan's model of `self.method(...)`): the methods a
program defines that no library name can rebind (`candidate_methods`), where they are used (`method_uses`), and
the objects whose attributes are the program's (`OwnObjects`). Program (program.py) reads them.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from cs_basics.harness.rule.syntax import dotted

if TYPE_CHECKING:
    from cs_basics.harness.rule.program import Module, Program


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
