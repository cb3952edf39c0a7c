"""A batch's workers: one grading server imports torch, every worker's server a copy of it (Worker.share); their
work folders in memory where the machine has room (folderlock.work_parent); each worker's jobs kept out of the
others' job folders (Worker.hand_over)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

import cs_basics.harness.grading.sandbox.folderlock as folderlock
from cs_basics.harness.grading.pipeline.grade import grade
from cs_basics.harness.grading.sandbox.folderlock import MEMORY_FOLDER, WORK_PREFIX, left_work_folders, work_parent
from cs_basics.harness.grading.sandbox.jobcgroup import JobCgroup
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.litter import remove_tree
from cs_basics.harness.grading.sandbox.server import ClonedServer
from cs_basics.harness.grading.sandbox.worker import Worker

from .submissions import SPY, outputs_of, scores, softmax_fails_if, submission
from .test_sandbox import FULL, RELEASED, SANDBOXES, is_server, needs_root, parent_of, processes_under

LIMITS = Limits(case_seconds=20)
SPYING = Limits(case_seconds=20, released=RELEASED)  # a spy lists a folder, reads sys.modules: released from holds


def servers_under(pid: int) -> dict[int, int | None]:
    """The grading servers (zygote.py) that are `pid` or below it, each with its parent."""
    return {p: parent_of(p) for p in {pid, *processes_under(pid)} if is_server(p)}


# ---------------------------------------------------------------- one import of torch a batch


@needs_root
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_batchs_workers_grade_in_copies_of_one_server_that_runs_no_job(assignment, tmp_path, sandbox):
    """The first worker's server is the batch's template: both workers' servers are copies of it, forked once it
    imported torch (the second worker's started its own, a second import: 1.4 CPU s here, and a second worker
    idle until it was done), and both grade in full in their copies."""
    with Worker(sandbox, LIMITS).start() as first, Worker(sandbox, LIMITS, beside=first.share()) as second:
        for worker in (first, second):
            assert isinstance(worker.ensure_server(), ClonedServer)
        started = first.template.process.pid
        servers = servers_under(started)
        template = [pid for pid, parent in servers.items() if parent not in servers]
        assert len(template) == 1 and len(servers) == 3, servers  # the template and a copy for each worker
        assert all(parent == template[0] for pid, parent in servers.items() if pid != template[0]), servers
        assert second.root.is_relative_to(first.root)  # in the template's view (bubblewrap binds first.root)
        for worker in (first, second):
            result = grade(assignment, submission(tmp_path, name=f"s{id(worker)}"), torch.device("cpu"), worker=worker)
            assert scores(result) == pytest.approx(FULL), outputs_of(result)[:2]
        assert servers_under(started) == servers  # no server of its own was started since


@needs_root
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_worker_whose_copy_ended_with_its_template_grades_in_a_server_of_its_own(assignment, tmp_path, sandbox):
    """The template gone (its copies end with it), the next job's worker starts a server of its own, not a
    copy of a server that has ended, and grades in full."""
    with Worker(sandbox, LIMITS).start() as first, Worker(sandbox, LIMITS, beside=first.share()) as second:
        copy = second.ensure_server()
        first.template.close()
        while not copy.ended():  # it ends with its template, a moment later (pytest-timeout bounds the wait)
            time.sleep(0.05)
        result = grade(assignment, submission(tmp_path), torch.device("cpu"), worker=second)
        assert copy.ended() and not isinstance(second.server, ClonedServer)
    assert scores(result) == pytest.approx(FULL), outputs_of(result)[:2]


@needs_root
def test_a_sweep_of_one_workers_processes_leaves_the_other_workers_server(assignment, tmp_path):
    """Where a grader is not root, a worker ends its jobs' processes through its server (a sweep of every process
    below it): the template's copies are below the template, and a sweep there must not end them."""
    with Worker("fallback", LIMITS).start() as first, Worker("fallback", LIMITS, beside=first.share()) as second:
        copy = second.ensure_server()
        first.template.ready().send({"op": "sweep", "id": 1})
        assert first.template.receive(30) == {"swept": 1, "left": 0}
        assert not copy.ended()
        result = grade(assignment, submission(tmp_path), torch.device("cpu"), worker=second)
        assert second.server is copy
    assert scores(result) == pytest.approx(FULL), outputs_of(result)[:2]


# ---------------------------------------------------------------- each worker's jobs apart

HOLDS_A_CGROUP = """
import os as _os
_found = []
for _fd in _os.listdir("/proc/self/fd"):
    try:
        _target = _os.readlink("/proc/self/fd/" + _fd)
    except OSError:
        continue
    if "cgroup.procs" in _target:
        _found.append(_target)
"""


@needs_root
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_no_job_of_a_batch_holds_a_descriptor_of_a_job_cgroup(assignment, tmp_path, sandbox):
    """The template is started with the first worker's job cgroup (its `cgroup.procs`, opened by root for writing);
    a copy that kept it open passed it to every job it forked, and a job could write itself (or, without a PID
    namespace, the template) into another worker's cgroup, out of its own limit. No job holds one."""
    with Worker(sandbox, SPYING).start() as first, Worker(sandbox, SPYING, beside=first.share()) as second:
        if not isinstance(first.cgroup, JobCgroup):
            pytest.skip(f"no job cgroup here: {first.cgroup}")
        for worker in (first, second):
            spy = submission(tmp_path, HOLDS_A_CGROUP + softmax_fails_if("_found"), name=f"spy{id(worker)}")
            result = grade(assignment, spy, torch.device("cpu"), worker=worker)
            assert scores(result) == pytest.approx(FULL), outputs_of(result)[:2]


@pytest.fixture
def staff_temporary(monkeypatch) -> Path:
    """A temporary folder the staff named ($TMPDIR) outside /tmp, /var/tmp and /dev/shm (which each job's view
    replaces): the work folders of every worker are then in the jobs' view."""
    if not os.access("/srv", os.W_OK):
        pytest.skip("needs /srv, writable: a folder outside the ones each job's view replaces")
    top = Path(tempfile.mkdtemp(prefix="cs-basics-test-tmpdir-", dir="/srv"))
    top.chmod(0o1777)
    monkeypatch.setenv("TMPDIR", str(top))
    monkeypatch.setattr(tempfile, "tempdir", str(top))
    yield top
    shutil.rmtree(top, ignore_errors=True)


@needs_root
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_workers_job_reads_nothing_of_the_other_workers_job_folders(assignment, tmp_path, staff_temporary, sandbox):
    """Where the work folders are in the jobs' view (a $TMPDIR outside the folders a job's view replaces), a job of
    one worker finds neither the folder of the other worker's job (its code, its inputs: another student's, and
    hidden ones) nor the files in it, either way round: the job's folder is open only to its own worker's uid,
    by its group. Before, it was world-readable, at a path the job could guess from its own: the fallback's job
    read both files (bubblewrap's view hid them: the folders bwrap makes on the way to the work folder are root's
    alone, so the job's view replaces them, keeping only its own job's folder)."""
    with Worker(sandbox, SPYING).start() as first, Worker(sandbox, SPYING, beside=first.share()) as second:
        assert first.root.is_relative_to(staff_temporary)
        for reader, owner in ((first, second), (second, first)):
            theirs = owner.new_job_dir()
            (theirs / "code" / "functional.py").write_text("another student's code")
            (theirs / "inputs" / "hidden.safetensors").write_text("a hidden case's input")
            owner.hand_over(theirs)
            paths = [str(theirs / "code" / "functional.py"), str(theirs / "inputs" / "hidden.safetensors")]
            listing = f"""
try:
    import os as _os
    _found += _os.listdir({str(theirs)!r})
except OSError:
    pass
"""
            spy = submission(tmp_path, SPY.format(paths=paths) + listing + softmax_fails_if("_found"), name="spy")
            result = grade(assignment, spy, torch.device("cpu"), worker=reader)
            assert scores(result) == pytest.approx(FULL), outputs_of(result)[:2]
            shutil.rmtree(spy)


# ---------------------------------------------------------------- work folders in memory


def test_work_folders_go_to_dev_shm_unless_the_staff_name_a_temporary_folder_or_it_lacks_room(monkeypatch):
    """Each phase of each job makes and removes about 70 files in the work folder: in memory (/dev/shm, a tmpfs)
    where this user may write it and it has MEMORY_FOLDER_FREE_MB free; in the temporary folder the staff named
    ($TMPDIR, $TEMP, $TMP), always; else in the system's temporary folder."""
    for name in folderlock.NAMED_TEMPORARY:
        monkeypatch.delenv(name, raising=False)
    if not folderlock.memory_folder_fits():
        pytest.skip(f"{MEMORY_FOLDER} is no tmpfs with {folderlock.MEMORY_FOLDER_FREE_MB} MiB free here")
    assert work_parent() == MEMORY_FOLDER
    monkeypatch.setenv("TMPDIR", "/var/tmp")
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert work_parent() == "/var/tmp"
    monkeypatch.delenv("TMPDIR")
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(folderlock, "MEMORY_FOLDER_FREE_MB", 1 << 40)  # a container's 64 MiB /dev/shm
    assert work_parent() == tempfile.gettempdir() != MEMORY_FOLDER
    monkeypatch.undo()
    assert not folderlock.memory_folder_fits("/no/such/folder")
    assert not folderlock.memory_folder_fits(str(Path(__file__).parent))  # a folder of a disk's


@needs_root
def test_a_dead_graders_work_folder_in_dev_shm_is_removed_by_the_next_worker(monkeypatch):
    """A grader killed (SIGKILL, the OOM killer) leaves its work folder, hidden inputs and all, wherever it was:
    the next worker removes those in /dev/shm too, whatever its own environment chose."""
    if not os.access(MEMORY_FOLDER, os.W_OK):
        pytest.skip(f"{MEMORY_FOLDER} is not writable here")
    left = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=MEMORY_FOLDER))
    try:
        (left / "jobs" / "1" / "inputs").mkdir(parents=True)
        (left / "jobs" / "1" / "inputs" / "hidden.safetensors").write_text("a hidden case's input")
        assert left in left_work_folders()
        monkeypatch.setenv("TMPDIR", "/var/tmp")  # this grader's own folders go elsewhere
        monkeypatch.setattr(tempfile, "tempdir", None)
        Worker("fallback", Limits()).close()
        assert not left.exists()
    finally:
        remove_tree(left)


# ---------------------------------------------------------------- the job cgroup and what the servers import


@needs_root
def test_a_copy_joins_its_workers_job_cgroup_and_the_template_none(assignment, tmp_path):
    """Each copy is in its worker's job cgroup from its first job on, so each child is born there (a child that moved
    itself waited 11 to 14 ms a phase for the kernel, and every fork on the machine behind it); the template, which
    runs no job, is in none: an OOM kill there would end every worker's copy."""
    with Worker("fallback", LIMITS).start() as first, Worker("fallback", LIMITS, beside=first.share()) as second:
        if not isinstance(first.cgroup, JobCgroup):
            pytest.skip(f"no job cgroup here: {first.cgroup}")
        for worker in (first, second):
            result = grade(assignment, submission(tmp_path, name=f"s{id(worker)}"), torch.device("cpu"), worker=worker)
            assert scores(result) == pytest.approx(FULL), outputs_of(result)[:2]
            cgroups = Path(f"/proc/{worker.server.pid}/cgroup").read_text()  # the fallback's pids are the machine's
            assert f"/{worker.cgroup.folder.name}\n" in cgroups, cgroups
        template = Path(f"/proc/{first.template.process.pid}/cgroup").read_text()
        assert all(w.cgroup.folder.name not in template for w in (first, second)), template


@needs_root
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_library_named_after_a_copys_first_job_is_imported_by_the_template_and_a_fresh_copy(
    assignment, tmp_path, sandbox
):
    """A copy in its job cgroup imports nothing (its memory would count against the jobs'): a library a later
    submission names (einx, checkpoint's torch._dynamo) is imported by the template, and the next job runs in a
    fresh copy of it, which has it."""
    with Worker(sandbox, SPYING).start() as first, Worker(sandbox, SPYING, beside=first.share()) as second:
        grade(assignment, submission(tmp_path, name="first"), torch.device("cpu"), worker=second)
        ran = second.server
        assert isinstance(ran, ClonedServer) and ran.ran
        ran.send({"op": "warm", "names": ["wave"]})  # asked of the copy itself, in its job cgroup: it imports nothing
        refused = submission(tmp_path, imported_before_the_submission("wave", False), name="refused")
        result = grade(assignment, refused, torch.device("cpu"), worker=second)
        assert second.server is ran and scores(result) == pytest.approx(FULL), outputs_of(result)[:2]
        second.warm(["colorsys"])  # a module no server imported
        assert second.server is not ran and ran.ended(), "the copy that ran a job was kept"
        assert "colorsys" in first.template.warmed and "colorsys" in second.server.warmed
        fresh = submission(tmp_path, imported_before_the_submission("colorsys", True), name="second")
        result = grade(assignment, fresh, torch.device("cpu"), worker=second)
    assert scores(result) == pytest.approx(FULL), outputs_of(result)[:2]


def imported_before_the_submission(name: str, expected: bool) -> str:
    """Code whose softmax fails unless the module `name` was (or was not) in the job's `sys.modules` before the
    submission's import: what its server imported before it forked the job."""
    return f"import sys\n_found = [] if ({name!r} in sys.modules) == {expected} else [{name!r}]\n" + softmax_fails_if(
        "_found"
    )


@needs_root
def test_a_workers_folder_is_in_memory_only_where_a_job_cgroup_counts_what_its_jobs_write_there(monkeypatch):
    """A tmpfs file is memory, and only the jobs' memory cgroup bounds how much their outputs hold: a worker without
    one keeps its folder on disk."""
    for name in folderlock.NAMED_TEMPORARY:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)
    if not folderlock.memory_folder_fits():
        pytest.skip(f"{MEMORY_FOLDER} is no tmpfs with {folderlock.MEMORY_FOLDER_FREE_MB} MiB free here")
    with Worker("fallback", LIMITS, cgroup=False) as without:
        assert not without.root.is_relative_to(MEMORY_FOLDER), without.root
    with Worker("fallback", LIMITS) as counted:
        if not isinstance(counted.cgroup, JobCgroup):
            pytest.skip(f"no job cgroup here: {counted.cgroup}")
        assert counted.root.is_relative_to(MEMORY_FOLDER), counted.root


def test_an_outputs_file_is_removed_once_read_back(tmp_path):
    """Read once (after the phase's processes ended), an outputs file counts against no later phase's memory where
    the work folder is in memory."""
    from safetensors.torch import save_file

    from cs_basics.harness.grading.pipeline.runs import read_outputs

    path = tmp_path / "case.safetensors"
    meta = {"out": {"kind": "tensor", "device": "cpu"}}
    save_file({"out": torch.ones(2)}, str(path), metadata={"outputs": json.dumps(meta)})
    outputs, error = read_outputs(path)
    assert error is None and torch.equal(outputs["out"], torch.ones(2))
    assert not path.exists()


# ---------------------------------------------------------------- the grader's modules, loaded once a server

# at the submission's import: the record is the server's copy (install_tool's grader/), the test library's package
# imports the rest from the job's own code, and the student's package (a fresh shell) reaches it
LOADED_BY_THE_SERVER = """
import os, sys

_record = sys.modules.get("cs_basics.harness.rule.record")
_harness = sys.modules["cs_basics.harness"]
_code = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the job's code/cs_basics
_found = []
if _record is None or os.sep + os.path.join("tool", "grader", "cs_basics", "") not in _record.__file__:
    _found.append(f"record from {getattr(_record, '__file__', None)}")
if "cs_basics.harness.problem" not in sys.modules:
    _found.append("no test library")
if _harness.__path__ != [os.path.join(_code, "harness")] or sys.modules["cs_basics"].harness is not _harness:
    _found.append(f"harness at {_harness.__path__}")
if sys.modules["cs_basics.harness.rule"].__path__ != [os.path.join(_code, "harness", "rule")]:
    _found.append(f"rule at {sys.modules['cs_basics.harness.rule'].__path__}")
if getattr(_record, "TAMPERED", False):
    _found.append("a copy loaded the server's folder after a job had run")
"""


@needs_root
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_each_job_finds_the_graders_modules_loaded_by_its_server_and_imports_the_rest_from_its_own_code(
    assignment, tmp_path, sandbox
):
    """The server loads the grader's modules once (child.preload_grader), as it starts, before any job: each child
    forks with them (about 10 ms of each phase's), and whatever of the harness the course's code imports later comes
    from the job's own staged copy (the server's folder need not be in the job's view). A batch's copies and a second
    job alike; a copy made after a job ran reads nothing of that folder."""
    with Worker(sandbox, SPYING).start() as first, Worker(sandbox, SPYING, beside=first.share()) as second:
        for worker, name in ((first, "first"), (second, "second"), (second, "again")):
            probe = submission(tmp_path, LOADED_BY_THE_SERVER + softmax_fails_if("_found"), name=name)
            result = grade(assignment, probe, torch.device("cpu"), worker=worker)
            assert scores(result) == pytest.approx(FULL), outputs_of(result)[:2]
        # what a job could write there (were the folder its to write) reaches no server: a copy made now, for a
        # library the next submission names, has the template's modules, loaded before any job ran
        record = first.template.root / "tool" / "grader" / "cs_basics" / "harness" / "rule" / "record.py"
        record.write_text(record.read_text() + "\nTAMPERED = True\n")
        second.warm(["colorsys"])
        assert isinstance(second.ensure_server(), ClonedServer)
        probe = submission(tmp_path, LOADED_BY_THE_SERVER + softmax_fails_if("_found"), name="fresh_copy")
        result = grade(assignment, probe, torch.device("cpu"), worker=second)
        assert scores(result) == pytest.approx(FULL), outputs_of(result)[:2]


# the server's side of it, alone: child.py from a tool folder install_tool made, in a fresh interpreter
PRELOAD = """
import importlib.util, json, sys
from pathlib import Path

tool, library = Path(sys.argv[1]), Path(sys.argv[2])
spec = importlib.util.spec_from_file_location("_grading_child", tool / "child.py")
child = importlib.util.module_from_spec(spec)
spec.loader.exec_module(child)
forbidden = {"a": ["cs_test.*"], "b": ["aten._softmax"], "c": []}
job = {"grader_packages": ["cs_basics"], "rule": {"forbidden_ops": forbidden}}
child.preload_grader()
child.list_forbidden_operators(job)
found = {"loaded": sorted(child.GRADER), "modules": sorted(n for n in sys.modules if n.startswith("cs_basics"))}
if child.GRADER:
    record = child.GRADER["cs_basics.harness.rule.record"]
    found["lists"] = record._operator_overloads.cache_info().currsize
    sys.path.insert(0, str(library))
    import registers_an_operator  # noqa: F401  (a library the server imports later: its operator is refused too)
    child.list_forbidden_operators(job)
    found["lists_after"] = record._operator_overloads.cache_info().currsize
    found["after"] = list(record.operator_overloads(("cs_test.*",)))
    found["file"] = record.__file__
print("FOUND", json.dumps(found))
"""

REGISTERS_AN_OPERATOR = """
import torch

LIBRARY = torch.library.Library("cs_test", "DEF")
LIBRARY.define("softmax_again(Tensor x) -> Tensor")
"""


@pytest.mark.parametrize("broken", [False, True], ids=["whole", "a-module-broken"])
def test_the_server_reads_the_forbidden_operators_again_after_an_import_and_loads_nothing_half(tmp_path, broken):
    """preload_grader and list_forbidden_operators in the server: the grader's modules from its tool folder, each
    problem's forbidden operators listed once, and listed again after the server imported a library that registers
    one; where a module of the copy fails, nothing of the package is left loaded (each child then loads its own from
    its code, as before)."""
    from cs_basics.harness.grading.sandbox.server import install_tool

    tool = install_tool(tmp_path)
    if broken:
        (tool / "grader" / "cs_basics" / "harness" / "rule" / "record.py").write_text("raise ImportError('broken')\n")
        shutil.rmtree(tool / "grader" / "cs_basics" / "harness" / "rule" / "__pycache__")
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "registers_an_operator.py").write_text(REGISTERS_AN_OPERATOR)
    done = subprocess.run(
        [sys.executable, "-I", "-c", PRELOAD, str(tool), str(tmp_path / "library")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("FOUND ")]
    assert lines, done.stdout[-2000:] + done.stderr[-3000:]
    found = json.loads(lines[0].removeprefix("FOUND "))
    if broken:
        assert found == {"loaded": [], "modules": []}, found
        return
    assert "cs_basics.harness.rule.record" in found["loaded"] and "cs_basics.harness.problem" in found["modules"]
    assert Path(found["file"]).is_relative_to(tool / "grader"), found["file"]
    assert found["lists"] == found["lists_after"] == 2, found  # a set of patterns each; none where nothing is forbidden
    assert found["after"] == ["cs_test::softmax_again"], found


def test_the_copy_of_the_graders_modules_is_no_uids_to_write_whatever_the_checkouts_modes(monkeypatch, tmp_path):
    """A checkout cloned under umask 0 (GitLab's Docker executor) has files of mode 666: the servers' copy of the
    grader's modules is 644 in folders of 755 all the same, and laid out where it belongs, never through a link
    planted in its place."""
    import cs_basics.harness.grading.sandbox.server as server_module

    package = tmp_path / "checkout" / "cs_basics"
    shutil.copytree(
        server_module.HARNESS_PACKAGE / "harness",
        package / "harness",
        ignore=shutil.ignore_patterns("grading", "course"),
    )
    for path in package.rglob("*"):
        path.chmod(0o777 if path.is_dir() else 0o666)
    monkeypatch.setattr(server_module, "HARNESS_PACKAGE", package)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "root" / "tool").mkdir(parents=True)
    (tmp_path / "root" / "tool" / "grader").symlink_to(elsewhere)
    old = os.umask(0)
    try:
        tool = server_module.install_tool(tmp_path / "root")
    finally:
        os.umask(old)
    grader = tool / "grader"
    assert not grader.is_symlink() and list(elsewhere.iterdir()) == []
    modes = {path.relative_to(tool).as_posix(): path.stat().st_mode & 0o777 for path in [tool, *tool.rglob("*")]}
    assert "grader/cs_basics/harness/rule/record.py" in modes
    assert {mode for name, mode in modes.items() if (tool / name).is_dir()} == {0o755}, modes
    assert {mode for name, mode in modes.items() if not (tool / name).is_dir()} == {0o644}, modes


def test_a_new_server_finds_no_file_a_job_left_in_its_copy_of_the_graders_modules(tmp_path):
    """Where a job runs as the grader's own user (a grader that is not root, without Landlock), it may write the
    worker's folder: install_tool, at each server's start, lays the copy out afresh (no planted bytecode survives)."""
    from cs_basics.harness.grading.sandbox.server import install_tool

    tool = install_tool(tmp_path)
    planted = tool / "grader" / "cs_basics" / "harness" / "rule" / "__pycache__" / "planted.cpython-311.pyc"
    planted.write_bytes(b"not the grader's")
    record = tool / "grader" / "cs_basics" / "harness" / "rule" / "record.py"
    record.write_text("# changed\n")
    install_tool(tmp_path)
    assert not planted.exists()
    assert record.read_text() != "# changed\n"


def test_the_grading_servers_numpy_has_one_blas_thread_unless_the_staff_say_otherwise(monkeypatch, tmp_path):
    """numpy's OpenBLAS starts a thread a core at its import, which spins on the cores the jobs share (about 0.1 CPU
    s an import here, a core's worth more on a larger machine): the server, its jobs and the grader get one thread;
    a value the staff set is passed through."""
    import cs_basics.cli as cli
    import cs_basics.harness.grading.sandbox.worker as worker_module
    from cs_basics.harness.grading.sandbox.server import server_env

    class Started(Exception):
        pass

    def started_worker(*args, **kwargs):  # the grade goes no further: what the grader set is all this test reads
        raise Started(os.environ.get("OPENBLAS_NUM_THREADS"))

    monkeypatch.setattr(worker_module, "started_worker", started_worker)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "")  # the machine's own value (or none) comes back after the test
    for staff in (None, "4"):
        if staff is None:
            monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
        else:
            monkeypatch.setenv("OPENBLAS_NUM_THREADS", staff)
        assert server_env(tmp_path)["OPENBLAS_NUM_THREADS"] == (staff or "1")
        with pytest.raises(Started) as grader:
            cli.main(["grade"])
        assert grader.value.args == (staff or "1",)
