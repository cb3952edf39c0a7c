"""The grading server: imports torch once, then forks one isolated child per job of student code.

Run by path (`python -I zygote.py FD`), inside the sandbox the grader starts (bubblewrap where it
runs), never imported, and it never imports student code: only the children it forks do. It talks
to the grader over a SOCK_SEQPACKET socket, one JSON message each way:
- grader -> server: {"op": "run", "job": {...}} with three file descriptors (the job's progress channel,
  its output pipe, and the pipe on which the grader says its inputs are written), or {"op": "kill", "id": N};
- server -> grader: {"ready": ...}, {"started": N}, {"ended": N, "how": "exited with status 0"}.
A batch's other workers get servers copied from the first ({"op": "clone"} with the copy's socket and its worker's
job cgroup: ForkServer.clone), so that torch is imported once a batch, not once a worker; a copy says it is ready
on its own socket.

Each job's child (`run_child`) cuts itself off before any student code runs:
- as root, new mount, network, IPC and PID namespaces: /tmp, /var/tmp, /dev/shm and its working folder fresh, on one
  tmpfs of at most tmp_mb (its job folder bound back), the course repository hidden, folders on the way to the Python
  environment that its uid could not enter replaced by ones it can, only loopback, and the child itself the student's
  process, the second of a PID namespace this server made for it, whose first (a `cat` this server holds, not a copy
  of it: see start_keeper, pid_namespace) it ends with the job, and with it all of the namespace (where the server
  could not make it, the child makes it and forks the student's process); where the kernel refuses namespaces, none
  of these, but Landlock where the kernel offers it: its files confined to the system's folders, the Python
  environment and its own job folder (`landlock_rules`);
- resource limits, then its own uid (as root), then the parent-death signal again (a uid change
  clears it), then it runs the cases (child.py).
"""

import contextlib
import ctypes
import errno
import fcntl
import gc
import importlib.util
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load(name: str):
    """A module beside this file, by path (never `cs_basics`: the student's package has that name)."""
    spec = importlib.util.spec_from_file_location(f"_grading_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LANDLOCK = load("landlock")  # the files of a job without namespaces, confined (landlock.py)
REACH = load("reach")  # the folders on the way to the Python environment, and the environment reached (reach.py)
VIEW = load("view")  # the job's view of the machine, in its own mount namespace (view.py)
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x08000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = VIEW.MS_NOSUID, VIEW.MS_NODEV, VIEW.MS_REC, VIEW.MS_PRIVATE
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 38, 36
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1
CHILD = []  # child.py, loaded once by the server (its folder is out of a job's view); its POLICY: sandbox/policy.py
CONFINE = []  # confine.py: the network, System V IPC and uncounted memory refused (see run_child)
JOB_CGROUP: list[int | None] = [None]  # the worker's job cgroup's cgroup.procs, opened by the grader (argv[2])
IN_JOB_CGROUP = [False]  # whether the server itself joined it, at its first job (join_job_cgroup)
IS_COPY = [False]  # whether this server is a copy of a batch's template (ForkServer.clone): only a copy joins it
WAKE = list(os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC))  # the server's wake-up pipe (ForkServer.serve); a job closes it
OWN_PROC = [True]  # whether a job with namespaces mounts a /proc of its own (see namespaces_allowed)
# the job's /proc shows only its uid's processes: not the keeper, which the server starts in its own mount and network
# namespaces (/proc/1/mountinfo and /proc/1/net would show the machine's mounts and sockets)
PROC_OPTIONS = "hidepid=2"
KEEPER = next((p for p in ("/usr/bin/cat", "/bin/cat") if os.access(p, os.X_OK)), None)  # see start_keeper


# ---------------------------------------------------------------- system calls


def set_death_signal(sig: int = signal.SIGKILL) -> None:
    libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


def enter_namespaces(job: dict, pid: bool = True) -> bool:
    """As root: new namespaces for this child and what it starts (its PID namespace too unless the server made it:
    ForkServer.pid_namespace); False where the kernel refuses them."""
    if libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET | (CLONE_NEWPID if pid else 0)) != 0:
        return False
    VIEW.build_view(job, CHILD[0].POLICY, REACH.blocked_ancestors)
    with contextlib.suppress(OSError):
        loopback_up()
    return True


def limit(job: dict) -> None:
    limits = job["limits"]
    inherited = data_bytes()  # this server's data, which the child inherits; unknown: the OOM killer's order only
    if limits.get("memory_mb") and inherited:  # what the code may allocate beyond it
        size = inherited + (limits["memory_mb"] << 20)
        resource.setrlimit(resource.RLIMIT_DATA, (size, size))
    with contextlib.suppress(OSError):  # where memory runs out all the same, the OOM killer ends this job first
        Path("/proc/self/oom_score_adj").write_text("1000")
    with contextlib.suppress(OSError, ValueError):  # never at its server's -1000 (join_job_cgroup): unkillable
        if int(Path("/proc/self/oom_score_adj").read_text()) < 0:
            raise RuntimeError("the job's oom_score_adj could not be raised from its server's")
    size = min(limits["file_mb"], limits["tmp_mb"]) << 20  # without namespaces, all that bounds a file there
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if job.get("uid") is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"], limits["processes"]))


def data_bytes() -> int:
    """What RLIMIT_DATA counts of this process now (VmData: its private writable memory); 0 where unknown."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmData:"):
                return int(line.split()[1]) << 10
    return 0


def become(uid: int | None) -> None:
    """The job's own uid for good; then the parent-death signal again, which the change cleared."""
    if uid is not None and os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        if os.getuid() == 0 or os.geteuid() == 0:
            raise SystemExit("could not drop root")
    set_death_signal()
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


# ---------------------------------------------------------------- Landlock: the job's files, without namespaces


def landlock_rules(job: dict, import_paths: list[str]) -> list[tuple[str, int]]:
    """(folder, what the job may do beneath it): the system's folders, the Python environment and its import
    paths, read; /dev read and written (/dev/null, a GPU's devices and their ioctls); the job's own folder read,
    its out/ and work/ written. Nothing else: not the course's repository (an import path that is, or holds,
    a folder the job must not see is left out), not another job's folder, not the shared temporary folders
    (the job's temporary files go to its working folder)."""
    policy, ll = CHILD[0].POLICY, LANDLOCK
    readable = REACH.visible([*policy.SYSTEM_FOLDERS, *job["python"], *import_paths], job)
    folder, written = job["dir"], ll.FS_ABI_1 | ll.FS_REFER | ll.FS_TRUNCATE
    rules = [(path, ll.READ) for path in readable]
    rules += [*ll.device_rules(), (folder, ll.READ)]
    return [*rules, *((f"{folder}/{sub}", written) for sub in policy.JOB_WRITTEN)]


def relay(pid: int, keeper: int | None = None) -> None:
    """Wait for `pid`, reaping any orphan meanwhile (the namespace's first process does), and end
    as it ended: its exit status, or 128 + the signal that killed it. With the namespace's `keeper`,
    end it first: every process left in the namespace ends with it."""
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        if done == pid:
            if keeper is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(keeper, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(keeper, 0)
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def start_keeper(job_fds: list[int]) -> tuple[int, int] | None:
    """The new PID namespace's first process: `cat` reading a pipe this process holds, started without copying
    this process (posix_spawn: a fork of it would copy torch's page tables, and free them at its end, at
    each phase of each job). It runs no code of ours and reaps nothing; it ends when this process kills it,
    or dies and closes the pipe. Returns (its pid, the pipe's end to keep), or None where there is no `cat`."""
    if KEEPER is None:
        return None
    read, write = os.pipe2(os.O_CLOEXEC)
    actions = [(os.POSIX_SPAWN_DUP2, read, 0), *((os.POSIX_SPAWN_CLOSE, fd) for fd in job_fds)]
    actions += [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
    try:  # no fallback past this point: a first process that failed to start has ended the namespace
        pid = os.posix_spawn(KEEPER, [KEEPER], {}, file_actions=actions)
    finally:
        os.close(read)
    return pid, write


def run_child(job: dict, progress: int, output: int, go: int, in_pid_namespace: bool = False) -> None:
    """In the forked child: isolate, then run the job's cases (whose inputs the grader writes once the child
    says, on `progress`, that it has imported the submission, and then tells it so on `go`). Never returns.
    `in_pid_namespace`: forked into the job's PID namespace, whose keeper the server started: no fork here."""
    try:
        os.set_inheritable(go, False)  # no program the code starts holds it
        signal.set_wakeup_fd(-1)  # the server's, not the job's
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # a job's, as it always was: the server's says why
        for fd in WAKE:
            os.close(fd)
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        set_death_signal()
        # the job's memory counted whatever the mapping: in the worker's job cgroup, else what it would not count
        # is refused (confine.py), and before any fork, so that every process of the job is in it
        joined = IN_JOB_CGROUP[0] or CONFINE[0].join_cgroup(JOB_CGROUP[0])  # born in it, where the server is
        refuse_shared_memory = not joined and bool(job["limits"].get("memory_mb"))
        isolated = os.getuid() == 0 and job.get("namespaces", True) and enter_namespaces(job, not in_pid_namespace)
        if isolated and refuse_shared_memory:
            CONFINE[0].seal_dev_zero()
        if isolated and not in_pid_namespace:  # this process stays outside the new PID namespace: its first child
            kept = start_keeper([progress])  # is the first inside
            if kept is None:  # a copy of this process as the first, which reaps orphans; the student's below it
                first = os.fork()
                if first:
                    relay(first)
                set_death_signal()
            student = os.fork()
            if student:
                relay(student, kept[0] if kept else None)
            if kept is not None:
                os.close(kept[1])
            set_death_signal()
        if isolated and OWN_PROC[0]:  # else the container's, bound by bubblewrap (see namespaces_allowed)
            VIEW.mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV, PROC_OPTIONS)
        limit(job)
        import_paths = [p for p in sys.path if p and os.path.isdir(p)]  # seen before the uid changes
        abi = 0 if isolated else job.get("landlock", 0)  # the files of a job without namespaces, confined
        ruleset = LANDLOCK.landlock_ruleset(landlock_rules(job, import_paths), abi) if abi else None
        if not isolated:  # the course's repository (an editable install's path) is no import path of the job's
            import_paths = REACH.visible(import_paths, job)
        if ruleset is not None and job.get("uid") is not None:
            import_paths = REACH.reach_python(job, import_paths)
        become(job.get("uid"))
        CHILD[0].install_filter(
            CONFINE[0].confinement_program(os.uname().machine, refuse_shared_memory, CHILD[0].POLICY)
        )
        if ruleset is not None:
            LANDLOCK.confine(ruleset)
            os.environ["TMPDIR"] = f"{job['dir']}/work"  # the shared temporary folders are out of its reach
            if "tempfile" in sys.modules:
                sys.modules["tempfile"].tempdir = None  # found again, from $TMPDIR
        CHILD[0].run_job(job, progress, isolated, import_paths, go)
    except BaseException as err:  # before any student code: the staff must hear of it
        with contextlib.suppress(OSError):
            message = {"event": "staff_error", "message": f"{type(err).__name__}: {err}"}
            os.write(progress, (json.dumps(message) + "\n").encode())
    finally:
        sys.stdout.flush()
        os._exit(0)  # skip interpreter shutdown: atexit hooks a submission registered run no code


# ---------------------------------------------------------------- the server


# libraries a submission may use, loaded once here instead of in each child (speed only: a child's uid can
# reach the whole environment, or the child says so before any student code runs); never the submission's
WARM = ("einops", "jaxtyping", "beartype")


def import_libraries(names: list[str] | tuple[str, ...]) -> None:
    for name in names:
        with contextlib.suppress(ImportError):
            __import__(name)


def warm_up() -> None:
    """What every job needs, loaded once here instead of in each child."""
    import numpy  # noqa: F401
    import torch
    from safetensors.torch import save
    from torch.utils._python_dispatch import TorchDispatchMode

    import_libraries(WARM)

    class Passthrough(TorchDispatchMode):  # as the record of operators: no torch._dynamo (see record._Recorder)
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    # tiny tensors: no thread pool starts before the forks. No backward pass: the autograd engine's first one
    # counts the GPUs, which starts CUDA's driver and a thread per GPU here, and a child forked after that
    # cannot use CUDA ("CUDA error: initialization error": every case of a grading on a GPU lost)
    with Passthrough():
        x = torch.ones(2, 3, requires_grad=True)
        torch.exp(x - x.amax(-1, keepdim=True)) @ x.mT
    save({"x": x.detach()})  # safetensors loads parts of numpy on its first save: in memory, never a file


def namespaces_allowed() -> tuple[bool, bool]:
    """Whether a child may make the namespaces `enter_namespaces` makes (a container may forbid them), and whether
    it may mount a /proc of its own there: in a user namespace (bubblewrap's, where root may not make namespaces)
    the kernel refuses one where the container masks parts of its /proc (podman's, Docker's); the job then sees
    the container's (OWN_PROC)."""
    if os.getuid() != 0:
        return False, False
    pid = os.fork()
    if pid == 0:
        found = 2  # no namespaces
        try:
            if libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWPID) == 0:
                found = 1  # namespaces, no /proc of its own
                VIEW.mount("", "/", flags=MS_REC | MS_PRIVATE)
                VIEW.mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV)  # no options: this fork is in the server's
                found = 0  # PID namespace, whose /proc a kernel before 5.8 would reconfigure for every process
        finally:
            os._exit(found)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return status in (0, 1), status == 0


def describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by signal {signal.Signals(os.WTERMSIG(status)).name}"
    code = os.WEXITSTATUS(status)
    if code > 128 and code - 128 in signal.valid_signals():  # relayed from inside the namespace
        return f"was killed by signal {signal.Signals(code - 128).name}"
    return f"exited with status {code}"


class ForkServer:
    """The grading server's own loop: one forked child per job (the grader's end of it: sandbox/server.py's Server)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.jobs: dict[int, int] = {}  # pid -> job id
        self.keepers: dict[int, tuple[int | None, int]] = {}  # a job's pid -> its PID namespace's keeper, its pipe
        self.own_pid_namespace: int | None = None  # where this server's children go back to (pid_namespace)
        self.namespaces = False  # whether its jobs get namespaces of their own (serve)
        self.clones: set[int] = set()  # the copies of it serving other workers (clone): never swept as a job's
        # orphans of a job (a double fork, setsid) become this server's children, not init's: where
        # there is no uid of the job's own to kill by (a grader that is not root), `sweep` ends them
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    def send(self, **message: object) -> None:
        self.sock.send(json.dumps(message).encode())

    def serve(self, namespaces: bool | None = None) -> None:
        """Say it is ready, then run jobs until the grader closes the socket. `namespaces`: known already (a copy)."""
        if namespaces is None:
            namespaces, OWN_PROC[0] = namespaces_allowed()
            if namespaces and KEEPER is not None:
                with contextlib.suppress(OSError):
                    self.own_pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.namespaces = namespaces
        self.send(
            ready=True,
            pid=os.getpid(),
            uid=os.getuid(),
            namespaces=namespaces,
            own_proc=OWN_PROC[0],
            landlock=LANDLOCK.landlock_abi(),
        )
        # a child's end wakes the server at once (SIGCHLD writes to this pipe): the grader hears "ended" then,
        # not at the next poll; the poll stays, for an orphan whose signal came while the server was busy
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(WAKE[1])
        while True:
            ready, _, _ = select.select([self.sock, WAKE[0]], [], [], 0.05)
            if WAKE[0] in ready:
                with contextlib.suppress(BlockingIOError):
                    while os.read(WAKE[0], 4096):
                        pass
            if self.sock in ready:
                data, fds, _, _ = socket.recv_fds(self.sock, 1 << 20, 4)
                if not data:
                    return  # the grader is gone
                self.handle(json.loads(data), fds)
            self.reap()

    def handle(self, message: dict, fds: list[int]) -> None:
        if message.get("op") == "run":
            job = message["job"]
            if not IN_JOB_CGROUP[0]:  # those the grader saw the code name (worker.WARM_ON_REQUEST); once in the
                import_libraries(job.get("warm", []))  # job cgroup, none: the child imports what is missing
                CHILD[0].list_forbidden_operators(job)  # once, and again after an import
            join_job_cgroup(job.get("cgroup_kills_all", False))
            keeper = self.pid_namespace(job, fds)
            pid = os.fork()
            if pid == 0:
                self.sock.close()
                for _, end in [*self.keepers.values(), *([keeper] if keeper else [])]:
                    os.close(end)  # no job may end another's namespace (nor its own: its end does)
                run_child(job, *fds, in_pid_namespace=keeper is not None)
            if keeper is not None:
                VIEW.check(libc.setns(self.own_pid_namespace, CLONE_NEWPID), "setns")  # the next child: as before
                self.keepers[pid] = keeper
            for fd in fds:
                os.close(fd)
            self.jobs[pid] = job["id"]
            self.send(started=job["id"])
        elif message.get("op") == "warm" and not IN_JOB_CGROUP[0]:  # the course's (Assignment.warm), sent as soon
            import_libraries(message.get("names", []))  # as the grader knows it; not counted as the jobs' memory
        elif message.get("op") == "clone":
            self.clone(fds)
        elif message.get("op") == "end_clone":  # one the grader found stuck
            if message.get("pid") in self.clones:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(message["pid"], signal.SIGKILL)
        elif message.get("op") == "sweep":
            self.sweep()
            self.send(swept=message.get("id"), left=len(self.descendants()))
        elif message.get("op") == "kill":
            for pid, job in self.jobs.items():
                if job == message.get("id"):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)  # its session; with namespaces, all of it
                        os.kill(pid, signal.SIGKILL)

    def clone(self, fds: list[int]) -> None:
        """A grading server for another worker of the batch: a copy of this one, torch imported and warm, that
        serves the socket `fds[0]` (its first message: ready) with its worker's job cgroup (`fds[1]`, where there
        is one). It starts no program and runs nothing of a job's before its fork: what this server holds is what
        a fresh server holds after its start, less the jobs it runs (their pipes are closed in the copy). It ends
        with this server (its parent-death signal), which the grader keeps until the batch is done."""
        try:
            pid = os.fork()
        except OSError:  # no copy: the grader sees its socket closed, and starts a server of the worker's own
            pid = None
        if pid == 0:
            try:
                self.sock.close()
                for _, end in self.keepers.values():
                    os.close(end)  # this server's jobs' namespaces end with them, not with the copy
                signal.set_wakeup_fd(-1)
                for fd in WAKE:
                    os.close(fd)
                WAKE[:] = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
                for fd in fds:
                    os.set_inheritable(fd, False)
                if JOB_CGROUP[0] is not None:  # this server's worker's: no job of the copy's may hold it
                    os.close(JOB_CGROUP[0])
                JOB_CGROUP[0] = fds[1] if len(fds) > 1 else None
                IN_JOB_CGROUP[0] = False  # its own worker's, at its first job
                IS_COPY[0] = True
                set_death_signal()
                copy = ForkServer(socket.socket(fileno=fds[0]))
                copy.own_pid_namespace = self.own_pid_namespace
                copy.serve(self.namespaces)
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        if pid is not None:
            self.clones.add(pid)

    def descendants(self) -> list[int]:
        """This server's children, less the copies it made for other workers (`clone`): a job's, and its orphans'."""
        return [pid for pid in children_of(str(os.getpid())) if pid not in self.clones]

    def pid_namespace(self, job: dict, fds: list[int]) -> tuple[int, int] | None:
        """For a job with namespaces: its PID namespace made here, with its keeper as its first process, so that
        the child forked next is the second, and the student's process itself (without, the child forks it:
        a second copy of torch's page tables a phase, made and freed). None where the child makes its own."""
        if self.own_pid_namespace is None or not job.get("namespaces", True) or libc.unshare(CLONE_NEWPID) != 0:
            return None
        try:
            return start_keeper(fds)
        except OSError:  # the namespace ended with its first process: the child makes one of its own
            VIEW.check(libc.setns(self.own_pid_namespace, CLONE_NEWPID), "setns")
            return None

    def sweep(self) -> None:
        """Every process below this server, gone: its children, and the orphans it inherited as they came,
        killed and reaped until none is left (a process killed can fork no more)."""
        for _ in range(1000):
            children = self.descendants()
            if not children:
                break
            for pid in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)
            self.reap()

    def reap(self) -> None:
        """Reap every child that has ended (jobs, and the orphans of jobs this server inherits), saying
        which jobs ended and how."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            job = self.jobs.pop(pid, None)
            self.clones.discard(pid)
            for job_pid, (keeper, end) in self.keepers.items():
                if keeper == pid:  # a keeper that ended first (killed): its pid may soon be another process's
                    self.keepers[job_pid] = (None, end)
            if pid in self.keepers:  # the job's namespace ends with its keeper, and every process left in it:
                keeper, end = self.keepers.pop(pid)  # gone before the grader hears the job ended
                os.close(end)
                if keeper is not None:  # not reaped yet: its pid is still its own
                    with contextlib.suppress(OSError):
                        os.kill(keeper, signal.SIGKILL)
                        os.waitpid(keeper, 0)
            if job is not None:
                self.send(ended=job, how=describe_status(status))


def join_job_cgroup(kills_all: bool) -> None:
    """The server into its worker's job cgroup, once, at its first job: each child it forks is then born there.
    A child that joined it itself waited at each phase: the kernel's lock for moving a process between cgroups
    first waits for an RCU grace period (11 to 14 ms here, 0.1 ms of CPU), and every fork on the machine waits
    behind it; a worker pays it once this way. What the server held before stays counted where it was (the
    kernel moves no charge), and it imports nothing more once in (ForkServer.handle): the jobs' limit counts no
    memory of its own but the pages it writes. Where the cgroup's OOM kill ends all of it (`kills_all`: v2's
    memory.oom.group), the server first makes itself unkillable (oom_score_adj -1000, which its children raise
    to 1000 before any student code runs); where it may not, its children join one by one, as before. A batch's
    template, which runs no job, never joins one: an OOM kill there would end every copy."""
    if IN_JOB_CGROUP[0] or JOB_CGROUP[0] is None or not IS_COPY[0]:  # a server of its own imports what later jobs
        return  # name: its children join one by one
    if kills_all:
        try:
            Path("/proc/self/oom_score_adj").write_text("-1000")
        except OSError:  # no CAP_SYS_RESOURCE (a user namespace's root)
            return
    IN_JOB_CGROUP[0] = CONFINE[0].join_cgroup(JOB_CGROUP[0])  # closes it: no child holds it
    JOB_CGROUP[0] = None


def children_of(pid: str) -> list[int]:
    """The processes whose parent is `pid`, from each process's /proc/PID/stat."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                if stat[stat.rindex(")") + 2 :].split()[1] == pid:  # after the name: state, then the parent
                    found.append(int(entry))
    return found


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    if len(sys.argv) > 2:  # the worker's job cgroup: each job's child joins it (no program this server runs holds it)
        JOB_CGROUP[0] = int(sys.argv[2])
        os.set_inheritable(JOB_CGROUP[0], False)
    set_death_signal()  # the grader gone, so is this server (and, through theirs, every child)
    # from outside (Slurm's scancel signals every process of a job): ends at once, saying so (Server.stop_signal)
    signal.signal(signal.SIGTERM, lambda number, _: os._exit(128 + number))
    with contextlib.suppress(OSError):  # where memory runs out with no job left to end, this server goes (the
        Path("/proc/self/oom_score_adj").write_text("500")  # grader starts another), not the grader
    warm_up()
    CHILD.append(load("child"))
    CONFINE.append(load("confine"))
    CHILD[0].preload_grader()  # the grader's own modules, before any job: its children inherit them
    # what the imports made, out of every later collection's walk: a collection writes to each object it walks,
    # and in a forked child each write to a page copies it (about 300 MiB of them a child shares with this server)
    gc.freeze()
    try:
        ForkServer(sock).serve()
    except (OSError, ValueError) as err:
        if err.errno not in (errno.EPIPE, errno.ECONNRESET, None):
            raise


if __name__ == "__main__":
    started = time.monotonic()
    main()
    os._exit(0)
