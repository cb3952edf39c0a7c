"""What this machine lets a test do, found by trying it as the test will, not guessed from who we are.

Root is no proof: in PrairieLearn's and Kubernetes' containers (podman or docker without --privileged) root
has no CAP_SYS_ADMIN, so `unshare --mount` and the grader's namespaces are refused. Each probe runs the real
thing once per process and says why it failed, for the skip's reason.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path


@functools.cache
def private_mount_refused() -> str | None:
    """Why `unshare --mount --propagation private` cannot run here (what test_fallback.py grades in), or None."""
    if os.geteuid() != 0:
        return "a private mount namespace (unshare --mount) needs root"
    if shutil.which("unshare") is None:
        return "no unshare here (util-linux): no private mount namespace"
    try:
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        return "`unshare --mount --propagation private true` did not return"
    if done.returncode != 0:
        return f"`unshare --mount` is refused here (a container without CAP_SYS_ADMIN?): {done.stderr.strip()}"
    return None


def alive(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie, waiting for whoever inherited it, has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")
