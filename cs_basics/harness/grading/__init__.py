"""The grader of one untrusted submission: stage it, run its code in a sandbox, score it, write results.

`grade` stages and scores; `sandbox` starts the grading server (`zygote`, run by path inside bubblewrap
or the fallback) whose forked `child` is the only place student code runs, under `limits`; `results`
writes Gradescope's results.json and the table; `command` is `cs-basics grade` for one submission.
Imports the test library and the rule; the course's tools and `cs_basics.cli` import it.
"""
