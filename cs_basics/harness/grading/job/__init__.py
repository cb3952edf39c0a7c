"""What runs inside the job, by path, in a fresh interpreter: `zygote` (the grading server), `child` (the child it
forks: the only place student code runs), `confine` (the network, System V IPC and uncounted memory refused),
`landlock` (the files of a job without namespaces, confined), `spawned` (the child where there is no fork server).

`sandbox.server.install_tool` copies these files, with the sandbox's policy (sandbox/policy.py), out of the course's
repository; they import nothing of `cs_basics` (the student's package has that name), and load each other and the
policy by path. The tests import them as modules.
"""
