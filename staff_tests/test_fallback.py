"""The fallback where the kernel refuses namespaces, graded end to end as in PrairieLearn's and Kubernetes'
containers (root with the default capabilities: no CAP_SYS_ADMIN, so no namespace for a job; debian:bookworm-slim
has no `kill` program): each test grades in a worker made with `namespaces=False`, under the job's own uid.

This machine's Python lives under /root (mode 700), which a job's uid cannot enter: the grader opens the
environment's folders before the uid changes (reach.reach_python, under Landlock; on a kernel without it, /root
is an empty folder anyone may enter with the Python bound back), as in a root container with the checkout
under /root. Each grading here runs in a private mount namespace of its own (`unshare --mount`) where, as a test
asks, `kill` and `setpriv` are gone (/dev/null bound over them), or the checkout's .venv lies in a closed folder
beside a file of the staff's. Nothing of this reaches the rest of the machine.

A test may also run the grader under a container's init that never reaps (a PID namespace of its own whose
first process waits only for the grader).

What the fallback confines besides files, each tried the way it failed (issue 41): the network (a TCP listener
and a UDP socket on 127.0.0.1, an abstract Unix socket), System V IPC kept for the next grading, shared and memfd
memory past the job's limit, and a double-forked orphan under a container's init; each test also reads what the
grade's notes say the kernel could not give.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from cs_basics.harness.grading.job.landlock import landlock_abi
from cs_basics.harness.grading.sandbox.folderlock import held_work_folder
from cs_basics.harness.grading.sandbox.litter import remove_tree

from .probes import private_mount_refused
from .submissions import (
    DAEMON,
    ROOT,
    SPY,
    SYSTEM_V,
    maps_shared_memory,
    memory_cgroup_problem,
    softmax_fails_if,
    submission,
)

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
import json, os, signal, subprocess, sys
from pathlib import Path

import torch

from cs_basics.harness.config import Assignment
import cs_basics.harness.grading.sandbox.worker as worker_module
from cs_basics.harness.grading.pipeline.grade import grade
from cs_basics.harness.grading.sandbox.leases import processes_of
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.litter import ipc_objects

root, options, *folders = sys.argv[1:]
options = json.loads(options)
real, calls = worker_module.kill_uid, []
if options.get("survivor"):  # a kill that leaves one process of the public phase alive (once)

    def leaves_one(uid):
        done = real(uid)
        if not calls:
            subprocess.Popen(["sleep", "20"], user=uid, group=uid, extra_groups=[], start_new_session=True)
        calls.append(uid)
        return done

    worker_module.kill_uid = leaves_one
if options.get("kill_server"):  # the grading server ends with a job's process alive (the OOM killer's choice), once

    def after_the_server(uid):
        if not calls:
            worker.server.process.send_signal(signal.SIGKILL)
            worker.server.process.wait()
        calls.append(uid)
        return real(uid)

    worker_module.kill_uid = after_the_server


def planted(uid):  # a System V segment and message queue of the job's uid, as a job let make them would leave
    pid = os.fork()
    if pid == 0:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        os._exit(0 if libc.shmget(0, 4096, 0o1600) >= 0 and libc.msgget(0, 0o1600) >= 0 else 1)
    return os.waitpid(pid, 0)[1] == 0


assignment = Assignment.find(Path(root))
found = {}
released = ("softmax", "scaled_dot_product_attention")
limits = Limits(**{"case_seconds": 10, "released": released} | options.get("limits", {}))
with worker_module.Worker("fallback", limits, namespaces=False, cgroup=options.get("cgroup", True)) as worker:
    if "landlock" in options:  # as on a kernel of that Landlock ABI
        worker.ensure_server().landlock = min(options["landlock"], worker.landlock)
    for folder in folders:
        plants = options.get("plant_ipc") and planted(worker.uid)
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
            "planted": plants,
            "ipc_left": ipc_objects(worker.uid),
        }
print("RESULTS", json.dumps(found))
"""

# a container's init that never reaps: it waits for its one child (the grader) alone, then names the zombies
# left under it
INIT = """
import json, os, subprocess, sys

subprocess.run(sys.argv[1:])
zombies = []
for entry in os.listdir("/proc"):
    try:
        stat = open(f"/proc/{entry}/stat").read()
    except OSError:
        continue
    state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
    if state == "Z" and parent == "1":
        zombies.append(int(entry))
print("ZOMBIES", json.dumps(zombies))
"""


def grade_without_namespaces(
    *folders: Path, hide_programs: tuple[str, ...] = (), init: bool = False, venv_in: Path | None = None, **options
) -> dict:
    """Grade `folders` with one fallback worker without namespaces, in a private mount namespace (see above);
    with `venv_in`, by the checkout's .venv bound into that folder (and its Python run from there); `init`: under
    a container's init that never reaps (the zombies left under it are found["zombies"]). `options` (GRADE's):
    survivor, kill_server, plant_ipc, cgroup, landlock, limits."""
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
    args = [str(ROOT), json.dumps(options), *map(str, folders)]
    under = f"{shlex.quote(python)} -c {shlex.quote(INIT)} " if init else ""
    script.append(f"exec {under}{shlex.quote(python)} -c {shlex.quote(GRADE)} {shlex.join(args)}")
    pid = ["--pid", "--fork", "--mount-proc"] if init else []
    command = ["unshare", "--mount", "--propagation", "private", *pid, "sh", "-c", "\n".join(script)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in done.stdout.splitlines() if " " in line}
    assert "RESULTS" in lines, done.stdout[-3000:] + done.stderr[-5000:]
    found = json.loads(lines["RESULTS"])
    return found | ({"zombies": json.loads(lines["ZOMBIES"])} if init else {})


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


@pytest.fixture
def secrets():
    """A root-only file (mode 600 in a folder anyone may enter) and another job's folder, in the shared /tmp."""
    top = Path(tempfile.mkdtemp(prefix="cs-basics-secrets-"))
    top.chmod(0o755)
    root_only = top / "root-only"
    root_only.write_text("root's")
    root_only.chmod(0o600)
    other_grader, held = held_work_folder(remove_tree)  # a live grader's: no worker that starts meanwhile removes it
    other_job = other_grader / "jobs" / "1" / "code"
    other_job.mkdir(parents=True)
    for folder in (other_job, *other_job.parents[:3]):
        folder.chmod(0o755)
    (other_job / "solution.py").write_text("another student's code")
    (other_job / "solution.py").chmod(0o644)
    yield [root_only, other_job / "solution.py"]
    shutil.rmtree(top)
    remove_tree(other_grader)
    os.close(held)


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


# ---------------------------------------------------------------- what the fallback confines besides files


NETWORK = """
import socket as _socket

_SECRET, _reached = b"the hidden inputs", []
for _name, _family, _kind, _address in (
    ("tcp", _socket.AF_INET, _socket.SOCK_STREAM, ("127.0.0.1", {tcp})),
    ("udp", _socket.AF_INET, _socket.SOCK_DGRAM, ("127.0.0.1", {udp})),
    ("abstract", _socket.AF_UNIX, _socket.SOCK_DGRAM, {abstract!r}),
):
    try:
        with _socket.socket(_family, _kind) as _sock:
            _sock.settimeout(3)
            _sock.connect(_address)
            _sock.sendall(_SECRET)
        _reached.append(_name)
    except OSError:
        pass
_ours, _theirs = _socket.socketpair()  # AF_UNIX: a submission's own, as the grader's channel, still works
_ours.sendall(b"ping")
_unix_failed = [] if _theirs.recv(4) == b"ping" else ["socketpair"]
_found = [_name for _name in _reached if _name != "abstract" or {scoped}] + _unix_failed
"""


@pytest.mark.parametrize("abi", [None, 3], ids=["kernels-landlock", "landlock-abi-3"])
def test_without_namespaces_the_job_reaches_no_network(tmp_path, abi):
    """A TCP listener and a UDP socket on 127.0.0.1, and an abstract Unix socket, opened by the test: the job,
    which sends them the hidden inputs at import, reaches none (seccomp refuses every family but AF_UNIX; Landlock
    refuses TCP and, from ABI 6, the abstract socket), while its own socket pair works. As on a kernel of Landlock
    ABI 3 (before its network rules and scoping), TCP and UDP are still refused, and the grade's notes say that
    abstract Unix sockets could not be kept out."""
    scoped = (abi or landlock_abi()) >= 6
    with (
        socket.socket() as tcp,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as abstract,
    ):
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        udp.bind(("127.0.0.1", 0))
        abstract.bind(f"\0cs-basics-test-{uuid.uuid4().hex}")
        for listener in (tcp, udp, abstract):
            listener.setblocking(False)
        code = NETWORK.format(
            tcp=tcp.getsockname()[1], udp=udp.getsockname()[1], abstract=abstract.getsockname(), scoped=scoped
        )
        options = {} if abi is None else {"landlock": abi}
        (graded,) = grade_without_namespaces(
            submission(tmp_path, code + softmax_fails_if("_found")), **options
        ).values()
        arrived = []
        for name, listener, receive in (
            ("tcp", tcp, tcp.accept),
            ("udp", udp, udp.recv),
            ("abstract", abstract, abstract.recv),
        ):
            with contextlib.suppress(BlockingIOError):
                receive(*(() if listener is tcp else (64,)))
                arrived.append(name)
    assert arrived == ([] if scoped else ["abstract"]), arrived
    assert graded["scores"] == pytest.approx(FULL), graded["outputs"][f"{SOFTMAX}-last_dim"]
    notes = " ".join(graded["notes"])
    assert "no network: sockets other than Unix ones refused (seccomp)" in notes, notes
    assert ("abstract Unix sockets" in notes) == (not scoped), notes


def test_without_namespaces_no_system_v_object_outlives_its_grading(tmp_path):
    """A segment and a message queue holding what a job read, kept for the next grading (without an IPC namespace
    they outlive the job: the next grading on the machine printed the hidden inputs): the job may not make them
    (seccomp), and whatever the job's uid owns is removed when its grading ends (objects the test makes as that
    uid before each grading, as a job the kernel let make them would leave)."""
    key = random.randrange(1 << 20, 1 << 30)
    code = SYSTEM_V.format(key=key) + softmax_fails_if("_found")
    first, second = submission(tmp_path, code, name="first"), submission(tmp_path, code, name="second")
    found = grade_without_namespaces(first, second, plant_ipc=True)
    for graded in found.values():
        assert graded["planted"] and graded["ipc_left"] == [], graded["ipc_left"]
        assert graded["scores"] == pytest.approx(FULL), graded["outputs"][f"{SOFTMAX}-last_dim"]
        assert "no System V IPC (seccomp)" in " ".join(graded["notes"]), graded["notes"]


@pytest.mark.parametrize("cgroup", [True, False], ids=["its-own-cgroup", "no-cgroup"])
def test_without_namespaces_shared_memory_past_the_limit_loses_its_case(tmp_path, cgroup):
    """1.5 GiB of shared anonymous, memfd or /dev/zero memory in each 4-d attention case, under a 256 MiB limit:
    RLIMIT_DATA counts none of them. In a memory cgroup of the job's own (where the grader can make one) the OOM
    killer ends the case's process at the cgroup's limit; without one, the job may not map them (seccomp) and the
    notes say why; Landlock leaves /dev/zero unwritable in both. Those cases are lost, the others and softmax keep
    their points, and the grader finishes."""
    if cgroup and (why := memory_cgroup_problem()):
        pytest.skip(why)
    limits = {"memory_mb": 256, "tmp_mb": 64, "case_seconds": 60}  # on a loaded machine the OOM killer takes its time
    (graded,) = grade_without_namespaces(maps_shared_memory(tmp_path), cgroup=cgroup, limits=limits).values()
    notes = " ".join(graded["notes"])
    mapped = {case: out for case, out in graded["outputs"].items() if "4d" in case}  # Q of 4 dimensions
    # its cgroup's limit: 256 + 64 + 340 copied; Landlock leaves /dev/zero unwritable, cgroup or not
    verdicts = ("held more than 660 MiB of memory", "PermissionError") if cgroup else ("PermissionError",)
    # the notes say which sandbox the job had (its own cgroup or not): one run under load found every case refused
    assert mapped and all(any(v in out for v in verdicts) for out in mapped.values()), (notes, mapped)
    assert any(verdicts[0] in out for out in mapped.values()), (notes, mapped)
    others = [out for case, out in graded["outputs"].items() if case not in mapped]
    assert all(out == "passed" for out in others), others
    assert ("in a memory cgroup of its own" in notes) == cgroup, notes
    if not cgroup:
        assert "shared anonymous memory and memfd_create are refused instead" in notes, notes


def test_no_zombie_is_left_under_a_containers_init_after_a_batch(tmp_path):
    """A double-forked daemon of each phase, and the grading server killed with one alive (as the OOM killer may
    choose it): under a container's init that never reaps, the grader adopts the job's orphans (a child
    subreaper) and reaps them once its uid's are killed, so none is left a zombie under init; nothing of the uid
    runs, and the second submission is graded by a fresh server."""
    first, second = submission(tmp_path, DAEMON, name="first"), submission(tmp_path, DAEMON, name="second")
    found = grade_without_namespaces(first, second, init=True, kill_server=True)
    zombies = found.pop("zombies")
    assert zombies == [], f"zombies left under the container's init: {zombies}"
    for graded in found.values():
        assert graded["left"] == [] and graded["scores"] == pytest.approx(FULL), list(graded["outputs"].values())[:2]


REAPS_AT_ITS_END = """
import os, subprocess, sys, time
from cs_basics.harness.grading.sandbox.litter import become_subreaper, own_children, reap_children

assert become_subreaper()
# a child that leaves an orphan behind, which ends a moment later (bubblewrap's inner process, dying with its parent)
subprocess.run(["sh", "-c", "(sleep 0.3; exit 0) & exit 0"], check=True)
adopted = own_children()
if sys.argv[1] == "reap":
    print("reaped", reap_children(), "left", own_children())
else:
    time.sleep(1)
    states = [open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] for pid in own_children()]
    print("adopted", len(adopted), "states", states)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux's")
def test_the_grader_reaps_what_it_adopted_before_it_exits():
    """What the grader adopted and what is still ending when its workers close is reaped at its end: a process that
    exits with zombie children hands them to a container's init that may never reap them (the platform lab saw
    two left by bubblewrap in a user namespace, in PrairieLearn's container)."""
    left = subprocess.run([sys.executable, "-c", REAPS_AT_ITS_END, "keep"], capture_output=True, text=True, timeout=60)
    assert left.stdout.split() == ["adopted", "1", "states", "['Z']"], left.stdout + left.stderr  # the test can fail
    reaped = subprocess.run(
        [sys.executable, "-c", REAPS_AT_ITS_END, "reap"], capture_output=True, text=True, timeout=60
    )
    assert reaped.stdout.split() == ["reaped", "1", "left", "[]"], reaped.stdout + reaped.stderr
