"""The grader of one untrusted submission: stage it, run its code in a sandbox, score it, write results.

By job, each a folder: `pipeline/` (one grading: stage, scan, run, score), `sandbox/` (the sandbox's policy and
its mechanism on the grader's side), `job/` (what runs inside the job, by path: the grading server and the child
it forks, the only place student code runs), `writers/` (the grade for each platform). `command` is
`cs-basics grade` for one submission, over the pipeline and the writers. Inside: command > writers > pipeline >
sandbox, and the job imports nothing of ours (`[tool.importlinter]`).
Imports the test library and the rule; the course's tools and `cs_basics.cli` import it.
"""
