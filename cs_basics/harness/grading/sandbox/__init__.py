"""The sandbox, the grader's side: its policy as plain data (`policy`: the folders a job sees, the system calls it
is refused, the limits' defaults, what each platform gets) apart from its mechanism: `bubblewrap` (which sandbox,
bubblewrap's view), `leases` (the jobs' uids, killing by uid), `litter` (what a job leaves in the shared temporary
folders), `jobcgroup` (the worker's memory cgroup for its jobs), `server` (the grader's end of the grading server,
and the job's files it installs), `worker` (a server and a uid, job after job), `attempts` (one child over some
cases: forked, or spawned), `limits` (what a submission's code runs under), `stopping` (stop signals, StaffError).

Imports the test library and the rule's scan process, never the pipeline or the writers (they import it); what
runs inside the job (grading/job/) it starts by path, never by import.
"""
