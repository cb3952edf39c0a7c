"""The grade written for each platform, side by side: `results` (Gradescope's results.json and the table),
`prairielearn`, `classroom` (GitHub Classroom), `junit` (JUnit XML for CI), and their registry `formats`
(`--format`, the platform found).

Imports the pipeline's Grade; never the sandbox or the job. `grading.command` and the course's tools import it.
"""
