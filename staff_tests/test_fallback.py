"""The fallback where the kernel refuses namespaces, graded end to end as in PrairieLearn's and Kubernetes'
containers (root with the default capabilities: no CAP_SYS_ADMIN, so no namespace for a job; debian:bookworm-slim
has no `kill` program): each test grades in a worker made with `namespaces=False`, under the job's own uid.

This machine's Python lives under /root (mode 700), which a job's uid cannot enter: the grader opens the
environment's folders before the uid changes (zygote.reach_python, under Landlock; on a kernel without it, /root
is an empty folder anyone may enter with the Python bound back), as in a root container with the checkout
under /root. Each grading here runs in a private mount namespace of its own (`unshare --mount`) where, as a test
asks, `kill` and `setpriv` are gone (/dev/null bound over them), or the checkout's .venv lies in a closed folder
beside a file of the staff's. Nothing of this reaches the rest of the machine.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cs_basics.harness.grading.zygote import landlock_abi

from .probes import private_mount_refused
from .submissions import ROOT, submission

ATTENTION, SOFTMAX = "scaled_dot_product_attention", "softmax"
FULL = {SOFTMAX: 1.0, ATTENTION: 5.0}


@pytest.fixture(autouse=True)
def private_mount():
    """Each test grades in a private mount namespace: where the machine refuses it (root in a container without
    CAP_SYS_ADMIN), the tests skip, saying so."""
    refused = private_mount_refused()
    if refused:
        pytest.skip(refused)


GRADE = """
import json, subprocess, sys
from pathlib import Path

import torch

from cs_basics.harness.config import Assignment
from cs_basics.harness.grading import worker as worker_module
from cs_basics.harness.grading.grade import grade
from cs_basics.harness.grading.leases import processes_of
from cs_basics.harness.grading.limits import Limits

root, survivor, *folders = sys.argv[1:]
if survivor == "survivor":  # a kill that leaves one process of the public phase alive (once)
    real, calls = worker_module.kill_uid, []

    def leaves_one(uid):
        done = real(uid)
        if not calls:
            subprocess.Popen(["sleep", "20"], user=uid, group=uid, extra_groups=[], start_new_session=True)
        calls.append(uid)
        return done

    worker_module.kill_uid = leaves_one
assignment = Assignment.find(Path(root))
found = {}
limits = Limits(case_seconds=10, released=("softmax", "scaled_dot_product_attention"))
with worker_module.Worker("fallback", limits, namespaces=False) as worker:
    for folder in folders:
        result = grade(assignment, Path(folder), torch.device("cpu"), worker=worker)
        scores = {}
        for t in result.tests:
            scores[t.case.problem] = scores.get(t.case.problem, 0.0) + t.score
        found[folder] = {
            "scores": scores,
            "outputs": {t.case.id: t.output for t in result.tests},
            "hidden": [t.case.id for t in result.tests if t.case.hidden],
            "left": processes_of(worker.uid),
            "notes": result.notes,
            "uid": worker.uid,
        }
print("RESULTS", json.dumps(found))
"""


def grade_without_namespaces(
    *folders: Path, hide_programs: tuple[str, ...] = (), survivor: bool = False, venv_in: Path | None = None
) -> dict:
    """Grade `folders` with one fallback worker without namespaces, in a private mount namespace (see above);
    with `venv_in`, by the checkout's .venv bound into that folder (and its Python run from there)."""
    script = ["set -e"]
    python = sys.executable
    blocked = next((p for p in reversed(Path(sys.base_prefix).parents) if not p.stat().st_mode & 0o001), None)
    if blocked is not None and not landlock_abi():  # no way into it then (reach_python): an open folder over it
        prefix = Path(os.path.realpath(sys.base_prefix))
        script += [
            "keep=$(mktemp -d)",
            f'mount --bind {shlex.quote(str(prefix))} "$keep"',
            f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(str(blocked))}",
            f"mkdir -p {shlex.quote(str(prefix))}",
            f'mount --bind "$keep" {shlex.quote(str(prefix))}',
            'umount "$keep"; rmdir "$keep"',
        ]
    if venv_in is not None:
        venv = Path(sys.prefix)
        script += [f"mkdir -p {shlex.quote(str(venv_in / '.venv'))}"]
        script += [f"mount --bind {shlex.quote(str(venv))} {shlex.quote(str(venv_in / '.venv'))}"]
        python = str(venv_in / ".venv" / Path(sys.executable).relative_to(venv))
    for name in hide_programs:
        for path in {os.path.realpath(p) for p in (shutil.which(name), f"/bin/{name}", f"/usr/bin/{name}") if p}:
            if os.path.exists(path):
                script.append(f"mount --bind /dev/null {shlex.quote(path)}")
    args = [str(ROOT), "survivor" if survivor else "-", *map(str, folders)]
    script.append(f"exec {shlex.quote(python)} -c {shlex.quote(GRADE)} {shlex.join(args)}")
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    line = next((line for line in done.stdout.splitlines() if line.startswith("RESULTS ")), None)
    assert line is not None, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(line.removeprefix("RESULTS "))


DAEMON = """
import os as _os, time as _time
if _os.fork() == 0:  # a daemon in a session of its own, whose parent exits: only its uid finds it
    _os.setsid()
    if _os.fork() == 0:
        _null = _os.open(_os.devnull, _os.O_RDWR)
        for _fd in (0, 1, 2):
            _os.dup2(_null, _fd)
        _time.sleep(120)
    _os._exit(0)
"""


def test_without_a_kill_program_the_jobs_processes_are_killed_all_the_same(tmp_path):
    """debian:bookworm-slim has no `kill`: a daemon the submission leaves is killed without it (and without
    setpriv), by a process that takes the job's uid and calls kill(2) itself."""
    found = grade_without_namespaces(submission(tmp_path, DAEMON), hide_programs=("kill", "setpriv"))
    (graded,) = found.values()
    assert graded["scores"] == pytest.approx(FULL), list(graded["outputs"].values())[:2]
    assert graded["left"] == [], f"processes of uid {graded['uid']} left after grading: {graded['left']}"


def test_the_hidden_phase_never_starts_while_a_process_of_the_public_phase_lives(tmp_path):
    """A process of the job that outlives the public phase (here one the kill leaves, as a kill that failed
    would): no hidden case runs, each says why, and the public cases keep their verdicts."""
    found = grade_without_namespaces(submission(tmp_path), survivor=True)
    (graded,) = found.values()
    hidden = {case: graded["outputs"][case] for case in graded["hidden"]}
    assert hidden and all("could not be ended, so no hidden case may run" in out for out in hidden.values()), hidden
    public = [out for case, out in graded["outputs"].items() if case not in hidden]
    assert public and all(out == "passed" for out in public), public[:2]


def softmax_fails_if(found: str) -> str:
    """Code that makes the submission's softmax raise, naming `found`, where the variable `found` is not empty."""
    return f"""
_reference_softmax = softmax


def softmax(in_features, dim):
    if {found}:
        raise RuntimeError(f"found {{{found}}}")
    return _reference_softmax(in_features, dim)
"""


SPY = """
_found = []
for _path in {paths!r}:
    try:
        with open(_path, "rb") as _f:
            _found.append((_path, _f.read(64)))
    except OSError:
        pass
"""


@pytest.fixture
def secrets():
    """A root-only file (mode 600 in a folder anyone may enter) and another job's folder, in the shared /tmp."""
    top = Path(tempfile.mkdtemp(prefix="cs-basics-secrets-"))
    top.chmod(0o755)
    root_only = top / "root-only"
    root_only.write_text("root's")
    root_only.chmod(0o600)
    other_job = Path(tempfile.mkdtemp(prefix="cs-basics-grade-")) / "jobs" / "1" / "code"
    other_job.mkdir(parents=True)
    for folder in (other_job, *other_job.parents[:3]):
        folder.chmod(0o755)
    (other_job / "solution.py").write_text("another student's code")
    (other_job / "solution.py").chmod(0o644)
    yield [root_only, other_job / "solution.py"]
    shutil.rmtree(top)
    shutil.rmtree(other_job.parents[2])


def test_without_namespaces_the_job_reads_nothing_of_the_course_another_job_or_root(tmp_path, secrets):
    """The course's reference solution (world-readable in the checkout), a root-only file and another job's
    code: the job opens none of them. Landlock confines the job's files where the kernel offers it (the grade's
    notes say which construction ran); torch and the harness still import and grade in full."""
    reference = ROOT / "cs_basics" / "nn" / "functional.py"
    spy = submission(tmp_path, SPY.format(paths=[str(reference), *map(str, secrets)]) + softmax_fails_if("_found"))
    found = grade_without_namespaces(spy)
    (graded,) = found.values()
    assert graded["scores"] == pytest.approx(FULL), graded["outputs"][f"{SOFTMAX}-last_dim"]
    assert any("Landlock (ABI" in note for note in graded["notes"]), graded["notes"]


TEMPORARY = """
import os as _os, tempfile as _tempfile, uuid as _uuid

with _tempfile.NamedTemporaryFile() as _f:  # where a library keeps a temporary file: the job's working folder
    _f.write(b"x")
_wrote_shared = []
for _folder in ("/tmp", "/var/tmp", "/dev/shm"):
    try:
        with open(_os.path.join(_folder, f"cs-basics-litter-{_uuid.uuid4().hex}"), "w") as _f:
            _wrote_shared.append(_folder)
    except OSError:
        pass
"""


def test_without_namespaces_temporary_files_go_to_the_jobs_own_folder_not_the_shared_ones(tmp_path):
    """Landlock keeps the job out of the shared /tmp, /var/tmp and /dev/shm (other graders' folders lie there, and
    what a job leaves there could reach the next): tempfile still works, in the job's working folder ($TMPDIR)."""
    found = grade_without_namespaces(submission(tmp_path, TEMPORARY + softmax_fails_if("_wrote_shared")))
    (graded,) = found.values()
    assert graded["scores"] == pytest.approx(FULL), graded["outputs"][f"{SOFTMAX}-last_dim"]


ESCAPE = """
import os as _os, sys as _sys

_found = []  # the staff's file beside the .venv, by ".." from each folder the job imports from
for _entry in list(_sys.path):
    for _up in range(1, 8):
        _path = _os.path.join(_entry, *[".."] * _up, {name!r})
        try:
            with open(_path) as _f:
                _found.append((_path, _f.read(64)))
        except OSError:
            pass
"""


def test_a_venv_in_a_closed_folder_is_imported_and_the_folder_beside_it_stays_out_of_reach(tmp_path):
    """A checkout under /root, as a newcomer's: its .venv in a folder the job's uid cannot enter (mode 700),
    beside a file of the staff's that anyone could read were the folder open. The grader opens the .venv's folder
    to the job, which imports from it and is graded in full; ".." from it leads back to the checkout, where
    Landlock refuses the staff's file."""
    if not landlock_abi():
        pytest.skip("no Landlock here: the grader opens no closed folder to the job without it")
    closed = tmp_path / "root"
    checkout = closed / "course"
    checkout.mkdir(parents=True)
    closed.chmod(0o700)
    checkout.chmod(0o755)
    staff = checkout / f"staff-{tmp_path.name}.txt"
    staff.write_text("the staff's")
    staff.chmod(0o644)
    spy = submission(tmp_path, ESCAPE.format(name=staff.name) + softmax_fails_if("_found"))
    found = grade_without_namespaces(spy, venv_in=checkout)
    (graded,) = found.values()
    assert graded["scores"] == pytest.approx(FULL), graded["outputs"][f"{SOFTMAX}-last_dim"]
    assert any("Landlock (ABI" in note for note in graded["notes"]), graded["notes"]
