"""Strings that run as code or as names (`strings_run`): format templates that look attributes up
(`"{0.__globals__}".format(f)`), type expressions in strings (jaxtyping's dimensions are not code), and the
names a held construct reads whole (`judged_by_name`); how a node is described in a hold (`_describe`).
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Iterator
from typing import TYPE_CHECKING

from cs_basics.harness.rule.syntax import dotted

if TYPE_CHECKING:
    from cs_basics.harness.rule.program import Module, Program


def _describe(node: ast.AST | None) -> str:
    """The expression as source, cut to 40 characters; ast.unparse cannot write every valid expression back
    (an f-string holding a control character in its expression part), and then its kind stands in for it."""
    try:
        text = ast.unparse(node) if node is not None else "?"
    except (ValueError, TypeError, AttributeError, RecursionError):
        text = f"an expression ({type(node).__name__})"
    return text if len(text) <= 40 else text[:37] + "..."


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
