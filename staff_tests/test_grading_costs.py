"""What one grading and a batch cost, and what they no longer pay for (issue 31)."""

from __future__ import annotations

import marshal
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import cs_basics.harness.grading.sandbox.worker as worker_module
from cs_basics.harness.grading.pipeline import staging
from cs_basics.harness.grading.pipeline.grade import grade, overlay_for, stage
from cs_basics.harness.grading.pipeline.staging import Overlay, copy_overlaid, hidden_case_sources
from cs_basics.harness.grading.sandbox import litter
from cs_basics.harness.grading.sandbox.leases import kill_uid, lease_uid, processes_of
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.worker import Overlays, Worker, named_libraries

from .submissions import ROOT, run, scores, submission, wrap_attention

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="killing by uid needs a root grader")

ZYGOTE = ROOT / "cs_basics" / "harness" / "grading" / "job" / "zygote.py"

WARM_UP = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("zygote", sys.argv[1])
zygote = importlib.util.module_from_spec(spec)
spec.loader.exec_module(zygote)
zygote.warm_up()
print(sorted(name for name in ("torch", "einops", "torch._dynamo", "einx") if name in sys.modules))
"""


def test_the_grading_server_starts_without_torch_dynamo_or_einx():
    """einx's torch backend imports torch._dynamo, as long to import as torch: the server loads it only for a
    submission that names einx (staff_tests/students/honest_einx is graded with it)."""
    done = subprocess.run([sys.executable, "-I", "-c", WARM_UP, str(ZYGOTE)], capture_output=True, text=True)
    assert done.stdout.strip() == "['einops', 'torch']", done.stdout + done.stderr


# the warm-up with every road to CUDA's driver closed: a backward pass (the autograd engine counts the GPUs on its
# first, starting the driver and a thread per GPU), and torch.cuda's own queries
NO_CUDA_BEFORE_FORK = """
import importlib.util, os, sys
import torch

def refused(name):
    def call(*args, **kwargs):
        raise SystemExit(f"the server called {name} before its forks")
    return call

torch.Tensor.backward = refused("Tensor.backward")
torch.autograd.backward = refused("torch.autograd.backward")
torch.autograd.grad = refused("torch.autograd.grad")
for name in ("is_available", "device_count", "init", "_lazy_init", "current_device"):
    setattr(torch.cuda, name, refused(f"torch.cuda.{name}"))
torch._C._cuda_getDeviceCount = refused("torch._C._cuda_getDeviceCount")
threads = lambda: len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1
before = threads()
spec = importlib.util.spec_from_file_location("zygote", sys.argv[1])
zygote = importlib.util.module_from_spec(spec)
spec.loader.exec_module(zygote)
zygote.warm_up()
print("threads started", threads() - before)
"""


def test_the_grading_server_never_starts_cuda_before_it_forks():
    """A child forked from a process that started CUDA's driver cannot use CUDA: on an H100 every case of
    `cs-basics grade --device cuda` was lost to "CUDA error: initialization error", the warm-up's backward
    pass having counted the GPUs in the server. The warm-up runs no backward pass, asks torch.cuda nothing,
    and starts no thread (importing torch starts its own)."""
    command = [sys.executable, "-I", "-c", NO_CUDA_BEFORE_FORK, str(ZYGOTE)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "threads started 0", done.stdout + done.stderr


def test_the_server_loads_einx_and_torch_dynamo_only_for_code_that_names_them(tmp_path):
    uses = tmp_path / "uses.py"
    uses.write_text("import einx\n")
    checkpoints = tmp_path / "checkpoints.py"  # torch.utils.checkpoint imports torch._dynamo at its first call
    checkpoints.write_text("from torch.utils.checkpoint import checkpoint\n")
    plain = tmp_path / "plain.py"
    plain.write_text("import torch\n")
    assert named_libraries([plain, uses]) == ["einx"]
    assert named_libraries([checkpoints, uses]) == ["einx", "torch._dynamo"]
    assert named_libraries([plain]) == []


def test_the_child_runs_with_the_threads_the_limits_give(assignment, tmp_path):
    """A batch gives each worker's child its share of the cores (two children of two threads on two cores
    spin in OpenMP's barriers); the child sets it before the submission's code runs."""
    said = wrap_attention('raise RuntimeError(f"threads={torch.get_num_threads()}")')
    result = run(assignment, submission(tmp_path, said), threads=1)
    outputs = [t.output for t in result.tests if t.case.problem == "scaled_dot_product_attention"]
    assert outputs and all("threads=1" in output for output in outputs), outputs[:2]


SERVER_FIRST = """
import sys
from cs_basics import cli
from cs_basics.harness.grading.sandbox.server import Server

start = Server.__init__
torch_then = []


def noted(self, *args, **kwargs):
    torch_then.append("torch" in sys.modules)
    start(self, *args, **kwargs)


Server.__init__ = noted
status = cli.main(["grade", "--quiet", "--results", sys.argv[1]])
print("status", status, "torch imported when the server started:", torch_then)
"""


def test_one_grading_starts_the_server_before_it_imports_torch(tmp_path):
    """The grading server imports torch as the grader does: started first, the two imports run side by side."""
    script = [sys.executable, "-c", SERVER_FIRST, str(tmp_path / "results.json")]
    done = subprocess.run(script, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert "status 0 torch imported when the server started: [False]" in done.stdout, done.stdout + done.stderr[-3000:]


def test_cs_basics_grade_exits_with_its_status_when_its_stdout_is_closed(tmp_path):
    """`cs-basics grade` ends with os._exit after flushing its streams (cli.exit_now): a stdout closed before it
    started (sys.stdout None) still gives the command's own status, not a traceback's 1."""
    command = '"$0" -m cs_basics.cli grade --submission "$1" >&-'
    missing = str(tmp_path / "no such folder")
    done = subprocess.run(["bash", "-c", command, sys.executable, missing], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "no such file or folder" in done.stderr, done.stderr[-3000:]


def test_output_lost_at_exit_is_a_failed_exit(tmp_path):
    """Output that cannot be written at the end (a pipe whose reader left) fails the command, with the status
    the interpreter's own teardown gives (120), and without a traceback."""
    read, write = os.pipe()
    os.close(read)
    script = "from cs_basics.cli import exit_now\nprint('graded')\nexit_now(0)"
    with os.fdopen(write, "wb") as stdout:
        environment = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # the output waits for exit
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, env=environment, stdout=stdout, stderr=subprocess.PIPE
        )
    assert done.returncode == 120 and b"Traceback" not in done.stderr, done.stderr[-3000:]


@needs_root
def test_killing_by_uid_never_forks_the_grader_where_setpriv_is_there(monkeypatch):
    """setpriv takes the uid, so Python's child does not: subprocess may use vfork instead of copying the
    grader (torch and all), five to ten times as long. The processes are killed all the same."""
    missing = [program for program in ("setpriv", "kill") if shutil.which(program) is None]
    if missing:  # kill_uid runs setpriv only with a `kill` program to run (debian:bookworm-slim has none)
        pytest.skip(f"no {' and no '.join(missing)} here: kill_uid takes the uid in a fork of the grader")
    uid, lease = lease_uid()  # no other grader's jobs run as it meanwhile
    sleeper = subprocess.Popen(["sleep", "600"], user=uid, group=uid, extra_groups=[])
    calls = []
    run_it = subprocess.run

    def noted(*args, **kwargs):
        calls.append(kwargs)
        return run_it(*args, **kwargs)

    monkeypatch.setattr(subprocess, "run", noted)
    try:
        assert kill_uid(uid)
        assert sleeper.wait(timeout=60) == -9 and not processes_of(uid)  # a zombie by now: at once
    finally:
        sleeper.kill()
        lease.close()
    assert calls and not any("user" in kwargs for kwargs in calls)


@needs_root
def test_a_submission_ends_the_jobs_processes_once_after_each_phase(assignment, tmp_path, monkeypatch):
    """After the public phase (before any hidden input exists) and after the hidden one (before outputs are
    read); cleaning up, none is left and no job started since, so no third time."""
    kills = []
    kill = kill_uid
    monkeypatch.setattr(worker_module, "kill_uid", lambda uid: kills.append(time.monotonic()) or kill(uid))
    with Worker(None, Limits()) as worker:
        result = grade(assignment, submission(tmp_path), torch.device("cpu"), worker=worker)
        assert sum(scores(result).values()) == pytest.approx(6)
        assert len(kills) == 2


FIRST_PROCESS = """
import os as _os

if _os.getpid() != 1 and _os.path.isfile("/proc/1/status"):  # in the job's own PID namespace
    _first = open("/proc/1/status").read().split("\\n")[0].split()[-1]
    if _first.startswith("python"):
        raise RuntimeError(f"the namespace's first process is {_first}: a third copy of the grading server")
"""


@needs_root
def test_the_namespaces_first_process_is_no_copy_of_the_grading_server(assignment, tmp_path):
    """The namespace's first process is a small program (zygote.start_keeper), not a fork of the server, whose
    torch-sized page tables every fork copies and every end frees: the student's process is the only copy (test_sandbox:
    it is the server's own child)."""
    # os.getpid is off the allowlist: both problems released, as staff would after reading it, so that the
    # probe's import (which raises where the namespace's first process is a Python) decides, not the rule's hold
    with Worker(None, Limits(released=tuple(assignment.problems))) as worker:
        if not worker.isolated:
            pytest.skip("the kernel refuses namespaces here: a phase is one process")
        result = grade(assignment, submission(tmp_path, FIRST_PROCESS), torch.device("cpu"), worker=worker)
    assert sum(scores(result).values()) == pytest.approx(6), result.output


COMPILED = """
import builtins, sys
compiled = []
real = builtins.compile


def noted(source, filename, *args, **kwargs):
    compiled.append(str(filename))
    return real(source, filename, *args, **kwargs)


builtins.compile = noted
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import cs_basics.harness.rule.record, cs_basics.harness.cases, tests.cases, tests.adapters, hidden.cases
print("compiled:", sorted(name.removeprefix(sys.argv[1] + "/") for name in compiled if name.startswith(sys.argv[1])))
"""


def test_the_child_imports_the_staged_harness_and_cases_without_compiling_them(assignment, tmp_path):
    """They come with their bytecode (the grader's own files and the course's, compiled once per grading
    process): only the submission's own files are compiled in the child, in each phase's."""
    code = tmp_path / "code"
    stage(assignment, submission(tmp_path), code)
    assert not (code / assignment.hidden_dir.name).exists()  # the public phase's code holds no hidden case
    copy_overlaid(assignment, code)  # the hidden phase's, which does
    done = subprocess.run([sys.executable, "-I", "-c", COMPILED, str(code)], capture_output=True, text=True)
    submissions_own = ["cs_basics/__init__.py", "cs_basics/nn/__init__.py", "cs_basics/nn/functional.py"]
    assert done.stdout.strip() == f"compiled: {submissions_own}", done.stdout + done.stderr[-2000:]


def test_a_staged_files_bytecode_is_the_graders_own_while_it_is_the_files_and_compiled_again_once_stale(tmp_path):
    """The overlay's bytecode (about 100 files, on the way to a course's first job): the code of the grader's own
    bytecode where its import wrote one that is still the file's (its time and size, as the import system checks),
    else compiled; either way hash-based and unchecked, and it runs as the file does."""
    import importlib.util
    import py_compile

    source = tmp_path / "module.py"
    source.write_text("ANSWER = 41 + 1\n")
    cached = Path(py_compile.compile(str(source), doraise=True))
    planted = cached.read_bytes()[:16] + marshal.dumps(compile("ANSWER = 'cached'\n", str(source), "exec"))
    cached.write_bytes(planted)  # a stand-in the test can tell apart: the grader's own bytecode is trusted as is
    stat = source.stat()
    made = staging.bytecode(source, stat.st_mtime_ns, stat.st_size)
    assert made[:4] == importlib.util.MAGIC_NUMBER and made[4:8] == (1).to_bytes(4, "little")  # unchecked hash
    assert made[8:16] == importlib.util.source_hash(source.read_bytes())
    assert made[16:] == planted[16:]
    source.write_text("ANSWER = 40 + 4  # changed\n")  # a size of its own: the cached bytecode is stale
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    stat = source.stat()
    fresh = staging.bytecode(source, stat.st_mtime_ns, stat.st_size)
    namespace: dict = {}
    exec(marshal.loads(fresh[16:]), namespace)
    assert namespace["ANSWER"] == 44
    cached.write_bytes(planted)  # the stand-in again, for the file as it was: the same size, another time
    source.write_text("ANSWER = 41 + 2\n")
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    stat = source.stat()
    exec(marshal.loads(staging.bytecode(source, stat.st_mtime_ns, stat.st_size)[16:]), namespace)
    assert namespace["ANSWER"] == 43


def test_the_hidden_phase_stages_the_hidden_cases_module_and_nothing_else_of_the_staffs_folder(assignment, tmp_path):
    """The job's code runs beside what is staged: of the hidden folder, only the cases' module and what it imports
    (here the package's `__init__.py`); the staff's answers, the oracles and the hidden pytest files stay out."""
    code = tmp_path / "code"
    copy_overlaid(assignment, code)
    hidden = assignment.hidden_dir.name
    staged = sorted(p.relative_to(code).as_posix() for p in (code / hidden).rglob("*.py"))
    assert staged == [f"{hidden}/__init__.py", f"{hidden}/cases.py"]
    assert (assignment.hidden_dir / "answers.py").is_file()  # there to leave out: the test can fail
    done = subprocess.run([sys.executable, "-I", "-c", COMPILED, str(code)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]  # the hidden cases import from what is staged


def test_hidden_cases_that_import_a_module_of_their_own_folder_have_it_staged(tmp_path):
    """Absolute and relative imports within the hidden package are followed, transitively."""
    package = tmp_path / "hidden"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "cases.py").write_text("from hidden.shapes import SHAPES\nfrom . import seeds\n")
    (package / "shapes.py").write_text("from .sizes import SIZES\nSHAPES = SIZES\n")
    (package / "sizes.py").write_text("SIZES = [1]\n")
    (package / "seeds.py").write_text("SEED = 0\n")
    (package / "answers.py").write_text("SOLUTION = 1\n")
    found = [p.name for p in hidden_case_sources(package, package / "cases.py")]
    assert found == ["__init__.py", "cases.py", "seeds.py", "shapes.py", "sizes.py"]


def test_the_workers_of_a_batch_make_the_courses_overlay_once(assignment, tmp_path):
    """The files laid over each job's code are the course's, not a worker's: workers that share an `Overlays` make
    them once (the others wait for it); a worker whose jobs have no uid of their own copies them, never links."""
    made = []

    def make(folder):
        time.sleep(0.05)  # the others arrive while it is being made
        made.append(folder)
        return Overlay.make(assignment, folder, link=True)

    shared = Overlays(tmp_path)
    threads = [threading.Thread(target=shared.get, args=(assignment.root, make)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert made == [tmp_path / "overlays" / "0"] and shared[assignment.root].link
    without_uid = SimpleNamespace(uid=None, overlays=shared)
    assert not overlay_for(assignment, without_uid).link and shared[assignment.root].link


@needs_root
def test_reaping_a_jobs_orphans_reads_this_processes_children_not_every_process(monkeypatch):
    """An orphan the grader adopted is reaped by its uid, found among this process's own children: the rest of the
    machine's processes are not read (a busy machine has hundreds)."""
    uid, lease = lease_uid()
    try:
        pid = os.fork()
        if pid == 0:
            os.setuid(uid)  # as a job's process
            os._exit(0)
        time.sleep(0.2)
        assert str(pid) in litter.own_children()
        read = []
        real = Path.read_text

        def counted(path, *args, **kwargs):
            read.append(path)
            return real(path, *args, **kwargs)

        monkeypatch.setattr(Path, "read_text", counted)
        assert litter.reap_orphans(uid) == 1
        assert len([p for p in read if p.name == "stat"]) <= len(litter.own_children() or []) + 1
    finally:
        lease.close()
