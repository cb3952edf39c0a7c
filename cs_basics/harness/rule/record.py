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
  student's code is imported, on C++ library objects no Python object holds (`Refusal.intact` checks
  it at the import's end and the last case's); pytest for the length of each graded case.
- in the grader's child each piece of evidence also leaves the process as it is seen (a `Channel`,
  evidence.py): what the code does to the record afterwards takes nothing back.
- starting a process while a case runs (`os.fork`, `subprocess`, `multiprocessing`, `os.system`,
  `os.posix_spawn`, `os.exec*`) is refused by an audit hook and recorded: graded code computes in its
  own process. (The grader's child also has a seccomp filter in the kernel: see child.py.)
"""

from __future__ import annotations

import ctypes
import fnmatch
import functools
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._python_dispatch as python_dispatch
from torch.utils._python_dispatch import TorchDispatchMode

from cs_basics.harness.rule.library import LibraryCalls
from cs_basics.harness.rule.sightings import Computed, Record, Sighting, StudentFrames

if TYPE_CHECKING:
    from cs_basics.harness.rule.evidence import Channel

# torch's folder as its files are named: where the grader reaches the Python environment through a descriptor
# (reach.reach_python), the modules a job loads name it so, and those loaded before it by its real path
TORCH_DIRS = tuple({str(Path(torch.__file__).parent), str(Path(torch.__file__).resolve().parent)})
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
REFUSAL_MARK = "cs-basics-refusal"  # the "file" the refusing kernels are registered at, in torch's dump of them


# operators that compute no value of an answer: views, copies and casts, tensors made from constants, sizes,
# comparisons and logic (a mask). Library code may run these for the student's code (numpy building a mask,
# a tensor converted to an array and back) without holding the problem; arithmetic (exp, sum, max, matmul, ...)
# run by library code that is no glue holds it (library.py). A list of what is allowed, as glue.py's is.
COMPUTES_NOTHING = frozenset(
    f"aten.{name}"
    for name in (
        "view", "_unsafe_view", "_reshape_alias", "alias", "detach", "detach_", "t", "transpose", "permute",
        "expand", "expand_as", "reshape", "view_as", "squeeze", "unsqueeze", "select", "slice", "as_strided",
        "unbind", "split", "split_with_sizes", "chunk", "flatten", "unflatten", "movedim", "contiguous", "clone",
        "copy_", "_to_copy", "to", "_copy_from", "_copy_from_and_resize", "lift_fresh", "lift_fresh_copy",
        "resolve_conj", "resolve_neg", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
        "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
        "fill_", "zero_", "arange", "scalar_tensor", "eye", "tril", "triu", "_local_scalar_dense", "is_nonzero",
        "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and", "logical_or", "logical_xor",
        "bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor", "set_", "resize_", "sym_size", "sym_stride",
        "sym_numel", "sym_storage_offset", "dim", "size", "stride", "numel", "is_same_size",
    )
)  # fmt: skip

# set to 0 only to measure what the record costs (benchmarks/record_overhead.py): it switches the
# run-time half of the from-scratch rule off, in the grader's environment as in pytest's
RECORD_ENV = "CS_BASICS_RECORD_OPS"

_active: Watch | None = None  # the watch of the case running now, if any
_installed = False


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
        channel: Channel | None = None,
        charged: Iterable[str] = (),
        refusal: Refusal | None = None,
        importing: bool = False,
    ):
        self.enabled = enabled
        self.remove = remove  # the forbidden operators replaced for the length of the call (pytest's case)
        # the grader's child: each piece of evidence also leaves the process at once (evidence.py), charged to
        # `charged` (the case, or every case of the process while the submission is imported)
        self.channel = channel
        self.charged = tuple(charged)
        self.refusal = refusal  # the child's refusal of the forbidden operators, checked still there at the end
        self.cases_run = not importing  # a case runs (processes refused), or the submission is imported
        self.patterns = tuple(forbidden)
        self.frames = frames
        self.record = Record()
        self._library: Any = None
        self._forbidden: dict[Any, bool] = {}
        self._computes: dict[Any, bool] = {}  # operator -> whether it computes a value (not COMPUTES_NOTHING)
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
        computes = self._computes.get(func)
        if computes is None:
            computes = self._computes[func] = str(func.overloadpacket) not in COMPUTES_NOTHING
        if computes:  # the frame that ran it, under __torch_dispatch__ (none in a thread of torch's own: autograd's)
            self.saw_frame(sys._getframe(1).f_back)

    def saw_frame(self, frame: Any) -> None:
        """An operator ran in `frame`: library code that is no glue there computed on the student's behalf."""
        found = self.library.computed_by(frame)
        if found is not None and found[0] not in self._computed:
            function, caller = found
            if library_import(frame, caller):  # a library's own import, run by the student's `import`
                return
            self._computed.add(function)
            where = self.frames.where(traceback.extract_stack(caller)) if caller is not None else ""
            self.record.library.append(Computed(function, where))
            self._send("library", function=function, where=where)

    def saw_op(self, op: str) -> None:
        """A forbidden operator ran (or its replacement was called), from the stack as it is now."""
        if op not in self._seen_ops:
            self._seen_ops.add(op)
            where = self.frames.where(traceback.extract_stack())
            self.record.sightings.append(Sighting(op, where))
            self._send("sighting", op=op, where=where)

    def started_process(self, how: str) -> None:
        where = self.frames.where(traceback.extract_stack())
        self.record.processes.append(f"{how} (called from {where})" if where else how)
        self._send("process", what=self.record.processes[-1])

    def tampered(self, what: str) -> None:
        self.record.tampering.append(what)
        self._send("tampering", what=what)

    def called_node(self, node: Any) -> None:
        """The student's code called a node of the autograd graph: torch's C++ derivative formula computed
        what it returns (the gradient of logsumexp is a softmax), with no Python frame of torch's to see."""
        try:
            name = f"torch.autograd node {node.name()}, called as a function"
        except Exception:
            name = "a torch.autograd node, called as a function"
        if name not in self._computed:
            self._computed.add(name)
            where = self.frames.where(traceback.extract_stack())
            self.record.library.append(Computed(name, where))
            self._send("library", function=name, where=where)

    def _send(self, kind: str, **fields: str) -> None:
        if self.channel is not None:
            self.channel.send(kind, **fields)

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
        if self.channel is not None:
            self.channel.charge(self.charged)
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
            if self.refusal is not None and not self.refusal.intact():
                self.tampered("undid the dispatcher's refusal of the forbidden operators")
        finally:
            _active = None
            _unwind(self._mode, self._depth)
            if self._library is not None:
                self._library.restore()
                self._library = None


def library_import(frame: Any, caller: Any) -> bool:
    """Whether a library module's own body (its set-up, run by an `import`) stands between the frame that ran
    an operator and the student's frame: what a module computes for itself as it loads is not an answer
    (the student's code hands it nothing). Walked only where library code was found (rare)."""
    while frame is not None and frame is not caller:
        if frame.f_code.co_name == "<module>" and not frame.f_code.co_filename.startswith("<"):
            return True
        frame = frame.f_back
    return False


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
    return frame.f_code.co_filename.startswith(TORCH_DIRS)


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


class _Node:
    """An autograd node, as the student's code gets it (`y.grad_fn`, `.next_functions`): calling it tells the
    watch of the case running now first (`Watch.called_node`); everything else is the node's own."""

    __slots__ = ("_node",)

    def __init__(self, node: Any):
        object.__setattr__(self, "_node", node)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _active is not None:
            _active.called_node(self._node)
        return self._node(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._node, name)
        if name == "next_functions":
            return tuple((None if n is None else _Node(n), i) for n, i in value)
        return value

    def __eq__(self, other: object) -> bool:
        return self._node == (other._node if isinstance(other, _Node) else other)

    def __hash__(self) -> int:
        return hash(self._node)

    def __repr__(self) -> str:
        return repr(self._node)


def _watch_autograd_nodes() -> None:
    """`Tensor.grad_fn` (and `_grad_fn`) read by the student's own line during a watch gives a `_Node`, and so does
    the `.node` of `torch.autograd.graph.get_gradient_edge(y)` called there: a node called from Python runs its
    C++ formula with the student's frame innermost, which no frame walk sees."""
    for name in ("grad_fn", "_grad_fn"):
        base = getattr(torch._C.TensorBase, name, None)
        if base is None or name in torch.Tensor.__dict__:
            continue

        def read(tensor: Any, get: Any = base.__get__) -> Any:
            node = get(tensor)
            watch = _active
            if node is None or watch is None or watch.frames.label(sys._getframe(1).f_code.co_filename) is None:
                return node
            return _Node(node)

        setattr(torch.Tensor, name, property(read, doc=base.__doc__))
    graph = torch.autograd.graph
    get_gradient_edge, edge_type = getattr(graph, "get_gradient_edge", None), getattr(graph, "GradientEdge", None)
    if get_gradient_edge is None or edge_type is None:
        return

    class _Edge(edge_type):  # type: ignore[misc, valid-type]
        """A gradient edge whose node, read by name, index or unpacking, is a `_Node`; its tuple slot keeps the
        node itself, which is what torch's C++ reads when the edge is handed back (`autograd.grad(loss, edge)`)."""

        __slots__ = ()

        @property
        def node(self) -> Any:
            return _Node(tuple.__getitem__(self, 0))

        def __getitem__(self, index: Any) -> Any:
            value = tuple.__getitem__(self, index)
            return _Node(value) if isinstance(index, int) and index % len(self) == 0 else value

        def __iter__(self) -> Any:
            return iter([self[i] for i in range(len(self))])

    def edge(tensor: Any) -> Any:  # `get_gradient_edge(y).node`: the same node as `y.grad_fn`
        found = get_gradient_edge(tensor)
        watch = _active
        if watch is None or watch.frames.label(sys._getframe(1).f_code.co_filename) is None:
            return found
        return _Edge(*found)

    # no functools.wraps: its `__wrapped__` would hand the code the function unwatched
    edge.__name__, edge.__qualname__, edge.__doc__ = "get_gradient_edge", "get_gradient_edge", get_gradient_edge.__doc__
    edge.__module__ = get_gradient_edge.__module__
    graph.get_gradient_edge = edge


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
    _watch_autograd_nodes()


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


def _unavailable(op: str, send: Callable[..., None] | None) -> Callable:
    """The kernel standing in for `op`: says so on the channel it was made with (the grader's child), to the
    watch of the case running now, then raises."""

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if send is not None:
            send("refused", op=op)
        if _active is not None:
            _active.saw_op(op)
        raise ForbiddenOperator(f"{op} {UNAVAILABLE}: the from-scratch rule forbids it for this problem")

    return kernel


def remove_operators(patterns: Iterable[str], channel: Channel | None = None, for_good: bool = False) -> Refusal:
    """Replace every operator the patterns match with a kernel that raises ForbiddenOperator.

    `for_good` (the grader's child): the registrations belong to no Python object the graded code could
    reach and destroy: torch's C++ library objects are made here without `torch.library` (whose objects,
    and a finalizer registry that holds them, Python can reach), their reference count raised so that
    they are never freed, and no reference kept (they are no objects the garbage collector tracks either).
    What is left is to register a kernel over them, which takes `torch.library` or `torch._C` (forbidden
    names); `Refusal.intact` sees that. Else (pytest's case) until `Refusal.restore`."""
    by_namespace: dict[str, list[str]] = {}
    for name in operator_overloads(patterns):
        namespace, _, rest = name.partition("::")
        by_namespace.setdefault(namespace, []).append(rest)
    send = channel.send if channel is not None else None
    modules = []
    for namespace, overloads in by_namespace.items():
        module = torch._C._dispatch_library("IMPL", namespace, "", REFUSAL_MARK, 0)
        for overload in overloads:
            kernel = _unavailable(f"{namespace}.{overload.split('.')[0]}", send)
            for key in OVERRIDE_KEYS:
                module.impl(overload, key, kernel, False)
        modules.append(module)
    if for_good:
        for module in modules:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(module))
        modules = []
    return Refusal(operator_overloads(patterns), modules)


class Refusal:
    """The forbidden operators' replacement: whether it still stands, and (pytest's) its removal."""

    def __init__(self, overloads: list[str], modules: list[Any]):
        self.overloads = tuple(overloads)
        self._modules = modules
        self._dump = torch._C._dispatch_dump  # taken now: a name replaced later changes nothing here

    def intact(self) -> bool:
        """Whether every overload still runs our kernel for every key (one registered over it, or ours
        removed, leaves ours missing or "(inactive)" in torch's dump of the operator's registrations)."""
        mark = f"registered at {REFUSAL_MARK}:0"
        for overload in self.overloads:
            active = [line for line in self._dump(overload).splitlines() if mark in line and "(inactive)" not in line]
            if len(active) != len(OVERRIDE_KEYS):
                return False
        return True

    def restore(self) -> None:
        for module in self._modules:
            module.reset()
        self._modules = []


def _process_refused(how: str) -> None:
    """Starting a process while a case runs: recorded, and refused (graded code computes in its own process).
    Not while the submission is imported: a process forked then inherits the dispatcher's refusal, and the
    child's seccomp filter refuses every process from the end of the import on."""
    if _active is not None and _active.cases_run:
        _active.started_process(how)
        raise PermissionError(
            f"{how}: graded code must compute in its own process; starting a process while a case runs breaks "
            "the from-scratch rule"
        )


def _audit(event: str, args: tuple) -> None:
    if event in PROCESS_EVENTS and _active is not None and _active.cases_run:
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
