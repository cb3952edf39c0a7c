"""One-line adapters: the check that each adapter of a problem only calls the student's function.

A course whose adapters are each one line (`one_line_adapters = true` in [tool.cs-basics]) grades with its own
tests/adapters.py, whose `run_<problem>` calls the student's function: code a student places in an adapter is
lost there. The students' pytest run asks `thick_adapters` about every adapter a problem's cases call (a
problem may have several: SiLU and SwiGLU), so that a solution written in any of them fails there as it fails
in grading; the grader may ask the same question of a submission's adapters to say why its cases failed.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def thick_adapters(adapters: Any, names: Iterable[str], package: str = "cs_basics") -> str | None:
    """The verdict on the first of the adapters `names` (in the module or namespace `adapters`) that holds more
    than the one line calling the student's function (in `package`, the student's code the message names); None
    when each is one line (or cannot be read)."""
    return next((lost for lost in (thick_adapter(adapters, name, package) for name in names) if lost), None)


def thick_adapter(adapters: Any, name: str, package: str = "cs_basics") -> str | None:
    """The verdict on one adapter: None if it is a docstring, imports, and one line that calls or names the
    student's code: `return f(...)` (keywords too), `f(...)` (a function that changes its inputs and returns
    nothing), `return AdamW` (an adapter that returns a class, CS336's `get_adamw_cls`)."""
    adapter = getattr(adapters, name, None)
    statements = adapter_statements(adapter) if callable(adapter) else None
    if statements is None:
        return None
    body = statements[1:] if statements and is_docstring(statements[0]) else statements
    body = [s for s in body if not isinstance(s, ast.Import | ast.ImportFrom)]  # an import computes nothing
    if len(body) == 1 and one_line(body[0]):
        return None
    where = f"{Path(inspect.getsourcefile(adapter) or '?').name}: {name}"
    return (
        f"{where} holds more than the one line that calls your function ({len(body)} statements): the grader "
        f"runs the course's own tests/adapters.py, which calls {package}, so code placed here is lost in grading "
        f"and this case would fail there. Move it into {package} and restore the adapter "
        "(git checkout -- tests/adapters.py)"
    )


@functools.cache
def adapter_statements(adapter: Callable) -> list[ast.stmt] | None:
    try:
        tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(adapter)))
    except (OSError, TypeError, SyntaxError):
        return None
    function = tree.body[0] if tree.body else None
    return function.body if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) else None


def one_line(statement: ast.stmt) -> bool:
    """`return f(...)`, `return module.Name` or `f(...)`: the one line that calls or names the student's code."""
    if isinstance(statement, ast.Return):
        value = statement.value
        return isinstance(value, ast.Call) or named(value)
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)


def named(node: ast.expr | None) -> bool:
    """A plain name or a chain of attributes (`AdamW`, `optimizer.AdamW`)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
