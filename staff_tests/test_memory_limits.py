"""The grader lives within the memory it is given (issue 35).

The limit a container engine sets is a memory cgroup's: read here from fake cgroup trees of both
versions, then fitted into the submission's own limit with room for the grader. The end-to-end test
grades, in a memory cgroup of 768 MiB made for it (Gradescope's default), a submission that keeps
300 MiB per call: without the fit, the kernel's OOM killer ended the grader and every test said
"grading did not finish".
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import cs_basics.harness.grading.settings as settings_module
from cs_basics.harness.cgroup import CgroupMemory, cgroup_cores, cgroup_memory
from cs_basics.harness.config import Assignment
from cs_basics.harness.grading.pipeline.grade import grade
from cs_basics.harness.grading.sandbox.attempts import Attempt, ChildLog, Lines
from cs_basics.harness.grading.sandbox.bubblewrap import bubblewrap_runs
from cs_basics.harness.grading.sandbox.limits import (
    CODE_FLOOR_MB,
    GRADER_MB,
    SERVER_MB,
    Limits,
    out_of_memory,
    within_memory,
)
from cs_basics.harness.grading.sandbox.worker import Worker
from cs_basics.harness.grading.settings import GradeSettings

from .submissions import (
    ROOT,
    keeps_memory,
    maps_shared_memory,
    memory_cgroup_problem,
    said,
    submission,
    wrap_attention,
)

MiB = 1 << 20
needs_bubblewrap = pytest.mark.skipif(not bubblewrap_runs(), reason="bubblewrap does not run here: only the fallback")
V1_NO_LIMIT = "9223372036854771712"  # what cgroup v1 writes for no limit (4 KiB pages)


def mountinfo(*mounts: tuple[str, Path, str, str]) -> str:
    """/proc/self/mountinfo's lines for (the cgroup it shows, where, type, options)."""
    return "".join(
        f"{30 + n} 23 0:{40 + n} {root} {point} rw,relatime - {kind} {kind} {options}\n"
        for n, (root, point, kind, options) in enumerate(mounts)
    )


def cgroup_files(folder: Path, files: dict[str, str]) -> Path:
    """A fake cgroup's folder: each file's name and its text."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text + "\n")
    return folder


# ---------------------------------------------------------------- reading the limit


def test_v2_the_smallest_limit_on_the_way_up_binds(tmp_path: Path) -> None:
    mount = tmp_path / "cgroup"
    cgroup_files(mount / "user.slice", {"memory.max": str(768 * MiB), "memory.swap.max": "max"})
    leaf = cgroup_files(
        mount / "user.slice/job", {"memory.max": "max", "memory.swap.max": "0", "memory.current": str(5 * MiB)}
    )
    found = cgroup_memory("0::/user.slice/job\n", mountinfo(("/", mount, "cgroup2", "rw")))
    assert found == CgroupMemory(limit=768 * MiB, swap=0, usage=5 * MiB, folder=leaf)
    assert found.limit_mb == 768


def test_v2_max_everywhere_is_no_limit(tmp_path: Path) -> None:
    mount = tmp_path / "cgroup"
    cgroup_files(mount / "a", {"memory.max": "max", "memory.current": "123"})
    found = cgroup_memory("0::/a\n", mountinfo(("/", mount, "cgroup2", "rw")))
    assert found is not None and found.limit is None and found.limit_mb is None and found.usage == 123


def test_v2_in_a_container_with_its_own_cgroup_namespace(tmp_path: Path) -> None:
    """Docker's default on cgroup v2: the container's cgroup is the mount's root and /proc says "/"."""
    mount = cgroup_files(tmp_path / "cgroup", {"memory.max": str(2 << 30), "memory.current": "1"})
    found = cgroup_memory("0::/\n", mountinfo(("/", mount, "cgroup2", "rw")))
    assert found is not None and found.limit == 2 << 30 and found.folder == mount


def test_v1_limit_and_swap(tmp_path: Path) -> None:
    mount = tmp_path / "memory"
    cgroup_files(mount / "docker", {"memory.limit_in_bytes": V1_NO_LIMIT})
    leaf = cgroup_files(
        mount / "docker/abc",
        {
            "memory.limit_in_bytes": str(768 * MiB),
            "memory.memsw.limit_in_bytes": str(1024 * MiB),
            "memory.usage_in_bytes": str(7 * MiB),
        },
    )
    proc = "12:pids:/docker/abc\n4:memory:/docker/abc\n0::/\n"
    found = cgroup_memory(proc, mountinfo(("/", mount, "cgroup", "rw,memory")))
    assert found == CgroupMemory(limit=768 * MiB, swap=256 * MiB, usage=7 * MiB, folder=leaf)


def test_v1_huge_values_are_no_limit(tmp_path: Path) -> None:
    mount = tmp_path / "memory"
    files = {"memory.limit_in_bytes": V1_NO_LIMIT, "memory.memsw.limit_in_bytes": V1_NO_LIMIT}
    cgroup_files(mount / "a", files | {"memory.usage_in_bytes": "1"})
    found = cgroup_memory("4:memory:/a\n", mountinfo(("/", mount, "cgroup", "rw,memory")))
    assert found is not None and found.limit is None and found.swap is None


def test_v1_a_container_sees_its_own_cgroup_at_the_mount_point(tmp_path: Path) -> None:
    """Without a cgroup namespace (Docker and podman on cgroup v1), /proc names the host's path, and the
    mount shows that cgroup at /sys/fs/cgroup/memory; the kernel's hierarchical limit covers the ancestors
    out of view."""
    stat = f"cache 0\nhierarchical_memory_limit {512 * MiB}\nhierarchical_memsw_limit {V1_NO_LIMIT}"
    mount = cgroup_files(
        tmp_path / "memory", {"memory.limit_in_bytes": V1_NO_LIMIT, "memory.usage_in_bytes": "9", "memory.stat": stat}
    )
    proc = "4:memory:/machine.slice/libpod-abc.scope\n"
    found = cgroup_memory(proc, mountinfo(("/machine.slice/libpod-abc.scope", mount, "cgroup", "rw,memory")))
    assert found is not None and found.limit == 512 * MiB and found.folder == mount and found.usage == 9


def test_a_path_beside_the_mounts_root_is_not_under_it(tmp_path: Path) -> None:
    """/docker/abcdef is not inside /docker/abc: the mount point's own cgroup is the one to read."""
    mount = cgroup_files(tmp_path / "memory", {"memory.limit_in_bytes": str(256 * MiB)})
    cgroup_files(mount / "def", {"memory.limit_in_bytes": str(1 * MiB)})
    found = cgroup_memory("4:memory:/docker/abcdef\n", mountinfo(("/docker/abc", mount, "cgroup", "rw,memory")))
    assert found is not None and found.folder == mount and found.limit == 256 * MiB


def test_the_cpu_quota_is_the_smallest_on_the_way_up_v2_and_v1(tmp_path: Path) -> None:
    """A container's `--cpus 1.5` is cpu.max "150000 100000" (v2) or a cfs quota (v1): the cores it may use, the
    smallest quota on the way up; "max" and -1 are no quota."""
    mount = tmp_path / "v2"
    cgroup_files(mount / "pod", {"cpu.max": "150000 100000"})
    cgroup_files(mount / "pod/job", {"cpu.max": "max 100000"})
    assert cgroup_cores("0::/pod/job\n", mountinfo(("/", mount, "cgroup2", "rw"))) == 1.5
    cgroup_files(mount / "pod", {"cpu.max": "max 100000"})
    assert cgroup_cores("0::/pod/job\n", mountinfo(("/", mount, "cgroup2", "rw"))) is None
    v1 = cgroup_files(tmp_path / "cpu", {"cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"})
    assert cgroup_cores("3:cpu,cpuacct:/\n", mountinfo(("/", v1, "cgroup", "rw,cpu,cpuacct"))) == 0.5
    cgroup_files(v1, {"cpu.cfs_quota_us": "-1"})
    assert cgroup_cores("3:cpu,cpuacct:/\n", mountinfo(("/", v1, "cgroup", "rw,cpu,cpuacct"))) is None


def test_the_default_workers_fit_the_cores_and_keep_each_submissions_memory(monkeypatch) -> None:
    """One worker per core the grader may use, but no more than its memory holds with each submission's whole
    limit (768 MiB, Gradescope's: one worker, whatever the cores); `--workers` given wins."""
    monkeypatch.setattr(settings_module, "usable_cores", lambda: 4)
    monkeypatch.setattr(settings_module, "own_memory", lambda: None)
    monkeypatch.setattr(settings_module, "physical_mb", lambda: 64 << 10)
    assert GradeSettings().default_workers() == 4
    assert GradeSettings(workers=7).default_workers() == 7
    small = CgroupMemory(limit=768 * MiB, swap=None, usage=0, folder=Path("/"))
    monkeypatch.setattr(settings_module, "own_memory", lambda: small)
    assert GradeSettings().default_workers() == 1
    roomy = CgroupMemory(limit=2 * (SERVER_MB + 1024) * MiB + GRADER_MB * MiB, swap=None, usage=0, folder=Path("/"))
    monkeypatch.setattr(settings_module, "own_memory", lambda: roomy)
    assert GradeSettings(memory_mb=1024).default_workers() == 2
    assert GradeSettings(memory_mb=1024).limits(2).memory_mb == 1024  # the default never lowers the code's limit


def test_a_hybrid_machine_reads_v1s_memory_controller(tmp_path: Path) -> None:
    """cgroup v2 mounted beside v1 (systemd's hybrid layout) holds no memory controller: v1's limit is the one."""
    unified = cgroup_files(tmp_path / "unified", {"cgroup.controllers": ""})
    memory = cgroup_files(tmp_path / "memory" / "job", {"memory.limit_in_bytes": str(300 * MiB)})
    mounts = mountinfo(("/", unified, "cgroup2", "rw"), ("/", tmp_path / "memory", "cgroup", "rw,memory"))
    found = cgroup_memory("4:memory:/job\n0::/job\n", mounts)
    assert found is not None and found.limit == 300 * MiB and found.folder == memory


def test_no_memory_cgroup_mounted(tmp_path: Path) -> None:
    mounts = mountinfo(("/", tmp_path / "cpu", "cgroup", "rw,cpu"))
    assert cgroup_memory("3:cpu:/\n", mounts) is None
    assert cgroup_memory("", "") is None


# ---------------------------------------------------------------- the code's limit within it


def memory(limit_mb: int | None) -> CgroupMemory:
    return CgroupMemory(None if limit_mb is None else limit_mb * MiB, None, 0, Path("/sys/fs/cgroup"))


def test_without_a_limit_the_staffs_memory_stays() -> None:
    assert within_memory(Limits(memory_mb=4096), memory(None)) == Limits(memory_mb=4096)
    assert within_memory(Limits(memory_mb=4096), None) == Limits(memory_mb=4096)


def test_the_code_gets_what_the_container_leaves_the_grader() -> None:
    fitted = within_memory(Limits(memory_mb=4096), memory(768))
    assert fitted.memory_mb == fitted.tmp_mb == 768 - GRADER_MB - SERVER_MB > 0
    assert len(fitted.notes) == 1 and "768 MiB" in fitted.notes[0] and "not 4096" in fitted.notes[0]
    assert "too little" not in fitted.notes[0]
    unlimited = within_memory(Limits(memory_mb=0), memory(768))  # 0: no limit asked, one given all the same
    assert unlimited.memory_mb == fitted.memory_mb and "not none" in unlimited.notes[0]


def test_the_staffs_lower_limits_win() -> None:
    assert within_memory(Limits(memory_mb=50, tmp_mb=40), memory(768)) == Limits(memory_mb=50, tmp_mb=40)


def test_the_temporary_folders_are_memory_too() -> None:
    fitted = within_memory(Limits(memory_mb=50, tmp_mb=512), memory(768))
    assert (fitted.memory_mb, fitted.tmp_mb) == (50, 768 - GRADER_MB - SERVER_MB)
    assert fitted.notes[0].startswith(f"its temporary folders hold {fitted.tmp_mb} MiB, not 512: ")


def test_each_worker_gets_its_share() -> None:
    fitted = within_memory(Limits(), memory(4096), workers=3)
    assert fitted.memory_mb == (4096 - GRADER_MB - 3 * SERVER_MB) // 3


def test_a_container_too_small_says_what_to_give() -> None:
    fitted = within_memory(Limits(), memory(512))
    assert fitted.memory_mb == CODE_FLOOR_MB
    assert f"at least {GRADER_MB + SERVER_MB + CODE_FLOOR_MB} MiB" in fitted.notes[0]


def test_an_allocation_the_limit_refused_reads_as_memory() -> None:
    torch_says = (
        "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 314572800 bytes. Error code 12 (Cannot allocate memory)"
    )
    for message in (torch_says, "MemoryError: ", "_ArrayMemoryError: Unable to allocate 1.2 GiB for an array"):
        assert (
            out_of_memory(message, 88)
            == "your code used more than 88 MiB of memory, the limit of the process running it"
        )
    assert out_of_memory("ValueError: shapes do not match", 88) is None
    assert out_of_memory(torch_says, 0) is None  # no limit: not ours


# ---------------------------------------------------------------- a child killed as its case starts


def test_a_child_killed_as_a_case_starts_gives_a_verdict_not_ebadf() -> None:
    """The OOM killer ends the child just after it said a case started: its progress and its output reach
    their ends in one wake-up of the grader. The grader reads the output to its end for the case before
    (drain), so the output's descriptor is closed when the loop comes to it: reading it raised EBADF and
    the grader died (issue 35)."""
    progress_r, progress_w = os.pipe()
    output_r, output_w = os.pipe()
    os.write(progress_w, b'{"event": "start", "case": "c"}\n')
    os.write(output_w, b"printed before the case\n")
    for fd in (progress_w, output_w):
        os.close(fd)
    assert select.select([progress_r, output_r], [], [], 5)[0] == [progress_r, output_r]
    attempt = Attempt.__new__(Attempt)  # the pipes of a job, without a server: the job already ended
    attempt.fds = {progress_r: "progress", output_r: "output"}
    attempt.lines = Lines(1 << 16, 1 << 20)
    attempt.log, attempt.how, attempt.hoard, attempt.hoarded = (
        ChildLog(1 << 16),
        "was killed by signal SIGKILL",
        None,
        False,
    )
    attempt.server = SimpleNamespace(sock=None)  # never listened to: the job has ended
    events = []
    for event in attempt.events(lambda: time.monotonic() + 60):
        events.append(event)
        if event and event.get("event") == "start":
            attempt.drain()  # as run_once does when a case starts
    assert events == [{"event": "start", "case": "c"}]
    assert attempt.fds == {} and "printed before the case" in attempt.log.text()


def test_a_server_dead_before_its_job_is_sent_gives_a_verdict(tmp_path: Path) -> None:
    """The OOM killer ended the grading server just after the grader found it alive: sending it the job
    raised BrokenPipeError and the grader died. Now the job's cases get a verdict naming the server."""
    with Worker(limits=Limits()) as worker:
        server = worker.start().ensure_server()
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=30)
        server.process.poll = lambda: None  # as in the moment before the grader would have seen it end
        result = grade(Assignment.find(ROOT), keeps_memory(tmp_path, mb=1), torch.device("cpu"), worker=worker)
    assert result.tests and all(t.score == 0 for t in result.tests)
    assert all("stopped with the grading server" in t.output for t in result.tests), result.tests[0].output


@pytest.mark.parametrize(("mb", "passes"), [(60, True), (120, False)])
def test_the_codes_limit_counts_from_what_it_inherits(tmp_path: Path, mb: int, passes: bool) -> None:
    """--memory-mb 88 is what the code may allocate beyond the server's own 770 MiB of data (torch), which its
    process inherits: 60 MiB more passes, 120 MiB is over it. An absolute limit of 88 MiB failed both."""
    body = f"_allocated = torch.ones({mb} << 18)  # {mb} MiB of float32, freed on return"
    folder = submission(tmp_path, wrap_attention(body))
    result = grade(Assignment.find(ROOT), folder, torch.device("cpu"), Limits(memory_mb=88))
    attention = [t for t in result.tests if t.case.problem == "scaled_dot_product_attention"]
    if passes:
        assert result.score == pytest.approx(6.0), attention[0].output
    else:
        counted = "your code used more than 88 MiB of memory"
        assert all(not t.passed and counted in t.output for t in attention), attention[0].output
        assert all(t.passed for t in result.tests if t.case.problem == "softmax")


# ---------------------------------------------------------------- end to end, in a memory cgroup of 768 MiB

CONTAINER_MB = 768  # Gradescope's default


def memory_cgroup(limit_mb: int) -> Path | None:
    """A fresh cgroup v1 memory cgroup of `limit_mb` (memory and swap); None where none can be made here."""
    root = Path("/sys/fs/cgroup/memory")
    if os.geteuid() != 0 or not (root / "memory.limit_in_bytes").exists():
        return None
    group = root / f"cs-basics-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(limit_mb * MiB))
        if (group / "memory.memsw.limit_in_bytes").exists():
            (group / "memory.memsw.limit_in_bytes").write_text(str(limit_mb * MiB))
    except OSError:
        with_rmdir(group)
        return None
    return group


def with_rmdir(group: Path) -> None:
    for _ in range(100):  # the last processes may take a moment to leave it
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


LIMIT_MB = CONTAINER_MB - GRADER_MB - SERVER_MB
COUNTED = f"your code used more than {LIMIT_MB} MiB of memory"  # RLIMIT_DATA stopped an allocation
# past RLIMIT_DATA's count: the job's own memory cgroup (its code's, its temporary folders' and what it copies of
# the server's), or the container's memory, whichever runs out first; the OOM killer ends the job's process
KILLED = (
    "was killed by signal SIGKILL during this case: the memory this grading runs in ran out",
    f"was killed by signal SIGKILL during this case: your code's processes held more than {2 * LIMIT_MB + SERVER_MB}",
)


@pytest.mark.parametrize(
    ("shared", "sandbox", "verdict"),
    [
        pytest.param(False, "bubblewrap", COUNTED, id="counted-bubblewrap", marks=needs_bubblewrap),
        pytest.param(False, "fallback", COUNTED, id="counted-fallback"),
        pytest.param(True, "fallback", KILLED, id="shared-fallback"),  # past RLIMIT_DATA: the OOM killer's
        pytest.param(True, "bubblewrap", KILLED, id="shared-bubblewrap", marks=needs_bubblewrap),
    ],
)
def test_a_hungry_submission_loses_its_problem_and_the_grader_finishes(
    tmp_path: Path, shared: bool, sandbox: str, verdict: str
) -> None:
    group = memory_cgroup(CONTAINER_MB)
    if group is None:
        pytest.skip("no cgroup v1 memory cgroup can be made here (needs root and /sys/fs/cgroup/memory)")
    try:
        results = tmp_path / "results.json"
        command = [sys.executable, "-m", "cs_basics.cli", "grade", "--project", str(ROOT), "--sandbox", sandbox]
        command += ["--submission", str(keeps_memory(tmp_path, shared=shared)), "--results", str(results), "--quiet"]
        if shared:  # released, as the staff would after reading it: `mmap` is no module the course allows (held
            # before any code runs), and it is the memory bounds that are tested
            command += ["--release", "scaled_dot_product_attention"]
        done = subprocess.run(
            command,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=240,
            preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())),
        )
    finally:
        with_rmdir(group)
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    data = json.loads(results.read_text())
    tests = data["tests"]
    softmax = [t for t in tests if t["name"].startswith("test_softmax")]
    attention = [t for t in tests if "attention" in t["name"]]
    assert softmax and all(t["score"] == t["max_score"] for t in softmax), softmax
    verdicts = verdict if isinstance(verdict, tuple) else (verdict,)
    lost = [t["score"] == 0 and any(v in said(data, t) for v in verdicts) for t in attention]
    assert attention and all(lost), attention[0]
    assert f"the code's memory limit is {LIMIT_MB} MiB" in done.stderr


# ---------------------------------------------------------------- shared memory, in either sandbox


@pytest.mark.parametrize(
    ("sandbox", "cgroup"),
    [
        pytest.param("bubblewrap", True, id="bubblewrap-its-own-cgroup", marks=needs_bubblewrap),
        pytest.param("bubblewrap", False, id="bubblewrap-no-cgroup", marks=needs_bubblewrap),
        pytest.param("fallback", False, id="fallback-no-cgroup"),
    ],
)
def test_shared_memory_past_the_limit_loses_its_case_in_either_sandbox(tmp_path: Path, sandbox: str, cgroup: bool):
    """1.5 GiB of shared anonymous, memfd or /dev/zero memory in each 4-d attention case under a 256 MiB limit,
    which RLIMIT_DATA does not count (a submission held 5.6 GiB under a 4 GiB limit with bubblewrap too): in the
    worker's job cgroup the OOM killer ends the case's process at its limit; without one, seccomp refuses shared
    anonymous memory and memfd_create, and /dev/zero cannot be opened in the job's own mount namespace (or written,
    under Landlock). Those cases are lost, the rest scored, and the grader finishes."""
    if cgroup and (why := memory_cgroup_problem()):
        pytest.skip(why)
    released = ("softmax", "scaled_dot_product_attention")  # on a loaded machine the OOM killer takes its time
    limits = Limits(memory_mb=256, tmp_mb=64, case_seconds=60, released=released)
    with Worker(sandbox, limits, cgroup=cgroup) as worker:
        result = grade(Assignment.find(ROOT), maps_shared_memory(tmp_path), torch.device("cpu"), worker=worker)
    mapped = [t for t in result.tests if "4d" in t.case.id]  # the cases whose Q has 4 dimensions
    verdict = f"held more than {256 + 64 + SERVER_MB} MiB of memory" if cgroup else "PermissionError"
    assert mapped and all(not t.passed and verdict in t.output for t in mapped), [t.output for t in mapped]
    assert all(t.passed for t in result.tests if t not in mapped), [t.output for t in result.tests if not t.passed]
    said = " ".join(result.notes)
    assert ("in a memory cgroup of its own" in said) == cgroup, said


# ---------------------------------------------------------------- the job cgroups of graders side by side

MAKE_AND_LEAVE = """
import os, sys
from cs_basics.harness.grading.sandbox.jobcgroup import make_job_cgroup
made = make_job_cgroup(256)
print(made.folder if not isinstance(made, str) else "REFUSED " + made, flush=True)
if sys.argv[1] == "dies":
    os._exit(0)  # as a grader killed before its cleanup: the folder stays
made.remove()
"""


def make_job_cgroup_in(*prefix: str, ends: str) -> subprocess.CompletedProcess:
    command = [*prefix, sys.executable, "-c", MAKE_AND_LEAVE, ends]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and not done.stdout.startswith("REFUSED"), (done.stdout, done.stderr[-2000:])
    return done


def test_a_job_cgroup_another_grader_holds_is_kept_whatever_pid_namespace_either_runs_in() -> None:
    """A grader run in a PID namespace of its own (a container's, or `unshare --pid` as this suite runs some)
    sees no /proc entry for a grader outside it: the pid in a job cgroup's name said its maker had died, and the
    grader removed that live grader's empty cgroup just before its next job joined it (the job then fell back to
    refusing shared memory). Whether a maker lives is the kernel's lock on the folder, not a pid looked up."""
    if why := memory_cgroup_problem():
        pytest.skip(why)
    if subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True).returncode:
        pytest.skip("`unshare --pid --fork --mount-proc` is refused here: no PID namespace of its own to run in")
    from cs_basics.harness.grading.sandbox.jobcgroup import JobCgroup, make_job_cgroup

    held = make_job_cgroup(256)
    assert isinstance(held, JobCgroup), held
    try:
        make_job_cgroup_in("unshare", "--pid", "--fork", "--mount-proc", ends="removes")
        assert held.folder.is_dir(), f"a grader in another PID namespace removed {held.folder}, which is in use"
    finally:
        held.remove()
    assert not held.folder.exists()


def test_a_job_cgroup_whose_grader_died_is_removed_by_the_next() -> None:
    if why := memory_cgroup_problem():
        pytest.skip(why)
    from cs_basics.harness.grading.sandbox.jobcgroup import JobCgroup, make_job_cgroup

    left = Path(make_job_cgroup_in(ends="dies").stdout.strip())
    assert left.is_dir(), f"the dead grader's {left} should be there until the next grader starts"
    following = make_job_cgroup(256)
    assert isinstance(following, JobCgroup), following
    following.remove()
    following.remove()  # nothing: a worker may be closed twice (its lock is closed once)
    assert not left.exists(), f"{left}, left by a grader that died, was not removed by the next"


def test_a_job_cgroup_that_cannot_be_locked_is_not_made_and_says_why(monkeypatch) -> None:
    """Where the folder takes no lock (an error other than "held"), nothing could tell it is in use: no cgroup,
    the sentence says why (the job refuses what it would not count instead), and no empty folder is left."""
    if why := memory_cgroup_problem():
        pytest.skip(why)
    import errno
    import fcntl

    from cs_basics.harness.cgroup import own_memory
    from cs_basics.harness.grading.sandbox.jobcgroup import PREFIX, make_job_cgroup

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    ours = f"{PREFIX}{os.getpid()}-*"  # this process's folders (the suite's other graders make theirs meanwhile)
    parent = own_memory().folder
    before = set(parent.glob(ours))
    monkeypatch.setattr(fcntl, "flock", no_locks)
    made = make_job_cgroup(256)
    assert isinstance(made, str) and "could not lock" in made and "No locks available" in made, made
    assert set(parent.glob(ours)) <= before, "the folder that could not be locked was left"
