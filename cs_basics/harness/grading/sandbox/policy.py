"""The sandbox's policy in one place, as plain data (nsjail's config, apart from its mechanism): the folders a job
sees, the system calls its process is refused, the limits' defaults, and what each platform gets.

The mechanism reads it: on the grader's side by import (bubblewrap.py, worker.py, limits.py, jobcgroup.py); inside
the job by path. The job's files (grading/job/) run in a fresh interpreter that may import only the standard
library, so this file imports nothing: `server.install_tool` copies it beside them, and they load it from there
(job/child.py's `read_policy`; in the repository, from this folder). Change what a job may do here, and how it
is enforced there.
"""

# ---------------------------------------------------------------- the folders a job sees

# bubblewrap's view of the grading server (bubblewrap.bubblewrap_view), read-only: the system's programs and
# libraries and its settings, always; the top folders a merged /usr links (bound, or linked as this machine
# links them); then /proc, /dev, the Python environment read-only, fresh temporary folders, and the worker's own
# folder written. Never /root, /home or /work: nothing of the course's repository.
SERVER_READ_ONLY = ("/usr", "/etc")
SERVER_SYSTEM_TOPS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# a job with namespaces of its own (job/zygote.py, build_view): /tmp, /var/tmp and /dev/shm fresh, on one tmpfs of
# at most Limits.tmp_mb with its working folder; each name is its folder on that tmpfs
SCRATCH_FOLDERS = {"/tmp": "tmp", "/var/tmp": "var-tmp", "/dev/shm": "shm"}
SCRATCH_INODES = 1 << 16  # files the job may make there: each costs kernel memory that the tmpfs's size does not count

# a job without namespaces, under Landlock (job/zygote.py, landlock_rules): read and run beneath the system's
# programs and libraries, its settings, and what a process reads of itself and the devices; besides these, the
# Python environment and its import paths read, /dev read and written but /dev/zero, its own folder read and
# JOB_WRITTEN written. Nothing else: not the course's repository, another job's folder, the shared /tmp.
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys", "/nix/store")
JOB_WRITTEN = ("out", "work")  # the job folder's subfolders it writes

# ---------------------------------------------------------------- the system calls refused

# Each by a seccomp filter the job's process installs before any student code runs (job/child.py, job/confine.py),
# for good, and inherited by all it starts. Per machine: its AUDIT_ARCH, then the calls' numbers. A system call of
# another ABI (32-bit, x32) is refused by each filter (numbers and multiplexers that would reach the same). Where
# the machine is not one of these, no filter is installed and the grade's notes say so (worker.confinement).

# the only socket family a job may make (the grader's channel is a Unix socket pair passed in; so is
# socket.socketpair()): AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, ... answer EAFNOSUPPORT
SOCKET_FAMILY_ALLOWED = 1  # AF_UNIX

# job/confine.py: (AUDIT_ARCH, socket, socketpair (their family checked), io_uring_setup (IORING_OP_SOCKET makes a
# socket no filter on socket(2) sees), every System V IPC call and POSIX message queues' (what they make outlives
# the job: no IPC namespace), mmap (MAP_SHARED | MAP_ANONYMOUS) and memfd_create (refused where the job's memory
# is limited and no cgroup counts it: RLIMIT_DATA does not count their pages))
NETWORK_IPC_CALLS = {
    "x86_64": (0xC000003E, 41, 53, 425, (29, 30, 31, 67, 64, 65, 66, 220, 68, 69, 70, 71, 240), 9, 319),
    "aarch64": (0xC00000B7, 198, 199, 425, (194, 195, 196, 197, 190, 191, 192, 193, 186, 187, 188, 189, 180), 222, 279),
}

# job/child.py, no new process: (AUDIT_ARCH, clone (allowed with CLONE_THREAD: threads), clone3 (answers ENOSYS:
# a filter cannot read its flags, and C libraries fall back to clone), the calls refused outright: fork, vfork,
# execve, execveat)
PROCESS_CALLS = {
    "x86_64": (0xC000003E, 56, 435, (57, 58, 59, 322)),
    "aarch64": (0xC00000B7, 220, 435, (221, 281)),
}
# job/child.py, from the submission's import on: no fresh program (execve, execveat), which would start without
# the dispatcher's refusal
EXEC_CALLS = {"x86_64": (59, 322), "aarch64": (221, 281)}
# job/child.py: kill(2) of a process group (pid 0 or below -1) refused (kill(getppid(), SIGSTOP) in a PID namespace)
KILL_CALLS = {"x86_64": 62, "aarch64": 129}
# job/child.py: the calls that free or replace the evidence channel's descriptor, refused on it: (close, dup2 (None:
# aarch64 has only dup3), dup3, close_range (answers ENOSYS over it))
DESCRIPTOR_CALLS = {"x86_64": (3, 33, 292, 436), "aarch64": (57, None, 24, 436)}

# ---------------------------------------------------------------- the limits' defaults

# sandbox/limits.py's Limits; `cs-basics grade`'s options and the course's config change them
LIMITS = {
    "case_seconds": 20.0,  # each case; the reference needs milliseconds
    "import_seconds": 120.0,  # importing the submission (and the device's start-up)
    "total_seconds": 270.0,  # the whole submission: any submission is graded in under 5 minutes
    "timeouts_per_problem": 2,  # after this many cases of a problem ran out of time, its other cases are not run
    # what the submission's code may allocate (RLIMIT_DATA, counted from the fork server's own data, which its
    # process inherits); lowered to what the container's memory leaves (limits.within_memory)
    "memory_mb": 4096,
    "file_mb": 64,  # the largest file the child may write
    "tmp_mb": 512,  # what the job's /tmp, /var/tmp, /dev/shm and working folder hold together (memory)
    "output_kb": 64,  # how much of the child's stdout and stderr is kept
    "processes": 256,  # RLIMIT_NPROC, when the child runs under its own uid
    "progress_line_kb": 64,  # a longer line on the progress channel is dropped
    "progress_mb": 16,  # the most the grader reads from the progress channel of one job
}

# What the grader holds besides the submission's code, for fitting the code's limit into the memory the
# machine gives (docs/benchmarks.md, "Memory"): the grader and each worker's grading server import torch,
# about 300 MiB of their own each (torch 2.15's native start-up and its Python objects), beside the pages
# of torch's libraries they share and the scan process; one grading of the reference peaked at 633 MiB.
GRADER_MB = 340
SERVER_MB = 340  # each worker: its grading server and scan process, and what a child copies of the server's pages
CODE_FLOOR_MB = 64  # the least a submission's code is given, whatever the container: below it correct code fails

# ---------------------------------------------------------------- what each platform gets

# sys.platform's prefix: what isolates a job there at most, for the reader (docs/grading.md). The mechanism
# decides by trying (portable.fork_server_runs, bubblewrap.bubblewrap_runs, the server's unshare, landlock_abi),
# never from this table: a container may refuse what its platform offers; the grade's notes say what it gave.
PLATFORMS = {
    "linux": (
        "a fork server inside bubblewrap where it runs (else the fallback, a plain child); each job forked, with "
        "namespaces of its own where the kernel allows them (else Landlock on its files), its own uid as root, "
        "the seccomp filters above, a memory cgroup where the grader can make one, and the limits"
    ),
    "darwin": "a fresh Python per group of cases (spawned.py) under the resource limits it has; no uid of its own, "
    "no namespaces, no seccomp",
    "win32": "a fresh Python per group of cases (spawned.py); no resource limits, no uid, no namespaces, no seccomp",
}
