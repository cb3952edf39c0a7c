"""The run-time half of the from-scratch rule: which ATen operators the student's code runs.

While the student's code computes a case, a TorchDispatchMode sees every operator that reaches
torch's dispatcher, whatever Python name reached it: `torch.softmax`, `F.softmax`, `x.softmax`,
`nn.Softmax`, `torch.ops.aten._softmax`, a name built at run time, code run by `exec` all arrive
as the one operator `aten._softmax`. A `Watch` around one call records the forbidden operators
that ran and, for each, the line of the student's code that called it.

Switching the record off is itself a breach: the harness runs a sentinel operation through the
mode before and after the student's call (both must be seen, and the mode must still be on top
of the stack), and the calls that pop or disable dispatch modes, made from outside torch while
a case runs, are recorded as tampering. Python threads started after `install()` run under the
record too (dispatch modes are per thread).

The record is the student's process speaking about itself: evidence, not proof. Two parts of this
module hold whatever that process does to the record:
- `remove_operators` replaces a problem's forbidden operators at torch's dispatcher with kernels
  that raise `ForbiddenOperator` naming the operator (every overload, for the CPU, CUDA and MPS
  backends and the autograd and composite keys), so `F.softmax` fails at the student's line
  whether or not anything records it. The grader's child installs it for good before the
  student's code is imported; pytest for the length of each graded case.
- starting a process while a case runs (`os.fork`, `subprocess`, `multiprocessing`, `os.system`,
  `os.posix_spawn`, `os.exec*`) is refused by an audit hook and recorded: graded code computes in its
  own process. (The grader's child also has a seccomp filter in the kernel: see child.py.)
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import torch
import torch.utils._python_dispatch as python_dispatch
from torch.utils._python_dispatch import TorchDispatchMode

from cs_basics.harness.rule.library import LibraryCalls

TORCH_DIR = str(Path(torch.__file__).parent)
# the calls that take a dispatch mode off the stack or keep operators from reaching it
SWITCHES = {
    python_dispatch: ("_disable_current_modes", "_pop_mode", "_pop_mode_temporarily"),
    torch._C: (
        "_DisableTorchDispatch",
        "_ExcludeDispatchKeyGuard",
        "ExcludeDispatchKeyGuard",
        "_SetExcludeDispatchKeyGuard",
        "_ForceDispatchKeyGuard",
        "_dispatch_tls_set_dispatch_key_excluded",
        "_dispatch_tls_set_dispatch_key_included",
        "_dynamo_restore_local_dispatch_key_set",
        "_pop_torch_dispatch_stack",
        "_push_on_torch_dispatch_stack",
        "_pop_torch_dispatch_mode",
        "_unset_dispatch_mode",
        "_set_dispatch_mode",
    ),
}

# every overload of a forbidden operator gets a raising kernel for these keys: the backends a case runs
# on, and the autograd and composite keys that run before them (softmax.int decomposes there); not
# CompositeExplicitAutograd: removed beside CompositeImplicitAutograd, it left softmax.int undecomposed
OVERRIDE_KEYS = ("CPU", "CUDA", "MPS", "Autograd", "CompositeImplicitAutograd")
UNAVAILABLE = "is not available in graded code"  # in every ForbiddenOperator message
# audit events that start a process; multiprocessing's spawn and forkserver raise none, so
# _posixsubprocess.fork_exec (under subprocess too) gets a tripwire of its own; on Windows, where there is
# no _posixsubprocess, every process starts through _winapi.CreateProcess, os.spawn* or os.startfile
PROCESS_EVENTS = frozenset(
    {"os.fork", "os.forkpty", "os.posix_spawn", "os.posix_spawnp", "os.system", "os.exec", "subprocess.Popen"}
    | {"_winapi.CreateProcess", "os.spawn", "os.startfile"}
)
STARTED_PROCESS = "started a process"

MAX_FRAMES = 6  # of the student's stack in a message

# set to 0 only to measure what the record costs (benchmarks/record_overhead.py): it switches the
# run-time half of the from-scratch rule off, in the grader's environment as in pytest's
RECORD_ENV = "CS_BASICS_RECORD_OPS"

_active: Watch | None = None  # the watch of the case running now, if any
_installed = False


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

    def to_json(self) -> dict:
        return {
            "sightings": [asdict(s) for s in self.sightings],
            "tampering": list(self.tampering),
            "processes": list(self.processes),
            "library": [asdict(c) for c in self.library],
        }

    @classmethod
    def from_json(cls, data: Any) -> Record:
        """A record sent by the child; anything malformed reads as an empty record."""
        try:
            sightings = [Sighting(str(s["op"]), str(s.get("where", ""))) for s in data.get("sightings", [])]
            processes = [str(p) for p in data.get("processes", [])]
            library = [Computed(str(c["function"]), str(c.get("where", ""))) for c in data.get("library", [])]
            return cls(sightings, [str(t) for t in data.get("tampering", [])], processes, library)
        except (AttributeError, KeyError, TypeError):
            return cls()


def student_predicate(student_code: Iterable[str], excluded: Iterable[str]) -> Callable[[Path], bool]:
    """Whether a path relative to the code's root is the student's: under `student_code`, not `excluded`."""
    owned = [PurePosixPath(p) for p in student_code]
    staff = [PurePosixPath(p) for p in excluded]

    def is_student(relative: Path) -> bool:
        path = PurePosixPath(Path(relative).as_posix())
        inside = any(path == p or path.is_relative_to(p) for p in owned)
        return inside and not any(path == s or path.is_relative_to(s) for s in staff)

    return is_student


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


class _Recorder(TorchDispatchMode):
    def __init__(self, watch: Watch):
        super().__init__()
        self.watch = watch

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # else torch wraps __torch_dispatch__ in a guard whose first call imports torch._dynamo (~2 s)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        watch = self.watch if self.watch is not None else _active
        if watch is not None:
            watch.saw(func, args)
        return func(*args, **(kwargs or {}))


class Watch:
    """Record the forbidden operators that one call of the student's code runs.

    with Watch(["aten._softmax"], frames) as watch:
        outputs = call()
    watch.record  # -> Record
    """

    def __init__(
        self,
        forbidden: Iterable[str],
        frames: StudentFrames,
        enabled: bool = True,
        remove: bool = False,
        library: LibraryCalls | None = None,
    ):
        self.enabled = enabled
        self.remove = remove  # the forbidden operators replaced for the length of the call (pytest's case)
        self.patterns = tuple(forbidden)
        self.frames = frames
        self.record = Record()
        self._library: Any = None
        self._forbidden: dict[Any, bool] = {}
        self._seen_ops: set[str] = set()
        self._sentinel = torch.zeros(())
        self._sentinel_seen = False
        self._mode = _Recorder(self)
        self.library = library if library is not None else LibraryCalls(frames)
        self._computed: set[str] = set()

    def saw(self, func: Any, args: tuple) -> None:
        if args and args[0] is self._sentinel:
            self._sentinel_seen = True
            return
        forbidden = self._forbidden.get(func)
        if forbidden is None:
            forbidden = self._forbidden[func] = forbids(self.patterns, str(func.overloadpacket))
        if forbidden:
            self.saw_op(str(func.overloadpacket))
        # the frame that ran the operator, under __torch_dispatch__ (none in a thread of torch's own: autograd's)
        self.saw_frame(sys._getframe(1).f_back)

    def saw_frame(self, frame: Any) -> None:
        """An operator ran in `frame`: library code that is no glue there computed on the student's behalf."""
        found = self.library.computed_by(frame)
        if found is not None and found[0] not in self._computed:
            function, caller = found
            self._computed.add(function)
            where = self.frames.where(traceback.extract_stack(caller)) if caller is not None else ""
            self.record.library.append(Computed(function, where))

    def saw_op(self, op: str) -> None:
        """A forbidden operator ran (or its replacement was called), from the stack as it is now."""
        if op not in self._seen_ops:
            self._seen_ops.add(op)
            self.record.sightings.append(Sighting(op, self.frames.where(traceback.extract_stack())))

    def started_process(self, how: str) -> None:
        where = self.frames.where(traceback.extract_stack())
        self.record.processes.append(f"{how} (called from {where})" if where else how)

    def tampered(self, what: str) -> None:
        self.record.tampering.append(what)

    def _sentinel_passes(self) -> bool:
        self._sentinel_seen = False
        self._sentinel.add(0)
        return self._sentinel_seen

    def __enter__(self) -> Watch:
        global _active
        if not self.enabled:
            return self
        install()
        if self.remove:
            self._library = remove_operators(self.patterns)
        self._depth = python_dispatch._len_torch_dispatch_stack()
        self._mode.__enter__()
        _active = self
        if not self._sentinel_passes():
            self.tampered("the record of operators could not see operators before the call (switched off at import?)")
        return self

    def __exit__(self, *exc: object) -> None:
        global _active
        if not self.enabled:
            return
        try:
            on_top = python_dispatch._get_current_dispatch_mode() is self._mode
            if not (on_top and self._sentinel_passes()):
                self.tampered("the record of operators was switched off during the call")
        finally:
            _active = None
            _unwind(self._mode, self._depth)
            if self._library is not None:
                self._library._destroy()
                self._library = None


def recording() -> bool:
    """Whether the record is on (always, but while its cost is measured)."""
    return os.environ.get(RECORD_ENV, "1") != "0"


def _unwind(mode: _Recorder, depth: int) -> None:
    """Pop the dispatch-mode stack back to `depth`, through our mode, whatever the student left on it."""
    while python_dispatch._len_torch_dispatch_stack() > depth:
        top = python_dispatch._get_current_dispatch_mode()
        if top is mode:
            mode.__exit__(None, None, None)
        else:
            python_dispatch._pop_mode()


def _caller_is_torch() -> bool:
    """Whether the function that called a switch lives in torch itself (torch switches modes for its own ends)."""
    frame = sys._getframe(2)
    return frame.f_code.co_filename.startswith(TORCH_DIR)


def _tripwire(name: str, original: Callable) -> Callable:
    @functools.wraps(original)
    def switch(*args: Any, **kwargs: Any) -> Any:
        if _active is not None and not _caller_is_torch():
            _active.tampered(f"called {name}, which switches the record of operators off")
        return original(*args, **kwargs)

    return switch


def _record_threads() -> None:
    """Dispatch modes are per thread: every Python thread started from here on runs under a recorder
    that reports to the watch of the case running at the time."""
    bootstrap = threading.Thread._bootstrap_inner

    def run_recorded(thread: threading.Thread) -> None:
        with _Recorder(None):  # type: ignore[arg-type]
            bootstrap(thread)

    threading.Thread._bootstrap_inner = run_recorded  # type: ignore[method-assign]


def install() -> None:
    """Set the tripwires and the thread hook once per process, before the student's code is imported."""
    global _installed
    if _installed:
        return
    _installed = True
    for module, names in SWITCHES.items():
        for name in names:
            original = getattr(module, name, None)
            if original is not None:
                setattr(module, name, _tripwire(f"{module.__name__}.{name}", original))
    _record_threads()
    _refuse_processes()


class ForbiddenOperator(RuntimeError):
    """Raised by the kernel that stands in for a forbidden operator."""


@functools.cache
def _matcher(patterns: tuple[str, ...]) -> Callable[[str], Any]:
    """One compiled expression for all the patterns (fnmatchcase's meaning): one match per name, not one a pattern."""
    return re.compile("|".join(fnmatch.translate(p) for p in patterns)).match if patterns else lambda name: None


def forbids(patterns: Iterable[str], op: str) -> bool:
    """Whether an operator's name ("aten._softmax") matches one of the patterns."""
    return _matcher(tuple(patterns))(op) is not None


def operator_overloads(patterns: Iterable[str]) -> list[str]:
    """torch's operators (every overload, "aten::_softmax.out") whose name ("aten._softmax") a pattern matches."""
    return list(_operator_overloads(tuple(patterns)))


@functools.cache
def _operator_overloads(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """Once per process for each set of patterns: torch's list (~3,600 operators) depends only on torch and
    what the process registered before the first graded case, the patterns only on the course. An operator
    registered later (the study kernel's, at its import) is still seen by the record, as in the grader's
    child, which reads the list before the submission's import. A tuple: nothing can change what it holds."""
    match = _matcher(patterns)  # once, not once a name: each of the grader's children pays this loop
    found = []
    for name in torch._C._dispatch_get_all_op_names():
        namespace, _, rest = name.partition("::")
        if match(f"{namespace}.{rest.partition('.')[0]}") is not None:
            found.append(name)
    return tuple(sorted(found))


def _unavailable(op: str) -> Callable:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        if _active is not None:
            _active.saw_op(op)
        raise ForbiddenOperator(f"{op} {UNAVAILABLE}: the from-scratch rule forbids it for this problem")

    return kernel


def remove_operators(patterns: Iterable[str]) -> Any:
    """Replace every operator the patterns match with a kernel that raises ForbiddenOperator, until the
    returned library is destroyed (or collected): whoever can reach it could undo this, so the grader's
    child keeps it where only a construct the scan holds (gc, frames, sys.modules) could find it."""
    by_namespace: dict[str, list[str]] = {}
    for name in operator_overloads(patterns):
        namespace, _, rest = name.partition("::")
        by_namespace.setdefault(namespace, []).append(rest)
    libraries = []
    for namespace, overloads in by_namespace.items():
        library = torch.library.Library(namespace, "IMPL")
        for overload in overloads:
            op = f"{namespace}.{overload.split('.')[0]}"
            for key in OVERRIDE_KEYS:
                library.impl(overload, _unavailable(op), key)
        libraries.append(library)
    return _Libraries(libraries)


class _Libraries:
    def __init__(self, libraries: list[Any]):
        self.libraries = libraries

    def _destroy(self) -> None:
        for library in self.libraries:
            library._destroy()
        self.libraries = []


def _process_refused(how: str) -> None:
    """Starting a process while a case runs: recorded, and refused (graded code computes in its own process)."""
    if _active is not None:
        _active.started_process(how)
        raise PermissionError(
            f"{how}: graded code must compute in its own process; starting a process while a case runs breaks "
            "the from-scratch rule"
        )


def _audit(event: str, args: tuple) -> None:
    if event in PROCESS_EVENTS and _active is not None:
        _process_refused(f"your code {STARTED_PROCESS} ({event})")


def _refuse_processes() -> None:
    """An audit hook (it cannot be removed) for the calls that raise audit events, and a tripwire on the
    call under subprocess and multiprocessing's spawn and forkserver, which raise none."""
    sys.addaudithook(_audit)
    try:
        import _posixsubprocess
    except ImportError:  # Windows: its processes start through _winapi.CreateProcess, which the hook sees
        return

    fork_exec = _posixsubprocess.fork_exec

    @functools.wraps(fork_exec)
    def refused_fork_exec(*args: Any, **kwargs: Any) -> Any:
        _process_refused(f"your code {STARTED_PROCESS} (_posixsubprocess.fork_exec)")
        return fork_exec(*args, **kwargs)

    _posixsubprocess.fork_exec = refused_fork_exec
