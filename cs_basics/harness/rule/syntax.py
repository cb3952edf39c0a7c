"""The scan's reading of Python source: names as dotted chains (`dotted`), patterns (`matches`), the names a
node references (`references`), the code that cannot run removed before anything is read (`prune_dead_code`:
after an unconditional `return`, under `if False:` or `if TYPE_CHECKING:`, ...), and the scan's bounds.
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

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


def depth(tree: ast.AST) -> int:
    """How many levels deep the tree goes (without recursing)."""
    deepest, todo = 0, [(tree, 1)]
    while todo:
        node, level = todo.pop()
        deepest = max(deepest, level)
        todo.extend((child, level + 1) for child in ast.iter_child_nodes(node))
    return deepest
