"""The from-scratch rule: find uses of forbidden library calls by reading the student's code.

The code is parsed, never imported. Imports are followed so that aliases resolve to full
names (`import torch.nn.functional as F` makes `F.softmax` read `torch.nn.functional.softmax`;
`from torch import softmax as s` makes `s` read `torch.softmax`). A method called on something
that is not an imported module (`scores.softmax(-1)`) reads `Tensor.<method>`. Patterns are
matched with fnmatch, so `torch.ops.*` forbids every operator reached through `torch.ops`.
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


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


class _Resolver(ast.NodeVisitor):
    def __init__(self, module: str) -> None:
        self.module = module  # the dotted name of the file's own package, for relative imports
        self.aliases: dict[str, str] = {}
        self.uses: list[tuple[str, int]] = []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                self.aliases[top] = top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            package = self.module.split(".")[: -node.level] if node.level else []
            base = ".".join([*package, *([base] if base else [])])
        for alias in node.names:
            self.aliases[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name

    def visit_Call(self, node: ast.Call) -> None:
        """getattr(F, "softmax") reads as F.softmax when the name is a constant."""
        is_getattr = isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2
        if is_getattr and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            target = ast.Attribute(value=node.args[0], attr=node.args[1].value, ctx=ast.Load())
            self._use(ast.copy_location(target, node))
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._use(node)

    def visit_Name(self, node: ast.Name) -> None:
        self._use(node)

    def _use(self, node: ast.Attribute | ast.Name) -> None:
        chain = dotted(node)
        if chain is None:  # a method of a computed value: x.softmax(-1), (a @ b).softmax(-1)
            if isinstance(node, ast.Attribute):
                self.uses.append((f"Tensor.{node.attr}", node.lineno))
            self.generic_visit(node)
            return
        if chain[0] in self.aliases:
            self.uses.append((".".join([self.aliases[chain[0]], *chain[1:]]), node.lineno))
        elif len(chain) > 1:  # a method of a local variable
            self.uses.append((f"Tensor.{chain[-1]}", node.lineno))


def uses_in(source: str, module: str) -> list[tuple[str, int]]:
    tree = ast.parse(source)
    resolver = _Resolver(module)
    for node in ast.walk(tree):  # imports first, wherever they are, so aliases are known
        if isinstance(node, ast.Import | ast.ImportFrom):
            resolver.visit(node)
    resolver.visit(tree)
    return resolver.uses


def matches(name: str, patterns: Iterable[str]) -> str | None:
    """The first pattern that `name` or one of its prefixes matches (`torch.nn.Softmax(...)` and
    `torch.nn.Softmax.forward` both use `torch.nn.Softmax`)."""
    parts = name.split(".")
    for pattern in patterns:
        for end in range(len(parts), 0, -1):
            if fnmatch.fnmatchcase(".".join(parts[:end]), pattern):
                return pattern
    return None


def forbidden_uses(root: Path, files: Iterable[Path], patterns: Iterable[str]) -> list[Use]:
    """Every use of a forbidden name in `files` (paths under `root`), in file and line order.

    A file that does not parse has no uses here: importing it fails, and grading says so.
    """
    patterns = list(patterns)
    found = []
    for path in sorted(files):
        relative = path.relative_to(root)
        module = ".".join(relative.with_suffix("").parts)
        try:
            uses = uses_in(path.read_text(errors="replace"), module)
        except SyntaxError:
            continue
        for name, line in uses:
            if matches(name, patterns):
                found.append(Use(name, relative.as_posix(), line))
    return sorted(set(found), key=lambda u: (u.path, u.line, u.name))
