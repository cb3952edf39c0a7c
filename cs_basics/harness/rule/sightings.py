"""What a watch saw, and where in the student's code: the forbidden operators that ran (`Sighting`), what the
student's code computed (`Computed`), one call's `Record` (sent to the grader as JSON), and which frames of a
stack are the student's (`StudentFrames`, given tooling.student_predicate). The watch that sees them: record.py.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAX_FRAMES = 6  # of the student's stack in a message


@dataclass(frozen=True)
class Sighting:
    """A forbidden operator that ran, and the student's line that called it ("" when none did)."""

    op: str  # e.g. "aten._softmax"
    where: str = ""  # e.g. "cs_basics/nn/functional.py:12 in my_softmax, from cs_basics/nn/functional.py:42 in ..."


@dataclass(frozen=True)
class Computed:
    """A library function that ran operators for the student's code and is no glue (library.py), and the
    student's line that called it."""

    function: str  # e.g. "torch.distributions.categorical.Categorical.__init__"
    where: str = ""


@dataclass
class Record:
    """What one call ran: the forbidden operators seen, and any tampering with the record."""

    sightings: list[Sighting] = field(default_factory=list)
    tampering: list[str] = field(default_factory=list)
    processes: list[str] = field(default_factory=list)  # how the code tried to start a process, and where
    library: list[Computed] = field(default_factory=list)  # library code that computed on the student's behalf
    cut_off: list[str] = field(default_factory=list)  # why the grader cannot know the record is whole (evidence.py)

    def to_json(self) -> dict:
        return {
            "sightings": [asdict(s) for s in self.sightings],
            "tampering": list(self.tampering),
            "processes": list(self.processes),
            "library": [asdict(c) for c in self.library],
            "cut_off": list(self.cut_off),
        }

    @classmethod
    def from_json(cls, data: Any) -> Record:
        """A record sent by the child; anything malformed reads as an empty record."""
        try:
            sightings = [Sighting(str(s["op"]), str(s.get("where", ""))) for s in data.get("sightings", [])]
            processes = [str(p) for p in data.get("processes", [])]
            library = [Computed(str(c["function"]), str(c.get("where", ""))) for c in data.get("library", [])]
            cut_off = [str(c) for c in data.get("cut_off", [])]
            return cls(sightings, [str(t) for t in data.get("tampering", [])], processes, library, cut_off)
        except (AttributeError, KeyError, TypeError):
            return cls()


class StudentFrames:
    """Which stack frames are the student's: files under `root` that `is_student` accepts."""

    def __init__(self, root: Path, is_student: Callable[[Path], bool]):
        self.root = Path(root).resolve()
        self.is_student = is_student

    @functools.cache  # noqa: B019 (one instance per process)
    def label(self, filename: str) -> str | None:
        """The file relative to the root when it is the student's, else None."""
        path = Path(filename)
        if not path.is_absolute():
            return None
        try:
            relative = path.resolve().relative_to(self.root)
        except ValueError:
            return None
        return relative.as_posix() if self.is_student(relative) else None

    def where(self, frames: traceback.StackSummary) -> str:
        """The stack cut to the student's lines, innermost first, noting code run by exec below them."""
        inner_first = list(reversed(frames))
        lines = []
        for depth, frame in enumerate(inner_first):
            label = self.label(frame.filename)
            if label is None:
                continue
            line = f"{label}:{frame.lineno} in {frame.name}"
            if not lines:
                below = inner_first[:depth]
                via_exec = any(f.filename.startswith("<") and not f.filename.startswith("<frozen") for f in below)
                line += " (in code it ran with exec)" if via_exec else ""
            lines.append(line)
        return ", from ".join(lines[:MAX_FRAMES])
