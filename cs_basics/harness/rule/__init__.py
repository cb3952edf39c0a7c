"""The from-scratch rule: a problem earns its points only with code that computes its answer itself.

`scan` reads the code a problem reaches (never importing it; in a bounded process, `scanprocess`),
`record` sees the ATen operators its cases run (and, with `library` and `glue`, which library functions
ran them), `fromscratch` decides, with one definition for the grader and for the students' pytest run.
Imports the test library (`cs_basics.harness.config`) and nothing above; the pytest plugin and the
grader import it.
"""
