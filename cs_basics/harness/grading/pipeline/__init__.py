"""One grading of one submission: `grade` (stage, scan, run, score), `staging` (a job's code: the submission's, the
course's laid over it), `intake` (reading a submission within bounds), `upload` (bare uploaded files laid out as a
submission), `runs` (the public then the hidden phase, outputs read back), `protocol` (the grader's check of every
line a child sends).

Imports the sandbox (grading/sandbox/), the rule and the test library; the writers and `grading.command` import it.
"""
