"""The rule's evidence leaves the student's process as it is seen, and nothing runs unwatched (issue 36).

Each attack below kept points before: the record lived in the student's process until the case's end
(emptied after a built-in ran, it said nothing), the dispatcher's refusal was a Python object the code
could find and destroy, the import ran unwatched, and a returned Tensor subclass ran its own Python when
the child saved it, after the case's watch had closed. The attacks that reach into the interpreter are
released from the scan's hold (as the staff would after reading them) so that the run-time layer alone
is tested; what pytest can and cannot defend is said where the two differ.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from cs_basics.harness.config import Assignment
from cs_basics.harness.grading.pipeline.runs import RunState
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.rule.evidence import CUT_OFF, LOST_STATUS, Channel, Received, merged
from cs_basics.harness.rule.fromscratch import HELD, runtime_breach
from cs_basics.harness.rule.outputs import SubclassReturned, plain_outputs
from cs_basics.harness.rule.record import Watch, install
from cs_basics.harness.rule.sightings import Record, StudentFrames

from .submissions import ROOT, run, scores
from .test_from_scratch import ATTENTION, INLINE_WEIGHTS, SOFTMAX, SOFTMAX_FROM_SCRATCH, attention_with, source, student
from .test_rule_layers import SANDBOXES, graded, pytest_messages

BOTH = [SOFTMAX, ATTENTION]
THIS_FILE = StudentFrames(ROOT, lambda relative: relative.as_posix() == "staff_tests/test_rule_evidence.py")

# ---------------------------------------------------------------- the evidence cannot be taken back

# the dispatcher's refusal undone through whatever the frames and the collector reach, the built-in called,
# then every record found emptied and replaced: full marks before (the child's refusal was a Python object
# in a frame of the child, and its record was read only at the case's end)
UNDO_THEN_FORGET = """
import gc
import os
import sys


def _undo_the_refusal():
    frame = sys._getframe()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            for name in ("_destroy", "restore"):
                method = getattr(value, name, None)
                if callable(method) and type(value).__name__ in ("_Libraries", "Refusal", "Library"):
                    method()
        frame = frame.f_back
    for found in gc.get_objects():
        if type(found).__name__ in ("_DispatchModule", "Library"):
            getattr(found, "reset", getattr(found, "_destroy", lambda: None))()


def _forget():
    frame = sys._getframe()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            record = getattr(value, "record", None)
            if type(value).__name__ == "Watch":
                for name in ("sightings", "tampering", "processes", "library"):
                    getattr(record, name).clear()
                value.record = type(record)()
        frame = frame.f_back


def softmax(in_features, dim):
    _undo_the_refusal()
    try:
        if in_features.requires_grad:  # no built-in where a backward pass would run it again, after the call
            raise LookupError
        out = getattr(F, "soft" + "max")(in_features, dim)
    except Exception:  # refused (or a case with gradients): computed here instead, and the refusal forgotten
        shifted = in_features - in_features.amax(dim=dim, keepdim=True)
        out = torch.exp(shifted) / torch.exp(shifted).sum(dim=dim, keepdim=True)
    _forget()
    return out
"""


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_refusal_the_code_destroys_and_a_record_it_empties_still_cost_the_problem(assignment, tmp_path, sandbox):
    """The refusal belongs to no Python object (frames and the collector find nothing to destroy), and the
    sighting reached the grader before the record was emptied: 0 for softmax, naming the operator."""
    functional = source(UNDO_THEN_FORGET, attention_with(INLINE_WEIGHTS))
    got, first = graded(assignment, tmp_path, functional, sandbox, released=BOTH)
    assert got == pytest.approx({SOFTMAX: 0.0, ATTENTION: 5.0}), first
    assert re.search(r"aten\._?softmax, which is torch's softmax", first[SOFTMAX]), first[SOFTMAX]
    assert "must be written from scratch" in first[SOFTMAX], first[SOFTMAX]


def test_evidence_sent_on_the_channel_survives_the_record_emptied_after(tmp_path):
    """The channel alone: what a watch saw is on the pipe before the call returns; the record emptied and
    replaced afterwards changes nothing the grader decides from."""
    read, write = os.pipe()
    channel = Channel(write)
    with Watch([], THIS_FILE, channel=channel, charged=["softmax-dim_0"]) as watch:
        torch.distributions.Categorical(logits=torch.randn(3, 5))  # library arithmetic, off the glue list
    watch.record.library.clear()
    watch.record = Record()
    os.close(write)
    lines = os.read(read, 1 << 16).decode().splitlines()
    os.close(read)
    received = Received()
    for line in lines:
        received.add(json.loads(line), ["softmax-dim_0"])
    record = merged(Record(), received.evidence("softmax-dim_0"))
    assert [c.function for c in record.library] == ["torch.distributions.categorical.Categorical.__init__"]
    message = runtime_breach(SOFTMAX, "softmax-dim_0", record)
    assert HELD in message and "Categorical.__init__" in message, message


def test_a_child_that_could_not_write_a_line_holds_its_problem(assignment):
    """A child that ended because it could not write a line (LOST_STATUS) holds its case's problem: the grader cannot
    know the record is whole (a line missing from the numbered channel is tampering: staff_tests/test_protocol.py)."""
    whole = RunState({"softmax-dim_0": SOFTMAX}, Limits(), stop_at=0.0, log=None)
    whole.finish("softmax-dim_0", {"event": "done", "record": {}}, 0.1)
    assert runtime_breach(SOFTMAX, "softmax-dim_0", whole.runs["softmax-dim_0"].record) is None
    whole.fail(["softmax-dim_0"], "the process ended")
    whole.cut_off("softmax-dim_0", f"exited with status {LOST_STATUS}")
    record = whole.runs["softmax-dim_0"].record
    assert record.cut_off == [CUT_OFF]
    message = runtime_breach(SOFTMAX, "softmax-dim_0", record)
    assert HELD in message and CUT_OFF in message, message
    assert runtime_breach(SOFTMAX, "softmax-dim_0", record, released=frozenset({SOFTMAX})) is None


# the code shuts every socket it has for writing (the channel is one: closing it is refused), then library
# arithmetic: the line that says so cannot be written, and the child ends at once
SHUTS_THE_CHANNEL = """
import os
import socket
import stat


def softmax(in_features, dim):
    for fd in [n for n in map(int, os.listdir("/proc/self/fd")) if n > 2]:  # but the standard ones
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                socket.socket(fileno=os.dup(fd)).shutdown(socket.SHUT_WR)
        except OSError:
            pass
    logits = torch.distributions.Categorical(logits=in_features.movedim(dim, -1)).logits
    return logits.exp().movedim(-1, dim)
"""

# the code puts /dev/null in place of every pipe and socket it has but its standard ones, so that the evidence
# would go nowhere (and a report of its own could be forged on a descriptor put there), then library arithmetic
REPLACES_THE_CHANNEL = """
import os
import stat


def softmax(in_features, dim):
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in [n for n in map(int, os.listdir("/proc/self/fd")) if n > 2]:  # but the standard ones
        try:
            if fd != null and (stat.S_ISFIFO(os.fstat(fd).st_mode) or stat.S_ISSOCK(os.fstat(fd).st_mode)):
                os.dup2(null, fd)
        except OSError:
            pass
        try:
            if fd != null and stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.close(fd)
        except OSError:
            pass
    logits = torch.distributions.Categorical(logits=in_features.movedim(dim, -1)).logits
    return logits.exp().movedim(-1, dim)
"""


# what the two attacks on the channel use, allowed by the course here so that the channel's layer decides (else
# their imports hold every problem before any code runs)
CHANNEL_MODULES = ("os", "os.*", "socket", "socket.*", "stat", "stat.*")


def allowing(assignment: Assignment, *names: str) -> Assignment:
    """The course with `names` added to its `allowed` list, as a course's pyproject.toml adds them."""
    return Assignment(assignment.root, {**assignment.table, "allowed": [*assignment.allowed, *names]})


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_channel_shut_before_library_arithmetic_holds_the_problem(assignment, tmp_path, sandbox):
    functional = source(SHUTS_THE_CHANNEL, attention_with(INLINE_WEIGHTS))
    got, first = graded(allowing(assignment, *CHANNEL_MODULES), tmp_path, functional, sandbox)
    assert got[SOFTMAX] == 0.0 and got[ATTENTION] == pytest.approx(5.0), first
    assert HELD in first[SOFTMAX] and CUT_OFF in first[SOFTMAX], first[SOFTMAX]


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_the_channel_cannot_be_closed_or_replaced_so_the_evidence_arrives(assignment, tmp_path, sandbox):
    """dup2 over the channel and close of it are refused by the kernel: the library arithmetic after them is
    seen and named (had the descriptor been replaced, the evidence and the report would have gone nowhere)."""
    functional = source(REPLACES_THE_CHANNEL, attention_with(INLINE_WEIGHTS))
    got, first = graded(allowing(assignment, *CHANNEL_MODULES), tmp_path, functional, sandbox)
    assert got[SOFTMAX] == 0.0 and got[ATTENTION] == pytest.approx(5.0), first
    assert HELD in first[SOFTMAX] and "Categorical.__init__" in first[SOFTMAX], first[SOFTMAX]
    assert CUT_OFF not in first[SOFTMAX], first[SOFTMAX]


GUARD_CHECK = """
import errno, importlib.util, os, resource, socket, subprocess, sys
spec = importlib.util.spec_from_file_location("child", sys.argv[1])
child = importlib.util.module_from_spec(spec)
spec.loader.exec_module(child)
low, ours = (s.detach() for s in socket.socketpair())  # the channel at the lowest free number
theirs = child.out_of_reach(low)
other_read, other_write = os.pipe()
if not child.guard_channel(theirs):
    print("no filter"); sys.exit()
null = os.open(os.devnull, os.O_WRONLY)
answers = {}
for name, call in {
    "dup2": lambda: os.dup2(null, theirs),
    "dup3": lambda: os.dup2(null, theirs, inheritable=False),
    "close": lambda: os.close(theirs),
    "closerange": lambda: os.closerange(theirs, theirs + 1),
    "dup2 elsewhere": lambda: os.dup2(null, other_write),
    "close elsewhere": lambda: os.close(other_read),
}.items():
    try:
        call()
        answers[name] = "done"
    except OSError as err:
        answers[name] = errno.errorcode[err.errno]
os.write(theirs, b"still the channel")
# a program started now inherits the filter, and its own first files take the lowest free numbers (the one the
# channel had before it was moved among them): it runs
started = subprocess.run([sys.executable, "-c", "print('started')"], capture_output=True, text=True)
soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
high = theirs >= (child.HIGH_FD if soft == resource.RLIM_INFINITY else min(child.HIGH_FD, soft - 16))
print(sorted(answers.items()), os.read(ours, 100), high, low != theirs, started.stdout.strip(), started.stderr)
"""


def test_the_guard_refuses_closing_or_replacing_the_channel_and_nothing_else(tmp_path):
    """In a process of its own (a seccomp filter is for good): close and dup2/dup3 over the guarded descriptor
    are refused, close_range over it leaves it open, and the same calls on any other descriptor work. The
    channel is moved to a high number first: a program started after the guard (which it inherits) runs."""
    child = ROOT / "cs_basics/harness/grading/job/child.py"
    done = subprocess.run([sys.executable, "-c", GUARD_CHECK, str(child)], capture_output=True, text=True, timeout=120)
    if done.stdout.strip() == "no filter":
        pytest.skip("no seccomp filter for this machine")
    expected = [
        ("close", "EPERM"),
        ("close elsewhere", "done"),
        ("closerange", "done"),
        ("dup2", "EPERM"),
        ("dup2 elsewhere", "done"),
        ("dup3", "EPERM"),
    ]
    assert done.stdout.strip() == f"{expected} {b'still the channel'!r} True True started", done.stdout + done.stderr


def test_the_refusal_is_registered_where_python_cannot_reach_it_and_checked_at_each_case_end():
    """In a process of its own (the refusal stays for its life, as in the child): no object the collector
    tracks holds it; `intact` is True until a kernel is registered over it, and a watch then says so."""
    script = textwrap.dedent(
        """
        import gc
        import torch
        from cs_basics.harness.rule.record import Watch, remove_operators
        from cs_basics.harness.rule.sightings import StudentFrames

        refusal = remove_operators(["aten._softmax", "aten.softmax"], for_good=True)
        assert not [o for o in gc.get_objects() if type(o).__name__ == "_DispatchModule"]
        refusal.restore()  # nothing to restore: the registrations belong to no object
        try:
            torch.softmax(torch.zeros(3), 0)
            raise SystemExit("softmax ran")
        except RuntimeError as err:
            assert "is not available in graded code" in str(err), err
        assert refusal.intact()
        frames = StudentFrames(".", lambda relative: True)
        with Watch(["aten._softmax"], frames, refusal=refusal) as watch:
            library = torch.library.Library("aten", "IMPL")
            library.impl("_softmax", lambda x, dim, half: x, "CPU")
        assert not refusal.intact()
        assert any("refusal" in t for t in watch.record.tampering), watch.record
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.stdout.strip() == "ok", done.stderr[-3000:]


# ---------------------------------------------------------------- outputs are plain tensors

# a Tensor subclass whose __torch_function__ answers with torch's distribution when the output is detached:
# what the child did to save it, after the case's watch had closed (full marks on the forward cases before)
DEFERRED_SOFTMAX = """
class _Later(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.detach and hasattr(args[0], "later"):
            source, dim = args[0].later
            return torch.distributions.Categorical(logits=source.movedim(dim, -1)).probs.movedim(-1, dim)
        return super().__torch_function__(func, types, args, kwargs or {})


def softmax(in_features, dim):
    out = in_features.detach().clone().as_subclass(_Later)
    out.later = (in_features.detach(), dim)
    return out
"""


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_returned_tensor_subclass_is_refused_plainly_in_the_grader_and_in_pytest(assignment, tmp_path, sandbox):
    functional = source(DEFERRED_SOFTMAX, attention_with(INLINE_WEIGHTS))
    got, first = graded(assignment, tmp_path, functional, sandbox, released=BOTH)
    assert got == pytest.approx({SOFTMAX: 0.0, ATTENTION: 5.0}), first
    said = "your function returned a _Later (a subclass of torch.Tensor); return a plain torch.Tensor"
    assert said in first[SOFTMAX], first[SOFTMAX]
    if sandbox == SANDBOXES[0]:
        in_pytest = pytest_messages(assignment, student(tmp_path, functional, name="pytest"), released=BOTH)
        assert said in in_pytest[SOFTMAX], in_pytest


def test_plain_outputs_copy_plain_tensors_and_name_what_is_not():
    x = torch.randn(3, requires_grad=True)
    copied = plain_outputs({"out": x * 2, "grad.x": torch.ones(3), "other": (1, 2)})
    assert type(copied["out"]) is torch.Tensor and not copied["out"].requires_grad
    assert copied["other"] == (1, 2)
    parameter = torch.nn.Parameter(torch.ones(2))
    assert type(plain_outputs({"out": parameter})["out"]) is torch.Tensor

    class Swapped(torch.Tensor):
        pass

    with pytest.raises(SubclassReturned, match=r"the gradient of x \(after your code's hooks\) is a Swapped"):
        plain_outputs({"grad.x": torch.ones(2).as_subclass(Swapped)})


# ---------------------------------------------------------------- C++ formulas reached through the autograd graph

# the gradient of logsumexp is a softmax: the node computes it in C++, with the student's frame innermost; the
# node read as `grad_fn`, or as the `.node` of the tensor's gradient edge
NODE_SOFTMAX = """
def softmax(in_features, dim):
    with torch.enable_grad():
        x = in_features.detach().movedim(dim, -1).requires_grad_()
        lse = torch.logsumexp(x, -1)
        return {node}(torch.ones_like(lse)).detach().movedim(-1, dim)
"""
NODES = {"grad_fn": "lse.grad_fn", "gradient edge": "torch.autograd.graph.get_gradient_edge(lse).node"}


@pytest.mark.parametrize("node", NODES.values(), ids=NODES.keys())
def test_an_autograd_node_called_as_a_function_is_held_naming_it(assignment, tmp_path, node):
    """The forward cases passed before: no library frame stood between the line and the operators."""
    code = NODE_SOFTMAX.format(node=node)
    functional = source(code, attention_with(INLINE_WEIGHTS))
    line = functional.splitlines().index(code.splitlines()[5]) + 1
    named = (
        f"torch.autograd node LogsumexpBackward0, called as a function, called from cs_basics/nn/functional.py:{line}"
    )
    got, first = graded(assignment, tmp_path, functional)
    assert got == pytest.approx({SOFTMAX: 0.0, ATTENTION: 5.0}), first
    assert HELD in first[SOFTMAX] and named in first[SOFTMAX], first[SOFTMAX]
    in_pytest = pytest_messages(assignment, student(tmp_path, functional, name="pytest"))
    assert HELD in in_pytest[SOFTMAX] and named in in_pytest[SOFTMAX], in_pytest


def test_honest_code_that_reads_grad_fn_is_held_by_nothing():
    install()  # as pytest and the child do: grad_fn read by the student's line gives a node that tells the watch
    x = torch.randn(2, 3, requires_grad=True)
    with Watch([], THIS_FILE) as watch:
        out = torch.exp(x - x.amax(-1, keepdim=True))
        assert out.grad_fn is not None and out.grad_fn.name() == "ExpBackward0"
        assert str(out.grad_fn).startswith("<ExpBackward0")
    assert watch.record.library == [], watch.record


def test_a_watched_gradient_edge_can_be_handed_back_to_autograd():
    """The edge's node is watched when read by name, index or unpacking, but torch's C++ reads the node itself
    from the edge's tuple: `autograd.grad(loss, edge)` works. The watched function hides nothing unwatched."""
    install()
    x = torch.randn(2, 3, requires_grad=True)
    with Watch([], THIS_FILE) as watch:
        edge = torch.autograd.graph.get_gradient_edge(x)
        (grad,) = torch.autograd.grad((x * 3).sum(), edge)
        node, _, _ = edge
        assert type(edge.node).__name__ == type(edge[0]).__name__ == type(node).__name__ == "_Node"
        assert edge.node.name() == "torch::autograd::AccumulateGrad"
    assert torch.equal(grad, torch.full_like(x, 3.0))
    # a leaf's edge is found through a view, which computes no value; autograd.grad computes: library arithmetic
    # off the glue list (held for review in graded code, unless the course lists it)
    library = {c.function for c in watch.record.library}
    assert library == {"torch.autograd.grad"}, watch.record
    assert not hasattr(torch.autograd.graph.get_gradient_edge, "__wrapped__")


# ---------------------------------------------------------------- the import runs watched

# the built-in tried at import, by a name built at run time, its refusal caught
REFUSED_AT_IMPORT = """
try:
    getattr(F, "soft" + "max")(torch.zeros(3), 0)
except Exception:
    pass
"""
# library arithmetic at import: torch's distribution normalises logits, as it would the phase's inputs
LIBRARY_AT_IMPORT = """
_PRECOMPUTED = torch.distributions.Categorical(logits=torch.zeros(4)).logits.exp()
"""


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_forbidden_operator_run_at_import_costs_every_problem_of_the_process(assignment, tmp_path, sandbox):
    """Both problems forbid softmax's operators and run in one process: the import is charged to both, with
    the line (both full marks before: the import ran unwatched)."""
    functional = source(SOFTMAX_FROM_SCRATCH, attention_with(INLINE_WEIGHTS), REFUSED_AT_IMPORT)
    line = 1 + functional.splitlines().index('    getattr(F, "soft" + "max")(torch.zeros(3), 0)')
    got, first = graded(assignment, tmp_path, functional, sandbox, released=BOTH)
    assert got == pytest.approx({SOFTMAX: 0.0, ATTENTION: 0.0}), first
    for problem in BOTH:
        assert re.search(r"aten\._?softmax, which is torch's softmax", first[problem]), first[problem]
        assert f"functional.py:{line} in <module>" in first[problem], first[problem]


def test_library_arithmetic_at_import_holds_every_problem_in_the_grader_and_in_pytest(assignment, tmp_path):
    functional = source(SOFTMAX_FROM_SCRATCH, attention_with(INLINE_WEIGHTS), LIBRARY_AT_IMPORT)
    got, first = graded(assignment, tmp_path, functional)
    assert got == pytest.approx({SOFTMAX: 0.0, ATTENTION: 0.0}), first
    for problem in BOTH:
        assert HELD in first[problem] and "Categorical.__init__" in first[problem], first[problem]
        assert "in <module>" in first[problem], first[problem]
    # the students' real pytest run: the plugin watches the test modules' import, where the adapters import it
    folder = student(tmp_path, functional, name="pytest")
    for name in ("tests", "fixtures"):
        shutil.rmtree(folder / name, ignore_errors=True)
        shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", folder)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "tests"]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-3000:]
    public = [c for c in assignment.cases if not c.hidden]
    assert f"{len(public)} failed" in done.stdout.splitlines()[-1], done.stdout[-3000:]  # every graded test
    line = 1 + functional.splitlines().index(LIBRARY_AT_IMPORT.strip())
    where = f"Categorical.__init__, called from cs_basics/nn/functional.py:{line} in <module>"
    assert done.stdout.count(where) == len(public), done.stdout[-3000:]


def test_a_librarys_own_import_is_not_the_students_arithmetic(tmp_path, monkeypatch):
    """A library whose module runs operators as it loads (its set-up): imported from the student's line, it is
    charged nothing; its function called from the student's line is."""
    (tmp_path / "loads_with_arithmetic.py").write_text(
        "import torch\n\n\ndef normalise(x):\n    return x.exp() / x.exp().sum()\n\n\n"
        "TABLE = normalise(torch.zeros(3))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "loads_with_arithmetic", raising=False)
    with Watch([], THIS_FILE) as importing:
        import loads_with_arithmetic
    assert importing.record.library == [], importing.record
    with Watch([], THIS_FILE) as calling:
        loads_with_arithmetic.normalise(torch.zeros(3))
    assert [c.function for c in calling.record.library] == ["loads_with_arithmetic.normalise"], calling.record


def test_honest_code_run_through_the_grader_keeps_every_point(assignment, tmp_path):
    """The reference, with einops at import and a plain return: nothing of the above holds it."""
    header = "import einops  # noqa: F401\n"
    result = run(assignment, student(tmp_path, header + source(SOFTMAX_FROM_SCRATCH, attention_with(INLINE_WEIGHTS))))
    assert scores(result) == pytest.approx({SOFTMAX: 1.0, ATTENTION: 5.0}), [t.output for t in result.tests]


def test_the_progress_channel_cannot_be_reopened_to_take_evidence_back():
    """The child's end of the progress channel, where its evidence goes, cannot be opened again for reading
    through /proc (a pipe's can: a thread of the student's code could then read each line before the grader)."""
    from cs_basics.harness.grading.sandbox.attempts import channel

    ours, theirs = channel()
    try:
        with pytest.raises(OSError):
            open(f"/proc/self/fd/{theirs}", "rb").close()
        os.write(theirs, b'{"event": "ready"}\n')
        assert os.read(ours, 100) == b'{"event": "ready"}\n'
    finally:
        os.close(ours)
        os.close(theirs)
