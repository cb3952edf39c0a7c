"""Which library function ran an operator for graded code, when that function is no glue.

The record (record.py) sees every operator a graded call runs, with the Python frame that ran it. Most
are run by the student's own lines, or by the harness (preparing the arguments, the backward pass). The
rest are run by library code the student's code called: the frames between the student's line and the
operator are then library functions, and each must be glue (glue.py), else the library computed part of
the answer on the student's behalf and the problem is held for the staff's review.

Frames are sorted by their file, once per code object:
- the student's files, and the harness's (this package's `cs_basics`, the course's tests and adapters),
  end the walk: below a harness frame the library works for the harness (its backward pass);
- installed packages (site-packages, dist-packages) and any other file on sys.path are library code,
  named `module.qualified_name`, the module read from the file's place under its folder of sys.path;
- the standard library and the rule's own files (the thread hook, the sentinel) are passed through: they
  hold no arithmetic of their own;
- code generated at run time (`<string>`: einx's compiled calls, torch.fx's, exec) belongs to the library
  that called it; called straight from the student's code it is itself held ("code generated at run time").
  Generated code that runs in a file's namespace (a dataclass's __init__ and __eq__) counts as that file.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path
from types import CodeType, FrameType
from typing import Protocol

from cs_basics.harness.rule.glue import GLUE, WRAPPERS
from cs_basics.harness.rule.tooling import HARNESS_PACKAGE

STUDENT, HARNESS, LIBRARY, WRAPPER, GENERATED, PASS = range(6)  # WRAPPER: library code named by what it runs
PACKAGE_DIRS = ("site-packages", "dist-packages")
RULE_DIR = Path(__file__).resolve().parent
STDLIB_DIRS = tuple({Path(os.__file__).resolve().parent, Path(sysconfig.get_paths()["stdlib"]).resolve()})
GENERATED_NAME = "code generated at run time"


class Frames(Protocol):
    root: Path

    def label(self, filename: str) -> str | None: ...


class LibraryCalls:
    """Find, for the frame that ran an operator, the library function between it and the student's code
    that is no glue (the innermost such), else None."""

    def __init__(self, frames: Frames, glue: Iterable[str] = GLUE, harness: Iterable[Path] = ()):
        """`harness`: more folders of the grader's own code (the grading server's, loaded by path)."""
        patterns = tuple(glue)
        self.frames = frames
        self.denied = tuple(p[1:] for p in patterns if p.startswith("!"))
        self.allowed = tuple(p for p in patterns if not p.startswith("!"))
        self.roots = (Path(frames.root).resolve(), HARNESS_PACKAGE.parent, *[Path(h).resolve() for h in harness])
        self.paths = sorted({Path(p).resolve() for p in sys.path if p}, key=lambda p: len(p.parts), reverse=True)
        # by id (a code object's hash reads all of it): each entry keeps its code object, so no id is reused
        self._codes: dict[int, tuple[CodeType, int, str, bool]] = {}
        self._ours: dict[int, CodeType] = {}  # the student's and the harness's code objects
        self._files: dict[str, tuple[int, str]] = {}
        self._glue: dict[str, bool] = {}

    def computed_by(self, frame: FrameType | None) -> tuple[str, FrameType | None] | None:
        """Of the library functions between `frame` (which ran an operator) and the student's code, the
        outermost that is no glue (what the student's code called, or the nearest to it; a decorator's inner
        function names the function it decorates), with the student's frame that called it; else None."""
        if frame is None:
            return None
        code = frame.f_code
        if self._ours.get(id(code)) is code:  # most operators: run by the student's line
            return None
        codes, culprit, generated = self._codes, None, None
        while frame is not None:
            code = frame.f_code
            entry = codes.get(id(code))
            if entry is None or entry[0] is not code:
                entry = self._entry(frame)
            kind = entry[1]
            if kind == STUDENT:
                break
            if kind == HARNESS:
                return None
            if kind in (LIBRARY, WRAPPER):
                generated = None  # the generated code inside it was this library's
                name = entry[2] if kind == LIBRARY else wrapped_name(frame, *WRAPPERS[entry[2]])
                glue = entry[3] if kind == LIBRARY else self.is_glue(name)
                if not glue and (culprit is None or "<locals>" not in name):
                    culprit = name
            elif kind == GENERATED:
                generated = entry[2]
            frame = frame.f_back
        function = generated or culprit
        return None if function is None else (function, frame)

    def is_glue(self, name: str) -> bool:
        known = self._glue.get(name)
        if known is None:
            denied = any(fnmatch.fnmatchcase(name, p) for p in self.denied)
            known = self._glue[name] = not denied and any(fnmatch.fnmatchcase(name, p) for p in self.allowed)
        return known

    def _entry(self, frame: FrameType) -> tuple[CodeType, int, str, bool]:
        """(the code, its kind, its name, whether it is glue), cached by the code's id but for generated code."""
        code = frame.f_code
        filename = code.co_filename
        if filename.startswith("<") and not filename.startswith("<frozen"):
            # generated: the namespace it runs in names its file, when it has one (dataclasses' methods)
            owner = frame.f_globals.get("__file__")
            if isinstance(owner, str) and owner:
                kind, module = self.file_kind(owner)
                name = f"{module}.{code.co_qualname}"
                return code, kind, name, kind == LIBRARY and self.is_glue(name)
            return code, GENERATED, f"{GENERATED_NAME} ({filename})", False
        kind, module = self.file_kind(filename)
        name = f"{module}.{code.co_qualname}"
        kind = WRAPPER if kind == LIBRARY and name in WRAPPERS else kind
        entry = self._codes[id(code)] = (code, kind, name, kind == LIBRARY and self.is_glue(name))
        if kind in (STUDENT, HARNESS):
            self._ours[id(code)] = code
        return entry

    def file_kind(self, filename: str) -> tuple[int, str]:
        known = self._files.get(filename)
        if known is None:
            known = self._files[filename] = self._file_kind(filename)
        return known

    def _file_kind(self, filename: str) -> tuple[int, str]:
        if filename.startswith("<"):
            return PASS, filename  # frozen modules of the standard library
        if self.frames.label(filename) is not None:
            return STUDENT, ""
        path = Path(filename).resolve()
        if path.is_relative_to(RULE_DIR):
            return PASS, ""
        if path.is_relative_to(HARNESS_PACKAGE):
            return HARNESS, ""
        for index in range(len(path.parts) - 1, -1, -1):
            if path.parts[index] in PACKAGE_DIRS:
                return LIBRARY, module_name(path.parts[index + 1 :])
        if any(path.is_relative_to(root) for root in self.roots):
            return HARNESS, ""
        if any(path.is_relative_to(folder) for folder in STDLIB_DIRS):
            return PASS, ""
        folder = next((p for p in self.paths if path.is_relative_to(p)), None)
        return LIBRARY, module_name(path.relative_to(folder).parts if folder else (path.name,))


def module_name(parts: Iterable[str]) -> str:
    """`torch/nn/functional.py` as `torch.nn.functional`, `einx/__init__.py` as `einx`."""
    parts = list(parts)
    parts[-1] = parts[-1].rsplit(".", 1)[0]
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def wrapped_name(frame: FrameType, local: str, prefix: str) -> str:
    """The public name of the function a library wrapper runs (einx's API wrapper: `einx.softmax`), unwrapped
    through `functools.wraps` and `functools.partial(..., func=...)`."""
    function = frame.f_locals.get(local)
    for _ in range(8):
        if isinstance(function, functools.partial):
            function = function.keywords.get("func", function.func)
        elif hasattr(function, "__wrapped__"):
            function = function.__wrapped__
        else:
            break
    name = getattr(function, "__name__", None)
    return f"{prefix}.{name}" if isinstance(name, str) else f"{prefix} (an operation the harness cannot name)"
