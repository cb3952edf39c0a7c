"""Run a submission's code in a sandbox, under limits, and collect what it computed.

The grader never imports student code. A `Worker` starts a grading server (zygote.py), which
imports torch once, inside bubblewrap where it runs (its own PID and network namespaces, a view
of the filesystem that holds the Python environment and the worker's own folder and nothing of
the course's repository, `--die-with-parent`), else as a plain child (the fallback). For each job
the server forks a child that isolates itself further (see zygote.py) and runs the cases under a
uid of its own when the grader is root. The grader reads the child's progress and output from
channels it bounds, enforces a time limit per case, per import and per submission, stops a
problem's cases once its function has failed to return twice, and ends every process of the job
(by uid, which nothing can outrun, and by namespace) before it reads any result. A case that
hangs or kills the interpreter fails alone: a fresh child takes the remaining cases.

Each child gets its cases' inputs only once it says it has imported the submission. Hidden cases run
only after every public case, in children of their own, once /proc shows no process of the public phase
left (else they fail, saying why) and the public cases' outputs are read, in a job folder of their own
made only then (with the hidden cases' code, which the public phase's never holds), so nothing the code
printed or wrote before that can hold a hidden input. What the
children print from then on is kept per hidden case, never in the output students see at once.

The parts, a module each: `stopping` (stop signals, StaffError), `leases` (the jobs' uids, killing by uid),
`litter` (what a job leaves in the shared temporary folders), `bubblewrap` (which sandbox, bubblewrap's view),
`server` (the grader's end of the grading server), `worker` (a server and a uid, job after job), `attempts`
(one child over some cases: forked, or spawned where there is no fork server), `runs` (the phases of a
submission's cases and reading their outputs). This module gathers their public names.
"""

from cs_basics.harness.grading.attempts import Attempt, ChildLog, Lines, SpawnedAttempt, child_module, describe_exit
from cs_basics.harness.grading.bubblewrap import (
    SANDBOX_ENV,
    bubblewrap_runs,
    bubblewrap_sizes_tmpfs,
    bubblewrap_view,
    choose_sandbox,
    python_paths,
)
from cs_basics.harness.grading.leases import (
    LEASE_PREFIX,
    UID_BASE,
    UID_COUNT,
    UIDS_ENV,
    job_uid_range,
    kill_uid,
    lease_uid,
    process_uids,
    processes_of,
    take_lease,
)
from cs_basics.harness.grading.limits import Limits
from cs_basics.harness.grading.litter import LITTER, Hoard, remove_litter
from cs_basics.harness.grading.runs import CaseRun, RunState, read_outputs, run_cases
from cs_basics.harness.grading.server import Server
from cs_basics.harness.grading.stopping import STOP, StaffError, request_stop, stop_reason, stopping_on_signals
from cs_basics.harness.grading.worker import Worker, named_libraries, started_worker

__all__ = [
    "LEASE_PREFIX",
    "LITTER",
    "SANDBOX_ENV",
    "STOP",
    "UIDS_ENV",
    "UID_BASE",
    "UID_COUNT",
    "Attempt",
    "CaseRun",
    "ChildLog",
    "Hoard",
    "Limits",
    "Lines",
    "RunState",
    "Server",
    "SpawnedAttempt",
    "StaffError",
    "Worker",
    "bubblewrap_runs",
    "bubblewrap_sizes_tmpfs",
    "bubblewrap_view",
    "child_module",
    "choose_sandbox",
    "describe_exit",
    "job_uid_range",
    "kill_uid",
    "lease_uid",
    "named_libraries",
    "process_uids",
    "processes_of",
    "python_paths",
    "read_outputs",
    "remove_litter",
    "request_stop",
    "run_cases",
    "started_worker",
    "stop_reason",
    "stopping_on_signals",
    "take_lease",
]
