"""The child where there is no fork server (Windows, macOS): a fresh Python for one group of a job's cases.

Run by path (`python -I spawned.py`), never imported, and started by the grader (attempts.SpawnedAttempt)
once per group of cases that forbid the same operators, as the fork server's child forks once per
group. The grader writes the job (JSON) to its stdin and reads progress events from its stdout and
what the code prints from its stderr: this process keeps its stdout for the events and points file
descriptor 1 at stderr's pipe, so that what the code prints cannot pass for an event. It sets the
resource limits the system has (none on Windows), then runs the cases (child.py). It has no uid of
the job's own, no namespaces and no seccomp: the grader's notes say so.
"""

import contextlib
import importlib.util
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def limit(job: dict) -> None:
    """The limits zygote.py sets, where this system has them (Unix); macOS refuses some, Windows has none."""
    try:
        import resource
    except ImportError:
        return
    limits = job["limits"]
    wanted = [(resource.RLIMIT_FSIZE, min(limits["file_mb"], limits["tmp_mb"]) << 20), (resource.RLIMIT_CORE, 0)]
    if limits.get("memory_mb"):
        wanted.append((resource.RLIMIT_DATA, limits["memory_mb"] << 20))
    for which, size in wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(which, (size, size))


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    progress = os.dup(1)
    os.dup2(2, 1)  # what the code prints goes to the output pipe, never the progress one
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    try:
        limit(job)
        import_paths = [p for p in sys.path if p and os.path.isdir(p)]
        # child.py beside this file, by path as the fork server loads it (never `cs_basics`: the student's name)
        spec = importlib.util.spec_from_file_location("_grading_child", HERE / "child.py")
        child = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(child)
        child.run_job(job, progress, False, import_paths)
    except BaseException as err:  # before any student code: the staff must hear of it
        with contextlib.suppress(OSError):
            message = {"event": "staff_error", "message": f"{type(err).__name__}: {err}"}
            os.write(progress, (json.dumps(message) + "\n").encode())
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(0)  # skip interpreter shutdown: atexit hooks a submission registered run no code


if __name__ == "__main__":
    main()
