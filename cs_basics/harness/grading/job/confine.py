"""What a job's process may not reach besides files, refused by the kernel before any student code runs: the
network, System V IPC, and memory that RLIMIT_DATA does not count where the job has no memory cgroup of its own.

Loaded by path by the grading server (zygote.py), beside child.py, never as part of `cs_basics` (the student's
package has that name); it imports nothing of ours. The server's child calls, as root before its uid changes,
`join_cgroup` (the worker's memory cgroup for its jobs, where the grader could make one: grading/sandbox/jobcgroup.py)
and, with namespaces of its own, `seal_dev_zero`; then, with its own uid, installs `confinement_program`:

- sockets of any family but AF_UNIX (AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, ...) and io_uring (whose
  IORING_OP_SOCKET makes a socket no filter on socket(2) sees) are refused: UDP, raw sockets and kernels without
  Landlock's TCP rules (ABI 4) included. The grader's own channel is a Unix socket pair passed in;
  `socket.socketpair()` is AF_UNIX too;
- every System V IPC call (shared memory, message queues, semaphores) and POSIX message queues: without an IPC
  namespace what they make outlives the job, for the next grading to read (the grader also removes what the
  job's uid owns when the job ends: litter.remove_ipc);
- where the job's memory is limited and no cgroup counts it: shared anonymous mappings (MAP_SHARED |
  MAP_ANONYMOUS) and memfd_create, whose pages RLIMIT_DATA does not count (a submission held 5.6 GiB under a
  4 GiB limit). /dev/zero mapped shared is such memory too: Landlock leaves it unwritable (landlock.device_rules),
  and in the job's own mount namespace `seal_dev_zero` makes it unopenable.

A system call of another ABI (32-bit, x32), which could reach these through other numbers or multiplexers
(socketcall, ipc), is refused.
"""

import contextlib
import ctypes
import errno
import os
import types

# seccomp: BPF over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]} (little-endian: an argument's
# low half is at its offset)
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
ARCH, NR, FIRST_ARG, FOURTH_ARG = 4, 0, 16, 40
X32_BIT = 0x40000000
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
MAP_SHARED, MAP_ANONYMOUS = 0x01, 0x20  # MAP_SHARED_VALIDATE (3) has MAP_SHARED's bit


def confinement_program(
    machine: str, refuse_shared_memory: bool, policy: types.ModuleType
) -> list[tuple[int, int, int, int]] | None:
    """The seccomp program (see above) of the sandbox's `policy` (its NETWORK_IPC_CALLS and SOCKET_FAMILY_ALLOWED:
    sandbox/policy.py, which the server loaded); None where the machine's system calls are not known there."""
    if machine not in policy.NETWORK_IPC_CALLS:
        return None
    arch, socket, socketpair, io_uring, ipc, mmap, memfd = policy.NETWORK_IPC_CALLS[machine]
    body = [(LD_W_ABS, None, None, ARCH), (JEQ_K, None, "deny", arch), (LD_W_ABS, None, None, NR)]
    body += [(JGE_K, "deny", None, X32_BIT), (JEQ_K, "family", None, socket), (JEQ_K, "family", None, socketpair)]
    body += [(JEQ_K, "deny", None, nr) for nr in (io_uring, *ipc)]
    if refuse_shared_memory:
        body += [(JEQ_K, "deny", None, memfd), (JEQ_K, "mapping", None, mmap)]
    body += [(JEQ_K, "allow", "allow", 0)]  # any other call
    blocks = {
        "family": [(LD_W_ABS, None, None, FIRST_ARG), (JEQ_K, "allow", "no_family", policy.SOCKET_FAMILY_ALLOWED)],
        "mapping": [(LD_W_ABS, None, None, FOURTH_ARG), (JSET_K, None, "allow", MAP_ANONYMOUS)],
        "mapping_shared": [(JSET_K, "deny", "allow", MAP_SHARED)],
    }
    returns = {"allow": RET_ALLOW, "deny": RET_ERRNO | errno.EPERM, "no_family": RET_ERRNO | errno.EAFNOSUPPORT}
    return assemble(body, blocks, returns)


def assemble(
    body: list[tuple[int, str | None, str | None, int]],
    blocks: dict[str, list[tuple[int, str | None, str | None, int]]],
    returns: dict[str, int],
) -> list[tuple[int, int, int, int]]:
    """BPF instructions from ones whose jumps name a block or a return (None: the next instruction)."""
    at, code = {}, list(body)
    for label, block in blocks.items():
        at[label] = len(code)
        code += block
    for i, label in enumerate(returns):
        at[label] = len(code) + i

    def offset(label: str | None, index: int) -> int:
        return 0 if label is None else at[label] - index - 1

    program = [(op, offset(jt, i), offset(jf, i), k) for i, (op, jt, jf, k) in enumerate(code)]
    return program + [(RET_K, 0, 0, value) for value in returns.values()]


def join_cgroup(procs: int | None) -> bool:
    """This process (and all it starts) into the worker's job cgroup, through its `cgroup.procs` opened by the
    grader (`procs`: a descriptor, closed here, so that no student code holds it); whether it moved."""
    if procs is None:
        return False
    try:
        os.write(procs, b"0")  # 0: the writer itself
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.close(procs)


MS_NODEV, MS_BIND, MS_REMOUNT, MS_NOSUID = 4, 4096, 32, 2


def seal_dev_zero() -> str | None:
    """In the job's own mount namespace: /dev/zero bound over itself without devices, so that it cannot be opened
    (a shared mapping of it is memory RLIMIT_DATA does not count); where that remount is refused (a user namespace
    the grader made in a container locks the mount's flags), /dev/null bound over it (which cannot be mapped).
    Nothing reaches the machine's /dev. None when sealed, else why not: the job goes on without it (the other
    shared mappings are refused all the same), and the grading never fails for it."""
    libc = ctypes.CDLL(None, use_errno=True)
    zero = b"/dev/zero"
    if not os.path.exists(zero):
        return None
    tries = (
        [(zero, MS_BIND), (None, MS_REMOUNT | MS_BIND | MS_NODEV | MS_NOSUID)],
        [(b"/dev/null", MS_BIND)],
    )
    why = None
    for steps in tries:
        for source, flags in steps:
            if libc.mount(source, zero, None, ctypes.c_ulong(flags), None) != 0:
                why = f"sealing /dev/zero: {os.strerror(ctypes.get_errno())}"
                break
        else:
            return None
    return why
