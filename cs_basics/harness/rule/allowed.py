"""What graded code may import and name: a list of what is allowed, not of what is held.

Every library name the student's code uses (an `import`, `from ... import`, a chain read through an imported
module, `getattr(module, "constant")`) must be allowed here or by the course; anything else holds the problem
for the staff's review, naming it and its line (scan.py). A list of what is held trails the ways in: each
battery of attacks found the next name it lacked (a C twin such as `_operator.attrgetter`, a resolver that
takes a dotted string such as `pkgutil.resolve_name`, `unittest.mock.patch`), while the modules an honest
attention needs are few.

An entry names a module, a module pattern (`torch.optim.*`, fnmatch) or a single name (`os.environ`); an entry
that starts with `!` takes names back out (`!operator.attrgetter`). A name is allowed when an entry covers its
longest module and every attribute read after that is public (no `_x`), and no attribute is itself a module
the list does not allow: `torch.library` is a module of its own (a file in torch's folder), `torch.os` is
the `os` module (torch's `__init__.py` imports it). Those are found without importing anything: the file
system, and the `import` lines of the module's own source. The student's own modules are always allowed.

A course extends the list with `allowed = [...]` in `[tool.cs-basics]` (docs/grading.md); this default is
versioned with the harness.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib.util
import re
import sys
from collections.abc import Iterable
from pathlib import Path

# the field's default: torch's computational API, the array and einsum libraries, type annotations, and
# the standard library's arithmetic and plumbing; names of the modules that are held otherwise
ALLOWED = (
    # torch's computational API (its other submodules are not: torch.library, torch.utils.cpp_extension, ...)
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.nn.parameter", "torch.nn.modules",
    "torch.nn.modules.*", "torch.nn.common_types", "torch.linalg", "torch.special", "torch.fft", "torch.types",
    "torch.random", "torch.autograd", "torch.autograd.function", "torch.autograd.grad_mode", "torch.amp",
    "torch.amp.*", "torch.utils.checkpoint", "torch.optim", "torch.optim.*", "torch.cuda", "torch.cuda.*",
    "torch.backends", "torch.backends.*", "torch.mps", "torch.cpu", "torch.return_types", "torch.distributions",
    "torch.distributions.*", "torch.func", "torch.nn.utils", "torch.nn.utils.*", "torch.autograd.graph",
    "numpy", "numpy.linalg", "numpy.random", "numpy.fft", "numpy.typing", "numpy.lib.stride_tricks",
    "numpy.exceptions", "numpy.dtypes",
    "!torch.compile", "!torch.ops",  # code compiled to kernels of its own; every operator by name
    "einops", "einops.*", "einx", "einx.*", "jaxtyping", "jaxtyping.*", "beartype", "beartype.*",
    "__future__", "typing", "typing_extensions", "!typing.get_type_hints", "!typing.ForwardRef",
    "!typing_extensions.get_type_hints", "!typing_extensions.ForwardRef",
    "math", "cmath", "numbers", "abc", "enum", "dataclasses", "functools", "itertools", "collections",
    "collections.abc", "operator", "!operator.attrgetter", "!operator.methodcaller", "copy", "contextlib",
    "warnings", "logging", "time", "random", "statistics", "fractions", "decimal",
    # threads, not processes: the record follows them and the dispatcher's override holds in them
    "threading", "!threading.settrace*", "!threading.setprofile*",
    # single names of modules that are otherwise held
    "os.environ", "os.getenv", "os.path", "os.cpu_count", "os.sep",
    "sys.float_info", "sys.maxsize", "sys.stdout", "sys.stderr", "sys.version_info", "sys.platform",
    "sys.byteorder", "sys.path", "sys.argv", "sys.exit", "sys.getsizeof", "sys.setrecursionlimit",
    "types.SimpleNamespace",
    "concurrent.futures.ThreadPoolExecutor", "concurrent.futures.as_completed", "concurrent.futures.wait",
    "concurrent.futures.Future", "multiprocessing.dummy", "multiprocessing.pool.ThreadPool",
    "multiprocessing.cpu_count",
)  # fmt: skip

STDLIB = frozenset(sys.stdlib_module_names)
IMPORT_LINE = re.compile(r"^(?:import\s+([\w.]+)(?:\s+as\s+(\w+))?|from\s+(\.*[\w.]*)\s+import\s+(.+))", re.M)
IMPORTED = re.compile(r"(\w+)(?:\s+as\s+(\w+))?")


class Allowed:
    """The course's list (`ALLOWED` and its own entries), asked of full dotted names."""

    def __init__(self, entries: Iterable[str] = ALLOWED):
        entries = tuple(entries)
        self.denied = tuple(e[1:] for e in entries if e.startswith("!"))
        self.allowed = tuple(e for e in entries if not e.startswith("!"))

    def allows_import(self, name: str) -> bool:
        """Whether `import name` is allowed: the module is, or single names under it are (`import os` for
        `os.environ`: each name read through it is then judged on its own)."""
        return self.why_held(name) is None or any(a.startswith(name + ".") for a in self.allowed)

    @functools.cache  # noqa: B019 (one list per scan)
    def why_held(self, full: str, depth: int = 0) -> str | None:
        """None when `full` is allowed; else why not (a module the course does not allow, a private name, a
        module reached as an attribute)."""
        if self._denied(full):
            return "a name the course does not allow"
        parts = full.split(".")
        if any(part.startswith("_") and not part.startswith("__") for part in parts[1:]):
            return "a library's private name"
        end, module = self._entry(parts)
        if end == 0:
            return f"module {_top_module(parts)}, which the course does not allow"
        single = module is None  # an entry that allows one name (`os.path`), not a module
        for index in range(end, len(parts)):
            name = parts[index]
            reached = submodule(module, name) if module is not None else None
            here = ".".join(parts[: index + 1])
            if reached == here:  # a module of its own that no entry allows (else `_entry` had reached it)
                return f"module {here}, which the course does not allow"
            if reached is not None:  # another module, bound to a name in this one's source (`torch.os`)
                if depth > 8:
                    return f"{here}, a module the course does not allow"
                why = self.why_held(".".join([reached, *parts[index + 1 :]]), depth + 1)
                return why and f"{here} (module {reached}): {why}"
            if single and name in STDLIB:  # `os.path.os`: no module is read through a single name
                return f"module {name}, reached as an attribute of {'.'.join(parts[:index])}"
            module = None  # past the module: an object's attributes (`torch.Tensor.add`)
        return None

    def _denied(self, full: str) -> bool:
        return any(fnmatch.fnmatchcase(full, d) or full.startswith(d + ".") for d in self.denied)

    def _entry(self, parts: list[str]) -> tuple[int, str | None]:
        """How many leading parts an entry allows, and the module they name (None: a single name); (0, None)."""
        for end in range(len(parts), 0, -1):
            prefix = ".".join(parts[:end])
            if any(prefix == a or fnmatch.fnmatchcase(prefix, a) for a in self.allowed):
                return end, prefix if is_module(prefix) else None
        return 0, None


def _top_module(parts: list[str]) -> str:
    """The longest module among the leading parts (for the message), else the first part."""
    for end in range(len(parts), 0, -1):
        if is_module(".".join(parts[:end])):
            return ".".join(parts[:end])
    return parts[0]


@functools.cache
def package_file(name: str) -> Path | None:
    """The file a module's source is in (a package's `__init__.py`), found on the file system without importing
    anything; None when it is not a module or has no source (a C extension, a name set at run time)."""
    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: no import runs
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin)
    for part in rest:
        folder = path.parent if path.name == "__init__.py" else None
        if folder is None:
            return None
        if (folder / part / "__init__.py").is_file():
            path = folder / part / "__init__.py"
        elif (folder / f"{part}.py").is_file():
            path = folder / f"{part}.py"
        elif part == rest[-1] and (any(folder.glob(f"{part}.*.so")) or any(folder.glob(f"{part}.*.pyd"))):
            return folder / part  # a C extension: a module, with no source to read
        else:
            return None
    return path


def is_module(name: str) -> bool:
    return package_file(name) is not None or name in STDLIB


@functools.cache
def submodule(module: str, name: str) -> str | None:
    """The module `module.name` is, when that attribute is a module: a submodule on the file system, or a module
    the source of `module` imports at its top level under that name (`import os` in torch's `__init__.py`)."""
    if is_module(f"{module}.{name}"):
        return f"{module}.{name}"
    return module_imports(module).get(name)


@functools.cache
def module_imports(module: str) -> dict[str, str]:
    """The names a module's source binds to modules at its top level: `import os` (os), `import a.b as c` (a.b),
    `from . import linalg` (the package's linalg), `from os import path` (os.path, a module of its own)."""
    path = package_file(module)
    if path is None or path.suffix != ".py":
        return {}
    try:
        source = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    bound: dict[str, str] = {}
    for found in IMPORT_LINE.finditer(source):
        plain, alias, origin, names = found.groups()
        if plain:
            bound[alias or plain.split(".")[0]] = plain if alias else plain.split(".")[0]
            continue
        dots = len(origin) - len(origin.lstrip("."))
        base = origin.lstrip(".")
        if dots:
            anchor = package.split(".")[: len(package.split(".")) - dots + 1]
            base = ".".join([*anchor, *([base] if base else [])])
        for imported in IMPORTED.finditer(names.strip("()\\ ")):
            name, alias = imported.groups()
            if is_module(f"{base}.{name}"):
                bound[alias or name] = f"{base}.{name}"
    return bound
