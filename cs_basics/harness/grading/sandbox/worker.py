"""A worker: one grading server and one uid of its own, reused for one submission after another."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cs_basics.harness.grading.sandbox.attempts import Attempt, ChildLog, SpawnedAttempt
from cs_basics.harness.grading.sandbox.bubblewrap import SANDBOX_ENV, bubblewrap_runs, choose_sandbox
from cs_basics.harness.grading.sandbox.folderlock import MEMORY_FOLDER, held_work_folder
from cs_basics.harness.grading.sandbox.jobcgroup import JobCgroup, job_memory_mb, make_job_cgroup
from cs_basics.harness.grading.sandbox.leases import (
    dying,
    kill_uid,
    lease_uid,
    processes_of,
    seconds_waiting_for_a_core,
)
from cs_basics.harness.grading.sandbox.limits import Limits
from cs_basics.harness.grading.sandbox.litter import (
    Hoard,
    become_subreaper,
    reap_orphans,
    remove_ipc,
    remove_litter,
    remove_tree,
)
from cs_basics.harness.grading.sandbox.policy import NETWORK_IPC_CALLS
from cs_basics.harness.grading.sandbox.server import ClonedServer, Server, install_tool
from cs_basics.harness.grading.sandbox.stopping import StaffError
from cs_basics.harness.portable import fork_server_runs, is_root, skipped, unix_module
from cs_basics.harness.rule.scanprocess import Scanner

if TYPE_CHECKING:
    from cs_basics.harness.grading.pipeline.staging import Overlay


def seccomp_known() -> bool:
    """Whether confine.py knows this machine's system calls (else no seccomp refuses the job anything)."""
    return os.uname().machine in NETWORK_IPC_CALLS


# what the grading server imports only once a job's code names a word (speed only), word -> module: einx's torch
# backend imports torch._dynamo, as long to import as torch itself, and most submissions never use einx; so does
# torch.utils.checkpoint at its first call (2.7 s of CPU in each child that calls it, before this)
WARM_ON_REQUEST = {"einx": "einx", "checkpoint": "torch._dynamo"}


def named_libraries(files: list[Path]) -> list[str]:
    """The modules of WARM_ON_REQUEST whose word is in the student's files (read within intake's bounds)."""
    texts = [path.read_bytes() for path in files]
    named = {module for word, module in WARM_ON_REQUEST.items() if any(word.encode() in text for text in texts)}
    return sorted(named)


class Overlays:
    """The files laid over each job's code (staging.Overlay), one set per course, made at the first job that
    needs it in a folder under `root` that no job's uid may list. The workers of a batch share one: a course's
    overlay is the same for each of them, so it is made (its files copied, its bytecode compiled) once a
    course, not once a worker."""

    def __init__(self, root: Path):
        self.root = root
        self.made: dict[Path, Overlay] = {}  # course root -> its overlay
        self.lock = threading.Lock()

    def __getitem__(self, course: Path) -> Overlay:
        return self.made[course]

    def get(self, course: Path, make: Callable[[Path], Overlay]) -> Overlay:
        """The course's overlay, made into a fresh folder by `make` where there is none yet (the other workers
        wait for it: they would make the same files)."""
        with self.lock:
            if course not in self.made:
                folder = self.root / "overlays" / str(len(self.made))
                folder.parent.mkdir(mode=0o700, exist_ok=True)  # no job's uid lists them; each job reads its links
                self.made[course] = make(folder)
            return self.made[course]


class Worker:
    """A grading server and a uid of its own (leased for the worker's life, so that no other grader on the
    machine takes it), reused for one submission after another."""

    def __init__(
        self,
        sandbox: str | None = None,
        limits: Limits | None = None,
        namespaces: bool = True,
        cgroup: bool = True,
        beside: Worker | None = None,
    ):
        """`beside`: a batch's first worker, whose template this one's server is copied from (`share`: torch
        imported once a batch), and in whose folder this one's is (in that server's view); closed after this one."""
        self.beside = beside if beside is not None and not beside.spawns else None
        self.template: Server | None = None  # the server the batch's workers' servers are copies of (share)
        self.sandbox = choose_sandbox(sandbox)
        self.asked = sandbox or os.environ.get(SANDBOX_ENV)  # the sandbox named (else bubblewrap where it runs)
        self.namespaces = namespaces  # False: as where the kernel refuses them (for tests of that case)
        self.limits = limits or Limits()
        self.spawns = not fork_server_runs()  # Windows, macOS: a fresh Python per attempt (SpawnedAttempt)
        self.uid, self.lease = None, None
        self.cgroup: JobCgroup | str | None = None  # its jobs' memory counted whatever the mapping; else why not
        self.cgroup_procs: int | None = None
        self.root, self.root_lock = None, None
        self.server: Server | None = None
        self.scanner = None
        try:  # what it holds (a uid, a cgroup, its folder and lock) given back at once if any of it fails
            self.acquire(cgroup)
        except BaseException:
            self.close()
            raise
        self.jobs = 0
        self.attempts = 0
        self.hide: list[str] = []  # folders no job may see besides the course's (a batch's folder of submissions)
        self.overlays = Overlays(self.root)  # the files laid over each job's code (a batch's workers share theirs)
        self.none_left = False  # no process of the uid is left, and no job started since (known by kill_uid)
        self.swept_left = 0  # without a uid: the processes the server's last sweep could not end

    def acquire(self, cgroup: bool) -> None:
        """The uid (leased), the job cgroup (False: as where none can be made, for tests), the work folder."""
        self.uid, self.lease = lease_uid() if is_root() and not self.spawns else (None, None)
        if self.uid is not None:  # a job's orphans come to the grader, not to a container's init that never reaps
            become_subreaper()
        if self.limits.memory_mb and not self.spawns:
            self.cgroup = make_job_cgroup(job_memory_mb(self.limits)) if cgroup else "none was asked for"
        self.cgroup_procs = self.cgroup.procs() if isinstance(self.cgroup, JobCgroup) else None
        # locked while the worker lives: the next worker removes it if this grader dies before it can (beside a
        # batch's first: in its folder, which its lock covers)
        if (
            self.beside is not None
            and not self.cgroup_counts_files()
            and self.beside.root.is_relative_to(MEMORY_FOLDER)
        ):
            self.beside = None  # its jobs' files in memory, which no cgroup of theirs would count: a folder of its own
        if self.beside is not None:
            beside = self.beside.root / "workers"
            beside.mkdir(mode=0o711, exist_ok=True)
            self.root, self.root_lock = Path(tempfile.mkdtemp(dir=beside)), None
        else:
            self.root, self.root_lock = held_work_folder(remove_tree, memory=self.cgroup_counts_files())
        self.root.chmod(0o711)  # the job's uid passes through to its own folder
        if self.spawns:
            install_tool(self.root)
        self.scanner = None if self.spawns else Scanner()  # started at its first scan; a fresh Python where none

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def isolated(self) -> bool:
        """Whether each job gets namespaces of its own (no network, private temporary folders)."""
        return self.namespaces and not self.spawns and self.ensure_server().namespaces

    @property
    def landlock(self) -> int:
        """The Landlock ABI that confines the files of each job without namespaces of its own (0: none)."""
        return 0 if self.spawns or self.isolated else self.ensure_server().landlock

    def describe(self) -> str:
        where = "a bubblewrap sandbox"
        if self.sandbox == "bubblewrap" and bubblewrap_runs().userns:
            where += " in a user namespace of its own (root may not make namespaces here)"
        elif self.sandbox == "fallback":
            why = "asked for" if self.asked == "fallback" else f"no bubblewrap: {bubblewrap_runs().why}"
            where = f"the fallback sandbox ({why})"
        if self.spawns:
            where += ", a fresh Python per attempt (the fork server needs Linux)"
        who = f"uid {self.uid}" if self.uid is not None else "the grader's own uid (not root)"
        if self.spawns:
            who = "the grader's own user"
        alone = "its own namespaces (no network, private /tmp)" if self.isolated else "no namespaces of its own"
        if self.isolated and not self.ensure_server().own_proc:
            alone += " but the container's /proc (a user namespace may not mount one of its own here)"
        if self.landlock:
            alone += f"; Landlock (ABI {self.landlock}) confines its files to the Python environment and its folder"
        elif not self.isolated and not self.spawns:
            alone += "; no Landlock here: its files are confined only by its uid's permissions"
        return f"graded in {where}, as {who}, with {alone}{self.confinement()}"

    def confinement(self) -> str:
        """What confines the job besides its files and uid (confine.py, jobcgroup.py), for `describe`."""
        if self.spawns:
            return ""
        said = ""
        if not self.isolated and seccomp_known():
            tcp = f", and TCP by Landlock's rules (ABI {self.landlock})" if self.landlock >= 4 else ""
            said += f"; no network: sockets other than Unix ones refused (seccomp){tcp}"
        if seccomp_known():
            said += "; no System V IPC (seccomp)"
        if isinstance(self.cgroup, JobCgroup):
            limit = self.cgroup.limit_mb
            said += f"; its memory counted whatever the mapping, in a memory cgroup of its own ({limit} MiB)"
        elif self.cgroup is not None and seccomp_known():
            said += "; shared anonymous memory and memfd_create refused (seccomp), as no memory cgroup counts them"
        return said

    def skipped(self) -> list[str]:
        """The defences this machine cannot give the job (a sentence each, for the grade's notes)."""
        if not self.spawns:
            return self.confinement_skipped()
        notes = [skipped("isolating the code (a uid of its own, namespaces, seccomp)", "Linux", "it runs as you")]
        if unix_module("resource") is None:
            notes.append(skipped("limiting the memory and file size of the code's process", "Unix"))
        return notes

    def confinement_skipped(self) -> list[str]:
        """What of the fallback's confinement the kernel or the machine could not give (confine.py, jobcgroup.py)."""
        notes = []
        if not seccomp_known():
            what = "refusing the job's process the network, System V IPC and memory RLIMIT_DATA does not count"
            notes.append(skipped(what, "x86_64 or aarch64", f"({os.uname().machine}) it may use them"))
        if isinstance(self.cgroup, str):
            what, counted = "counting all of the job's memory (a memory cgroup of its own)", "the cgroup's"
            instead = f"{self.cgroup}: shared anonymous memory and memfd_create are refused instead"
            if not self.isolated and not self.landlock:
                instead += ", and /dev/zero mapped shared is not counted"
            notes.append(skipped(what, f"a cgroup the grader may make ({counted} filesystem writable)", instead))
        if not self.isolated and self.landlock < 6:
            what = "keeping the job from abstract Unix sockets made outside it (another job's, the machine's)"
            instead = f"(Landlock ABI {self.landlock}) it may reach them"
            notes.append(skipped(what, "Landlock ABI 6 (Linux 6.12)", instead))
        return notes

    def attempt(self, job: dict, log: ChildLog) -> Attempt | SpawnedAttempt:
        """One child over the job's cases: forked by the server, or a fresh Python where there is none."""
        return SpawnedAttempt(self, job, log) if self.spawns else Attempt(self, job, log)

    def summary(self) -> dict:
        """Which sandbox, for the results file: {"name": "bubblewrap" or "fallback", "uid", "namespaces"}."""
        return {"name": self.sandbox, "uid": self.uid, "namespaces": self.isolated}

    def next_id(self) -> int:
        self.attempts += 1
        return self.attempts

    def new_job_dir(self) -> Path:
        """A job's folder, root's alone until hand_over opens it to the job's uid: what is staged there meanwhile
        (a submission's code, the hidden cases') is no other job's to read, at a path it could guess."""
        self.jobs += 1
        folder = self.root / "jobs" / str(self.jobs)
        folder.parent.mkdir(mode=0o711, exist_ok=True)
        folder.mkdir(mode=0o700)
        for sub in ("code", "inputs", "out", "work"):
            (folder / sub).mkdir()
        os.chmod(folder.parent, 0o711)
        return folder

    def hand_over(self, folder: Path) -> None:
        """As root: the job's uid may write only its out/ and work/ folders, and enter the job's folder by its group
        (the job's gid is its uid: zygote.become), which no other worker's job has: where the jobs see the work
        folders (a `TMPDIR` outside the folders each job's view replaces), the other workers' jobs, which share
        the first worker's folder (Worker's `beside`), can neither list nor enter it."""
        if self.uid is not None:  # first: the folder is root's alone (new_job_dir) until it is the job's
            os.chown(folder, 0, self.uid)
            os.chmod(folder, 0o750)
        for top, _, files in os.walk(folder):  # strings, and the kinds scandir read: ~250 paths a phase
            folders = [] if top == str(folder) and self.uid is not None else [(top, 0o755)]
            for path, mode in [*folders, *((os.path.join(top, name), 0o644) for name in files)]:
                try:
                    os.chmod(path, mode, follow_symlinks=False)
                except NotImplementedError:  # Windows (Python < 3.13): a link is left alone by looking first
                    if not os.path.islink(path):
                        os.chmod(path, mode)
        if self.uid is not None:
            for sub in ("out", "work"):
                os.chown(folder / sub, self.uid, self.uid)

    def start(self) -> Worker:
        """Start the grading server now, without waiting for it (it imports torch while the grader goes on).
        Where there is no fork server (Windows, macOS), each attempt starts its own Python instead: nothing to start."""
        if self.server is None and not self.spawns:
            self.server = self.new_server()
        return self

    def share(self) -> Worker:
        """Make this worker's server (started, maybe still importing torch) the template of a batch's: every worker's
        server, this one's too, is a copy of it (Server.clone, `new_server`), so no worker imports torch again. The
        template runs no job: a job's end (its server stuck, killed) ends only its worker's copy, never the others'."""
        if self.server is not None and self.template is None and not self.spawns:
            self.template, self.server = self.server, None
        return self

    def new_server(self) -> Server:
        """A copy of the batch's template (`share`) where it runs and its jobs get namespaces of their own, else a
        server of this worker's own. Jobs without namespaces would share the template's temporary folders (in
        bubblewrap: one tmpfs of `tmp_mb`) with every other worker's: there the first worker grades in the template
        itself, and the others each in a server of its own, as before."""
        source = self.beside.template if self.beside is not None else self.template
        if source is not None and not source.ended():
            try:
                namespaces = source.ready().namespaces
            except StaffError:  # it could not start: neither can a copy
                namespaces = False
            if namespaces:
                return source.clone(self.cgroup_procs)
            if source is self.template and not source.ended():
                return source
        return Server(self.sandbox, self.root, self.limits, self.cgroup_procs)

    def warm(self, names: list[str]) -> list[str]:
        """Have the grading server import `names` now (the course's: Assignment.warm), while the grader stages and
        scans, so that no job waits for them and no case pays for them; each name once a server. A copy of the
        batch's template that ran a job is in its job cgroup, where it imports nothing (zygote.join_job_cgroup):
        the template imports them, and a fresh copy of it takes the next job. Returns `names`."""
        if self.spawns:
            return names
        source = self.beside.template if self.beside is not None else self.template
        if self.server is None and source is not None:  # no copy yet: the template imports them, and its copies
            source.warm(names)  # have them (it may still be importing torch)
            return names
        self.start()
        server = self.server
        new = [n for n in names if n not in server.warmed]
        if new and isinstance(server, ClonedServer) and server.ran and not server.source.ended():
            server.source.warm(new)
            server.close()
            self.server = server.source.clone(self.cgroup_procs)
        else:
            server.warm(new)
        return names

    def cgroup_kills_all(self) -> bool:
        """Whether an OOM kill in the job cgroup ends every process in it (v2's memory.oom.group: jobcgroup.py)."""
        return isinstance(self.cgroup, JobCgroup) and (self.cgroup.folder / "memory.oom.group").exists()

    def cgroup_counts_files(self) -> bool:
        """Whether a memory cgroup counts what the jobs write to a tmpfs (where their work folder may be in memory)."""
        return isinstance(self.cgroup, JobCgroup)

    def ensure_server(self) -> Server:
        if self.server is None or self.server.ended():
            if self.server is not None:
                self.server.close()
            self.server = self.new_server()
        try:
            return self.server.ready()
        except StaffError:
            if not isinstance(self.server, ClonedServer):
                raise
        self.server = Server(self.sandbox, self.root, self.limits, self.cgroup_procs)  # its source ended meanwhile
        return self.server.ready()

    def end_processes(self, wait: bool = True) -> None:
        """Every process of this worker's jobs, gone: by their uid as root; else through the server, the
        subreaper of every process a job leaves (a grader that is not root has no uid to kill by), waiting
        for it to say so unless a job's attempt is still listening to it."""
        if self.uid is not None:
            self.none_left = kill_uid(self.uid)
            self.after_kill()
        elif self.server is not None:
            sweep = self.next_id()
            with contextlib.suppress(OSError):
                self.server.send({"op": "sweep", "id": sweep})
                deadline = time.monotonic() + 10
                while wait and time.monotonic() < deadline:
                    message = self.server.receive(deadline - time.monotonic())
                    if message is None or message.get("gone") or message.get("swept") == sweep:
                        self.swept_left = int((message or {}).get("left", 0) or 0)
                        break

    def after_kill(self) -> None:
        """Once no process of the uid is left: what the job left beside its files (System V objects, which outlive
        it without an IPC namespace of its own; the zombies of its orphans, which the grader adopts) gone."""
        reap_orphans(self.uid)
        remove_ipc(self.uid)

    def oom_kills(self) -> tuple[int, int] | None:
        """The OOM kills in the worker's job cgroup and the times its limit was reached; None where there is none."""
        return self.cgroup.oom_kills() if isinstance(self.cgroup, JobCgroup) else None

    def killed_for_memory(self, before: tuple[int, int] | None) -> str:
        """What to add to the sentence of a job that died during a case, where its cgroup's limit ended it."""
        return self.cgroup.killed(before) if isinstance(self.cgroup, JobCgroup) else ""

    def seconds_waiting_for_a_core(self) -> float | None:
        """How long the threads of the worker's jobs have waited for a core (other work had it), as the grader reads
        it in /proc by their uid, never as a job says; None without a uid of their own (or where the kernel does
        not keep it): a case's clock then counts wall time (pipeline/caseclock.py)."""
        return None if self.uid is None else seconds_waiting_for_a_core(self.uid)

    def end_job(self, job_id: int) -> None:
        """Every process of the job, gone."""
        self.end_processes(wait=False)  # the job's attempt reads the server's messages
        if self.server is not None:
            with contextlib.suppress(OSError):
                self.server.send({"op": "kill", "id": job_id})

    def watch_hoard(self) -> Hoard | None:
        """Where the jobs have no namespaces, so no bounded temporary folders of their own: a watch on their uid."""
        return Hoard(self.uid, self.limits.tmp_mb) if self.uid is not None and not self.isolated else None

    def processes_left(self) -> str:
        """After a phase's end: "" where no process of the worker's jobs is left (seen in /proc by its uid as root,
        else counted by the server among its descendants), else a sentence naming one."""
        if self.uid is not None:
            left = processes_of(self.uid)
            if not left:
                return ""
            how = ", still ending after it was killed" if dying(left[0], self.uid) else ""
            return f"a process of your code (pid {left[0]}, uid {self.uid}{how}) could not be ended"
        if self.swept_left:
            return f"{self.swept_left} process(es) of your code could not be ended"
        return ""

    def clean_up(self, *folders: Path) -> None:
        """After a submission: nothing of it left running or lying around."""
        if not self.none_left:  # else none is left since its last phase, and no job started since
            self.end_processes()
        if self.uid is not None and not self.isolated:  # with namespaces its temporary folders went with it
            remove_litter(self.uid)
        for folder in folders:
            remove_tree(folder)

    def close(self) -> None:
        if self.scanner is not None:
            self.scanner.close()
        if self.uid is None:
            self.end_processes()  # through the server, while it is there
        for server in dict.fromkeys([self.server, self.template]):  # the template last: its copies end with it
            if server is not None:
                server.close()
        self.server = self.template = None
        if self.uid is not None:
            kill_uid(self.uid)
            self.after_kill()
        if self.cgroup_procs is not None:
            os.close(self.cgroup_procs)
            self.cgroup_procs = None
        if isinstance(self.cgroup, JobCgroup):
            self.cgroup.remove()
        if self.lease is not None:  # only once nothing of its jobs is left: the next holder starts clean
            self.lease.close()
            self.lease = None
        if self.root is not None:
            remove_tree(self.root)
        if self.root_lock is not None:
            os.close(self.root_lock)
            self.root_lock = None


@contextlib.contextmanager
def started_worker(sandbox: str | None, limits: Limits) -> Iterator[Worker | None]:
    """A worker whose grading server starts now, before the grader imports torch (`cs-basics grade`: the two
    imports run side by side); None where it cannot start here, and grading then says why as it always did."""
    try:
        worker = Worker(sandbox, limits)
    except (ValueError, StaffError):
        worker = None
    if worker is None:
        yield None
        return
    with worker:
        yield worker.start()
