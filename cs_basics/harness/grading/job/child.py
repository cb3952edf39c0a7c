"""A job's cases, run in the child the grading server (zygote.py) forked: the only place student code runs.

Loaded by path, never as part of `cs_basics` (the student's package has that name). By the time
`run_job` runs, the child is isolated and runs as the job's uid. It checks that this uid can read
the whole Python environment (else the staff must act, and no student code has run), has the grader's
own modules (its server loaded them: preload_grader) and arms every defence (the record, the
dispatcher's refusal, the seccomp filters, the channel's guard), says so ("armed"), and only then runs
the first byte of the submission: its package's `__init__.py`, the adapters and what they import, all
under the import's watch. For each case it computes
the outputs (and gradients) under the record of operators, writes them to `out/<case>.safetensors` and
reports progress as numbered JSON lines on the progress channel (rule/evidence.py). It decides nothing:
the grader checks every line as a protocol (protocol.py), compares and scores.
"""

import contextlib
import ctypes
import errno
import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file


def read_policy() -> types.ModuleType:
    """The sandbox's policy (sandbox/policy.py: plain data), by path: beside this file where the grader installed
    the job's files (server.install_tool), else in the sandbox's folder of the checkout this file is in."""
    here = Path(__file__).resolve().parent
    path = here / "policy.py" if (here / "policy.py").is_file() else here.parent / "sandbox" / "policy.py"
    spec = importlib.util.spec_from_file_location("_grading_policy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


POLICY = read_policy()  # what the job is refused and sees; the server's modules read it through this one

TRACEBACK_LIMIT = 4000  # characters of any text the child sends (a message, a traceback, a description)
LIST_LIMIT = 32  # items of any list it sends
LINE_LIMIT = 32 << 10  # bytes of one progress line: well under what the grader reads (Limits.progress_line_kb)


def cut(text: str, limit: int = TRACEBACK_LIMIT) -> str:
    """`text` with its middle cut out past `limit` characters (a student's message may be 300 MB)."""
    text = str.__str__(text)  # a plain copy of a str subclass, whose __len__ and slicing are the student's
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def bounded(value: object, limit: int) -> object:
    """An event with every string cut to `limit` characters and every list to LIST_LIMIT items."""
    if isinstance(value, str):
        return cut(value, limit)
    if isinstance(value, dict):
        return {str(k): bounded(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [bounded(v, limit) for v in value[:LIST_LIMIT]]
    return value


def error_text(err: BaseException, code: Path | None = None) -> tuple[str, str]:
    """("Type: message", traceback), each cut, calling the exception's __str__ once (one that never returns
    runs into the case's time limit) and never formatting the uncut message again. With the staged `code`,
    the traceback shows the student's frames first and folds the harness's."""
    try:
        message = f"{cut(str(type(err).__name__), 200)}: {cut(str(err))}"
    except Exception as failed:  # a __str__ that raises
        message = f"{type(err).__name__}: (its message could not be read: {type(failed).__name__})"
    try:
        where = GRADER["cs_basics.harness.diagnosis"].folded_traceback(err, [__file__], code, message=message)
    except Exception:  # the grader's modules not loaded yet, or a frame it cannot read
        frames = "".join(traceback.format_tb(err.__traceback__, limit=-6))
        where = f"Traceback (most recent call last):\n{frames}{message}"
    return message, cut(where, TRACEBACK_LIMIT)


class Reporter:
    """The process's reports (a case started, done, failed), each a line of its channel (rule/evidence.py's
    Channel), numbered with the evidence: the grader reads them all as one protocol."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel

    def send(self, **event: object) -> None:
        """One JSON line, cut to LINE_LIMIT bytes: no event of one case can exhaust the channel for the others."""
        for stream in (sys.stdout, sys.stderr):  # what the code printed reaches the grader before it may end us
            with contextlib.suppress(Exception):
                stream.flush()
        for limit in (TRACEBACK_LIMIT, 500, 64, 16):  # escapes may make a character 12 bytes long
            body = json.dumps(bounded(event, limit))
            if len(body) <= LINE_LIMIT - 64:  # the token and the number take the rest
                break
        else:  # fail closed: a case whose record could not be sent does not pass
            kind = "error" if event.get("event") in ("done", "error") else event.get("event")
            body = json.dumps({"event": kind, "case": event.get("case"), "message": "its report was too long"})
        self.channel.report(body)

    def failed(self, case_id: str, err: BaseException, record: object, code: Path | None = None) -> None:
        """A case's error; if even that cannot be put into words (MemoryError), a fixed message instead."""
        try:
            message, where = error_text(err, code)
            self.send(event="error", case=case_id, message=message, traceback=where, record=record.to_json())
        except BaseException as failed:
            with contextlib.suppress(BaseException):
                message = f"{type(failed).__name__} (your code's error could not be reported)"
                self.send(event="error", case=case_id, message=message, traceback="", record=record.to_json())


def describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device.type})"
    if isinstance(value, tuple | list):
        more = f", ... {len(value) - LIST_LIMIT} more" if len(value) > LIST_LIMIT else ""
        return cut(f"{type(value).__name__}({', '.join(describe(v) for v in value[:LIST_LIMIT])}{more})")
    return cut(type(value).__name__, 200)


def copied_outputs(outputs: dict, plain_outputs: Callable[[dict], dict]) -> tuple[dict, dict]:
    """(tensors on CPU, what each output is): every value copied or described now, while the case's watch is
    open, so that saving them runs none of the student's code (a Tensor subclass is refused: rule/outputs.py)."""
    tensors, meta = {}, {}
    for key, value in plain_outputs(outputs).items():
        if isinstance(value, torch.Tensor) and not value.is_meta:
            tensors[key] = value.to("cpu", copy=True).contiguous()
            meta[key] = {"kind": "tensor", "device": str(value.device)}
        else:
            sequence = type(value).__name__ if isinstance(value, tuple | list) else ""
            meta[key] = {"kind": "other", "describe": describe(value), "sequence": sequence}
    return tensors, meta


def save_outputs(copied: tuple[dict, dict], path: Path) -> None:
    """Tensors go to CPU (their dtype and device are recorded); anything else as a description."""
    tensors, meta = copied
    save_file(tensors, str(path), metadata={"outputs": json.dumps(meta)})


def unreachable(paths: list[str]) -> str | None:
    """The first folder on the way to an import path that this process may not enter or read."""
    for path in paths:
        for folder in [*reversed(Path(path).parents), Path(path)]:
            if not os.access(folder, os.X_OK) or (folder == Path(path) and not os.access(folder, os.R_OK)):
                mode = f"{folder.stat().st_mode & 0o777:o}" if os.access(folder.parent, os.X_OK) else "?"
                return (
                    f"the submission's process runs as uid {os.getuid()} and cannot enter {folder} (mode {mode}), "
                    f"on the way to the Python environment's {path}; it could not import what lies there. Without "
                    "namespaces the grader opens the environment's folders to it only where Landlock confines the "
                    "process to them, and this kernel offers no Landlock. Grade where namespaces are allowed or "
                    "bubblewrap runs (the grader then gives the process a view in which it can), or on a kernel "
                    "with Landlock (Linux 5.13 or later, enabled), or make the folders on that path "
                    "world-traversable (chmod o+x), or install Python elsewhere"
                )
    return None


def trusted_path(code: Path, repo: str) -> list[str]:
    """The staged code first; nothing of the staff repository (an editable install puts it on the path)."""
    keep = [p for p in sys.path if (p and not (p == repo or p.startswith(repo + os.sep))) or "site-packages" in p]
    return [str(code), *keep]


def check_origin(packages: list[str], code: Path) -> None:
    """The student's packages must come from the submission, not from an installed copy."""
    for name in packages:
        module = sys.modules.get(name) or importlib.import_module(name)
        where = list(getattr(module, "__path__", [])) or [getattr(module, "__file__", "") or ""]
        if not all(Path(p).resolve().is_relative_to(code.resolve()) for p in where):
            raise ImportError(f"the submission has no {name!r} package of its own (found {where})")


# the grader's own modules a child uses, loaded from the staged tooling before any file of the submission runs
# (load_grader): what the submission does later to `cs_basics.__path__` or `sys.modules` reaches none of them
GRADER_MODULES = (
    "cs_basics.harness.rule.tooling",
    "cs_basics.harness.rule.sightings",
    "cs_basics.harness.rule.record",
    "cs_basics.harness.rule.evidence",
    "cs_basics.harness.rule.outputs",
    "cs_basics.harness.diagnosis",
    "cs_basics.harness.cases",
)
GRADER: dict[str, types.ModuleType] = {}  # name -> the module, loaded once by load_grader
# what the server loads before its first job (preload_grader): the grader's modules and the test library the course's
# cases import, which each child would otherwise load again (about 10 ms of each phase's)
PRELOADED = (*GRADER_MODULES, "cs_basics.harness.kinds", "cs_basics.harness.problem")
PRELOAD_STATE = {"modules": 0}  # how many modules the server had when it last read the forbidden operators' lists


def staff_error(fd: int, err: BaseException | str) -> None:
    """A failure of the harness's own, on the raw channel: the grader believes it only before any process of
    the job has said it is armed (before that, no byte of the submission has run); after, it costs the problem."""
    message = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
    with contextlib.suppress(BaseException):
        os.write(fd, (json.dumps({"event": "staff_error", "message": cut(message)}) + "\n").encode())


def run_job(job: dict, progress: int, isolated: bool, import_paths: list[str], go: int | None = None) -> None:
    """Run the job's cases; `import_paths` are the folders on sys.path (as the server saw them). With `go`, each
    group's cases' inputs exist only once it said it has imported the submission (see wait_for_inputs)."""
    progress = out_of_reach(progress)
    try:
        run_groups(job, progress, isolated, import_paths, go)
    except BaseException as err:  # the harness's own, here, on the channel's new number (the caller's is closed,
        staff_error(progress, err)  # or another file's by now)


def preload_grader() -> None:
    """In the grading server as it starts, before any job (speed only): the modules of PRELOADED, from the copy of the
    grader's own that server.install_tool laid out beside this file (`grader/`, root's, mode 644) just before. A
    batch's template does it once for every copy: no server reads that folder again once a job has run. Each child
    forked after it has them (load_grader). On any failure, none: each child loads its own from its code, as
    without."""
    folder = Path(__file__).resolve().parent / "grader"
    if not folder.is_dir():  # not the server's copy of this file
        return
    packages = sorted(p.name for p in folder.iterdir() if p.is_dir())
    try:
        load_grader(folder, packages, PRELOADED)
    except Exception:  # the children load their own
        GRADER.clear()
        for name in [n for n in sys.modules if any(n == p or n.startswith(f"{p}.") for p in packages)]:
            del sys.modules[name]


def list_forbidden_operators(job: dict) -> None:
    """In the grading server, before it forks a job (speed only): torch's operators that each problem's patterns
    forbid (record.operator_overloads), listed where the server loaded the record (preload_grader), and listed again
    whenever it imported more since (a library may register operators). Each child forked after it has them; a
    list it lacks, the child makes."""
    record = GRADER.get("cs_basics.harness.rule.record")
    if record is None or PRELOAD_STATE["modules"] == len(sys.modules):
        return
    record._operator_overloads.cache_clear()
    for patterns in {tuple(p) for p in job["rule"]["forbidden_ops"].values() if p}:
        record.operator_overloads(patterns)
    PRELOAD_STATE["modules"] = len(sys.modules)


def load_grader(code: Path, packages: list[str], names: tuple[str, ...] = GRADER_MODULES) -> None:
    """The grader's modules (`names`), from the tooling staged in `code`, before any file of the submission runs.
    Each of `packages` (the student's `cs_basics`, which holds the tooling) is a shell first: its module, with its
    folder as its path, but without running its `__init__.py` (the student's: run_package_init runs it later,
    under the import's watch). Modules of the packages loaded before (in the server: preload_grader) stay, reached
    from the new shells; a package among them imports what it has not yet from `code`, the job's own copy (the
    server's folder need not be in the job's view)."""
    preloaded = [n for n in sys.modules if any(n.startswith(f"{p}.") for p in packages)]
    for name in packages:
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(code / name)]
        shell = types.ModuleType(name)
        shell.__spec__, shell.__path__ = spec, list(spec.submodule_search_locations)
        sys.modules[name] = shell
    for name in preloaded:
        module = sys.modules[name]
        if hasattr(module, "__path__"):
            module.__path__ = [str(code.joinpath(*name.split(".")))]
        parent, _, leaf = name.rpartition(".")
        setattr(sys.modules[parent], leaf, module)
    for name in names:
        GRADER[name] = importlib.import_module(name)


def run_package_init(name: str, code: Path) -> None:
    """The submission's own `__init__.py` of a package that holds the grader's tooling, run in the package's
    module as an import would have run it (none: a namespace package)."""
    spec = importlib.machinery.PathFinder.find_spec(name, [str(code)])
    if spec is None or spec.loader is None or not spec.has_location:
        return
    module = sys.modules[name]
    module.__spec__, module.__loader__, module.__file__ = spec, spec.loader, spec.origin
    module.__path__ = list(spec.submodule_search_locations or [])
    module.__cached__ = spec.cached
    spec.loader.exec_module(module)


def run_groups(job: dict, progress: int, isolated: bool, import_paths: list[str], go: int | None) -> None:
    job_dir = Path(job["dir"])
    code = job_dir / "code"
    problem = unreachable(import_paths)
    if problem:
        staff_error(progress, problem)
        return
    sys.path[:] = trusted_path(code, job["repo"])
    os.chdir(job_dir / "work")
    os.environ["HOME"] = str(job_dir / "work")
    load_grader(code, job.get("grader_packages", ["cs_basics"]))
    GRADER["cs_basics.harness.rule.record"].install()  # threads the submission starts are recorded too
    forbid_group_signals()
    guard_channel(progress)  # the evidence goes to the descriptor the grader reads, and only there
    forbid_exec()
    if job["limits"].get("threads"):
        torch.set_num_threads(job["limits"]["threads"])
    groups = cases_by_rule(job)
    if len(groups) == 1:
        run_group(job, progress, isolated, *groups[0], go=go)
        return
    for group in groups:  # problems that forbid different operators: each group in a process of its own, in turn
        pid = os.fork()
        if pid == 0:
            try:
                run_group(job, progress, isolated, *group, go=go)
            except BaseException as err:
                staff_error(progress, err)
            finally:
                os._exit(0)
        ended = os.waitpid(pid, 0)[1]
        if ended != 0:  # a case killed the interpreter: end as it did, and a fresh child takes the rest
            os._exit(os.WEXITSTATUS(ended) if os.WIFEXITED(ended) else 128 + os.WTERMSIG(ended))


def wait_for_inputs(go: int | None) -> None:
    """Until the grader says this group's inputs are written: it writes them only once the group said it is
    ready, so no code the submission runs at import finds an input (None: they were written before we began)."""
    if go is not None:
        with contextlib.suppress(OSError):
            os.read(go, 1)


def cases_by_rule(job: dict) -> list[tuple[list[str], list[str]]]:
    """The job's cases grouped by the operators their problems forbid, in order: [(patterns, case ids)]."""
    problems = job["problems"]
    groups: dict[tuple[str, ...], list[str]] = {}
    for case_id in job["cases"]:
        groups.setdefault(tuple(job["rule"]["forbidden_ops"].get(problems[case_id], [])), []).append(case_id)
    return [(list(patterns), cases) for patterns, cases in groups.items()]


def run_group(
    job: dict, progress: int, isolated: bool, forbidden_ops: list[str], case_ids: list[str], go: int | None = None
) -> None:
    """Arm, import the submission and run cases that forbid the same operators, which are not there from before
    the import on: torch's dispatcher raises for them, whatever the code does to the record. Every line this
    process sends is numbered on its own channel, which starts with "armed" and ends with "finished"."""
    record = GRADER["cs_basics.harness.rule.record"]
    plain_outputs = GRADER["cs_basics.harness.rule.outputs"].plain_outputs
    run_call = GRADER["cs_basics.harness.cases"].run_call
    rule = job["rule"]
    code = Path(job["dir"]) / "code"
    # the evidence leaves this process as it is seen, on the progress channel; the refusal belongs to no Python object
    channel = GRADER["cs_basics.harness.rule.evidence"].Channel(progress)
    report = Reporter(channel)
    refusal = record.remove_operators(forbidden_ops, channel, for_good=True)
    is_student = GRADER["cs_basics.harness.rule.tooling"].student_predicate(rule["student_code"], rule["excluded"])
    frames = GRADER["cs_basics.harness.rule.sightings"].StudentFrames(code, is_student)
    # the library functions that may run operators for the student's code; this file is the grader's
    library = record.LibraryCalls(frames, rule["glue"], harness=[Path(__file__).parent])

    def watch(charged: list[str], importing: bool = False) -> record.Watch:
        # the refusal is checked whole (about 1 ms) at the import's end and at the last case's: undone in between,
        # the check finds it there (a kernel registered over it brings no built-in back meanwhile)
        checked = refusal if importing or charged == case_ids[-1:] else None
        evidence = {"channel": channel, "charged": charged, "refusal": checked, "importing": importing}
        return record.Watch(forbidden_ops, frames, rule.get("record", True), library=library, **evidence)

    device = torch.device(job["device"])
    torch.zeros(1, device=device)  # the device's start-up (CUDA's takes seconds), the harness's before the import
    report.send(event="armed")  # from here on the submission's code runs: nothing it sends is the staff's word
    try:
        with watch(case_ids, importing=True):  # the import is watched, charged to every case of this process
            for package in job.get("grader_packages", ["cs_basics"]):
                run_package_init(package, code)
            adapters = importlib.import_module(job["adapters"])
            modules = [importlib.import_module(module) for module in job["case_modules"]]
        check_origin(job["student_packages"], code)
        cases = {c.id: c for module in modules for c in module.CASES}

        for name in job.get("warm", []):  # before the cases (a fork server's child has them: a Python spawned pays)
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
    except BaseException as err:  # a stub, a SyntaxError, an ImportError, SystemExit at import
        report.send(event="import_error", message=error_text(err, code)[1])
        return
    # after the import (a process it forks inherits the operators' replacement; none it starts by exec, refused
    # since the child was armed), before any case: from here on the kernel refuses every new process
    forbid_new_processes()
    report.send(event="ready", isolated=isolated)
    wait_for_inputs(go)
    for case_id in case_ids:
        report.send(event="start", case=case_id)
        case = cases[case_id]
        watched = watch([case_id])
        try:
            inputs = load_file(str(Path(job["dir"]) / "inputs" / f"{case_id}.safetensors"))
            with watched:
                outputs = copied_outputs(run_call(case, adapters, inputs, device), plain_outputs)
            save_outputs(outputs, Path(job["dir"]) / "out" / f"{case_id}.safetensors")
        except BaseException as err:  # KeyboardInterrupt and SystemExit too: the case failed, grading goes on
            report.failed(case_id, err, watched.record, code)  # the student's frames first
            continue
        report.send(event="done", case=case_id, record=watched.record.to_json())
    report.send(event="finished")


# ---------------------------------------------------------------- no new process, in the kernel

# seccomp: BPF over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_JSET_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
X32_BIT = 0x40000000  # x86_64's x32 system calls: their numbers have this bit
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
PR_SET_SECCOMP, SECCOMP_MODE_FILTER, CLONE_THREAD = 22, 2, 0x00010000
SYSCALLS = POLICY.PROCESS_CALLS  # arch: (AUDIT_ARCH, clone, clone3, the calls refused outright)


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def seccomp_program(machine: str) -> list[tuple[int, int, int, int]] | None:
    """Refuse (EPERM) every new process: fork, vfork, clone without CLONE_THREAD, execve, execveat; clone3
    (whose flags a filter cannot read) answers ENOSYS, and C libraries then fall back to clone, so threads
    still start. A system call of another ABI (32-bit, x32) is refused."""
    if machine not in SYSCALLS:
        return None
    arch, clone, clone3, refused = SYSCALLS[machine]
    checks = [(BPF_JGE_K, "deny", None, X32_BIT), *[(BPF_JEQ_K, "deny", None, nr) for nr in refused]]
    checks += [(BPF_JEQ_K, "enosys", None, clone3), (BPF_JEQ_K, None, "allow", clone)]
    body = [(BPF_LD_W_ABS, None, None, 4), (BPF_JEQ_K, None, "deny", arch), (BPF_LD_W_ABS, None, None, 0), *checks]
    body += [(BPF_LD_W_ABS, None, None, 16), (BPF_JSET_K, "allow", "deny", CLONE_THREAD)]  # clone's flags, low half
    returns = {"allow": RET_ALLOW, "deny": RET_ERRNO | errno.EPERM, "enosys": RET_ERRNO | errno.ENOSYS}
    at = {label: len(body) + i for i, label in enumerate(returns)}

    def offset(label: str | None, index: int) -> int:
        return 0 if label is None else at[label] - index - 1

    program = [(code, offset(jt, i), offset(jf, i), k) for i, (code, jt, jf, k) in enumerate(body)]
    return program + [(BPF_RET_K, 0, 0, value) for value in returns.values()]


EXEC_CALLS = POLICY.EXEC_CALLS  # execve and execveat


def exec_program(machine: str) -> list[tuple[int, int, int, int]] | None:
    """Refuse (EPERM) execve and execveat, and every system call of another ABI (32-bit, x32): no fresh program,
    which would start without the dispatcher's refusal (a fork inherits it, and is refused from the import's end)."""
    if machine not in SYSCALLS:
        return None
    arch, deny = SYSCALLS[machine][0], RET_ERRNO | errno.EPERM
    execve, execveat = EXEC_CALLS[machine]
    return [
        (BPF_LD_W_ABS, 0, 0, 4),
        (BPF_JEQ_K, 1, 0, arch),
        (BPF_RET_K, 0, 0, deny),
        (BPF_LD_W_ABS, 0, 0, 0),
        (BPF_JGE_K, 2, 0, X32_BIT),
        (BPF_JEQ_K, 1, 0, execve),
        (BPF_JEQ_K, 0, 1, execveat),
        (BPF_RET_K, 0, 0, deny),
        (BPF_RET_K, 0, 0, RET_ALLOW),
    ]


def forbid_exec() -> bool:
    """From here on (before any byte of the submission) no program starts: a Python started by the submission's
    `__init__.py` would compute without the dispatcher's refusal. False where the machine's ABI is not known here."""
    program = exec_program(os.uname().machine) if sys.platform.startswith("linux") else None
    return install_filter(program)


def forbid_new_processes() -> bool:
    """From here on this process may start threads but no process (the kernel refuses, for good: a seccomp
    filter cannot be removed, and is inherited). False where the machine's ABI is not known here, or it is
    not Linux (the record's audit hook still refuses them while a case runs)."""
    program = seccomp_program(os.uname().machine) if sys.platform.startswith("linux") else None  # Linux's alone
    return install_filter(program)


KILL_CALLS = POLICY.KILL_CALLS  # kill(2)


def group_signal_program(machine: str) -> list[tuple[int, int, int, int]] | None:
    """Refuse (EPERM) kill(2) of a process group: pid 0 (the caller's own group) or below -1. In the job's PID
    namespace the student's parent lies outside, so os.getppid() is 0 there, and kill(getppid(), SIGSTOP) would
    stop the student's own process: refused, as signalling the grader's processes always was."""
    if machine not in SYSCALLS:
        return None
    allow, deny = RET_ALLOW, RET_ERRNO | errno.EPERM
    return [
        (BPF_LD_W_ABS, 0, 0, 4),
        (BPF_JEQ_K, 0, 6, SYSCALLS[machine][0]),  # another ABI: the filter after the import refuses it
        (BPF_LD_W_ABS, 0, 0, 0),
        (BPF_JEQ_K, 0, 4, KILL_CALLS[machine]),
        (BPF_LD_W_ABS, 0, 0, 16),  # the pid, low half (an int)
        (BPF_JEQ_K, 3, 0, 0),
        (BPF_JEQ_K, 1, 0, 0xFFFFFFFF),  # -1: every process this uid may signal (its own, alone)
        (BPF_JGE_K, 1, 0, 0x80000000),  # below -1: a process group
        (BPF_RET_K, 0, 0, allow),
        (BPF_RET_K, 0, 0, deny),
    ]


def forbid_group_signals() -> bool:
    """From here on this process and what it starts may signal no process group (see group_signal_program)."""
    program = group_signal_program(os.uname().machine) if sys.platform.startswith("linux") else None
    return install_filter(program)


DESCRIPTOR_CALLS = POLICY.DESCRIPTOR_CALLS  # (close, dup2 (None: aarch64 has only dup3), dup3, close_range)
BPF_ALU_AND_K, BPF_JGT_K = 0x54, 0x25


def channel_guard_program(machine: str, fd: int) -> list[tuple[int, int, int, int]] | None:
    """Refuse (EPERM) close(fd), dup2(_, fd) and dup3(_, fd, _), and answer close_range over fd with ENOSYS
    (C libraries and CPython then close the others one by one): the evidence channel stays the descriptor the
    grader reads, so no line can be sent elsewhere and no report forged on a descriptor put in its place (x32's
    numbers are x86_64's with X32_BIT set: masked off)."""
    if machine not in SYSCALLS:
        return None
    close, dup2, dup3, close_range = DESCRIPTOR_CALLS[machine]
    allow, deny, enosys = RET_ALLOW, RET_ERRNO | errno.EPERM, RET_ERRNO | errno.ENOSYS
    first_arg, second_arg = 16, 24  # args[0] and args[1], low halves (unsigned ints)
    calls = [(BPF_JEQ_K, "first", None, close), (BPF_JEQ_K, "second", None, dup3)]
    calls += [(BPF_JEQ_K, "second", None, dup2)] if dup2 is not None else []
    # another ABI (32-bit) passes here, as in group_signal_program: the filter after the import refuses it
    body = [(BPF_LD_W_ABS, None, None, 4), (BPF_JEQ_K, None, "allow", SYSCALLS[machine][0])]
    body += [(BPF_LD_W_ABS, None, None, 0), (BPF_ALU_AND_K, None, None, ~X32_BIT & 0xFFFFFFFF), *calls]
    body += [(BPF_JEQ_K, None, "allow", close_range)]
    blocks = {
        "range": [(BPF_LD_W_ABS, None, None, first_arg), (BPF_JGT_K, "allow", None, fd)],
        "range_last": [(BPF_LD_W_ABS, None, None, second_arg), (BPF_JGE_K, "enosys", "allow", fd)],
        "first": [(BPF_LD_W_ABS, None, None, first_arg), (BPF_JEQ_K, "deny", "allow", fd)],
        "second": [(BPF_LD_W_ABS, None, None, second_arg), (BPF_JEQ_K, "deny", "allow", fd)],
    }
    at = {}
    for label, block in blocks.items():
        at[label] = len(body)
        body += block
    returns = {"allow": allow, "deny": deny, "enosys": enosys}
    for i, label in enumerate(returns):
        at[label] = len(body) + i

    def offset(label: str | None, index: int) -> int:
        return 0 if label is None else at[label] - index - 1

    program = [(code, offset(jt, i), offset(jf, i), k) for i, (code, jt, jf, k) in enumerate(body)]
    return program + [(BPF_RET_K, 0, 0, value) for value in returns.values()]


HIGH_FD = 960  # under select()'s 1024, over the numbers a program's own files take


def out_of_reach(fd: int) -> int:
    """The channel's descriptor moved to a high number (close-on-exec), where guard_channel will keep it. The
    guard is a seccomp filter, which every program this process starts inherits across exec; a program started
    at import reuses the lowest free numbers for its own files (the dynamic loader's first open: "cannot close
    file descriptor" was what a Python started at import said), and at a high number none of them is refused.
    Where the limit on open files is lower, as high as it allows; elsewhere than Linux, unchanged."""
    try:
        import fcntl
        import resource
    except ImportError:  # Windows
        return fd
    if not sys.platform.startswith("linux"):
        return fd
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    lowest = HIGH_FD if soft == resource.RLIM_INFINITY else min(HIGH_FD, soft - 16)
    if lowest <= fd:
        return fd
    try:
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, lowest)
    except OSError:
        return fd
    os.close(fd)
    return moved


def guard_channel(fd: int) -> bool:
    """From here on this process and what it forks can neither close `fd` nor put another file in its place."""
    program = channel_guard_program(os.uname().machine, fd) if sys.platform.startswith("linux") else None
    return install_filter(program)


def install_filter(program: list[tuple[int, int, int, int]] | None) -> bool:
    """Install a seccomp filter on this process, for good; False where there is none for this machine."""
    if program is None:
        return False
    filters = (SockFilter * len(program))(*[SockFilter(*f) for f in program])
    prog = SockFprog(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, which seccomp needs without CAP_SYS_ADMIN
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {os.strerror(err)}")
    return True
