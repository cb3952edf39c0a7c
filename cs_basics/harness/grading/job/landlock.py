"""Landlock, by ctypes: a process confines itself, and all it starts, to the file hierarchies it names (the
files of a job without namespaces of its own; zygote.landlock_rules says which folders, the sandbox's policy
which system folders).

Loaded by path by the grading server (zygote.py), beside it, never as part of `cs_basics`; it imports nothing of
ours.
"""

import contextlib
import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


# Landlock (Linux 5.13+) lets a process confine itself, and all it starts, to the file hierarchies it names:
# no namespace, no privilege (docs.kernel.org, userspace-api/landlock). The same system call numbers on x86_64
# and aarch64 (asm-generic's); each access right comes with the ABI that brought it.
LANDLOCK_CALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}  # create_ruleset, add_rule, restrict_self
LANDLOCK_CREATE_RULESET_VERSION, LANDLOCK_RULE_PATH_BENEATH = 1, 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1, 2, 4, 8
FS_ABI_1 = (1 << 13) - 1  # execute, write, read, read_dir, remove and make of each kind
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
SHARED_DEVICE_FOLDERS = ("shm", "mqueue")  # in /dev: other processes' files, never a job's (device_rules)


FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV  # what a rule on a file may hold
# ABI 4: TCP's bind and connect handled, and no port allowed (confine.py refuses every other family besides);
# ABI 6: no abstract Unix socket made outside the job's domain reached, no process outside it signalled
NET_BIND_TCP, NET_CONNECT_TCP, SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2, 1, 2


class RulesetAttr(ctypes.Structure):  # a kernel of an older ABI takes it whole while the fields it lacks are 0
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]  # fmt: skip


class PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The Landlock ABI this kernel offers; 0 where it offers none (or a seccomp profile refuses it)."""
    calls = LANDLOCK_CALLS.get(os.uname().machine)
    if calls is None:
        return 0
    return max(libc.syscall(calls[0], None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION), 0)


def device_rules() -> list[tuple[str, int]]:
    """/dev listed, each of its entries read (ioctls on its devices too), and each but /dev/zero written (/dev/null, a
    GPU's devices): opened for writing, /dev/zero mapped shared is memory that RLIMIT_DATA does not count (confine.py).
    Never /dev/shm or /dev/mqueue: other processes' files (a grader whose TMPDIR is in /dev/shm keeps its work folder
    there, hidden cases' code included), which a rule on /dev itself would open to the job. A device made after the
    job started (the first CUDA start on the machine may make /dev/nvidia-uvm) is not opened by this job."""
    rules = [("/dev", FS_READ_DIR)]
    with contextlib.suppress(OSError), os.scandir("/dev") as entries:
        for entry in entries:
            if entry.name not in SHARED_DEVICE_FOLDERS and not entry.is_symlink():
                written = 0 if entry.name == "zero" else FS_WRITE_FILE | FS_TRUNCATE
                rules.append((entry.path, READ | FS_IOCTL_DEV | written))
    return rules


def landlock_ruleset(rules: list[tuple[str, int]], abi: int) -> int:
    """A ruleset of `rules` ((folder, what the job may do beneath it): zygote.landlock_rules), made while this
    process may still open every folder (before the uid changes); applied by `confine`. Each right the ABI does
    not know is left out."""
    known = FS_ABI_1 | (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0)
    known |= FS_IOCTL_DEV if abi >= 5 else 0
    create, add, _ = LANDLOCK_CALLS[os.uname().machine]
    network = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    attr = RulesetAttr(known, network, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    ruleset = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0)
    _check(0 if ruleset >= 0 else -1, "landlock_create_ruleset")
    for path, access in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:  # a folder this machine lacks (/lib32)
            continue
        try:
            rule = PathBeneathAttr(access & known if os.path.isdir(path) else access & known & FILE_RIGHTS, fd)
            _check(libc.syscall(add, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0), f"landlock {path}")
        finally:
            os.close(fd)
    return ruleset


def confine(ruleset: int) -> None:
    """This process and what it starts, confined to the ruleset's folders for good (no_new_privs is set)."""
    _check(libc.syscall(LANDLOCK_CALLS[os.uname().machine][2], ruleset, 0), "landlock_restrict_self")
    os.close(ruleset)
