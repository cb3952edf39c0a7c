"""What a course copies into its PrairieLearn course repository: `cs-basics autograder --platform prairielearn OUT/`.

OUT/questions/<question>/       info.json (gradingMethod External, externalGradingOptions), question.html
                                (a file upload for each file the student writes, pl-external-grader-results),
                                tests/ (a note: the cases are the grader's, in serverFilesCourse)
OUT/serverFilesCourse/cs_basics/ what the grader ships (bundle.grader_files: the handout's files, the student's
                                files cut to their stubs, the hidden cases, the carried path dependencies; never
                                the reference solution) and run.sh, the entrypoint
OUT/Dockerfile, OUT/README.md   the grading image (Debian's Python, uv from PyPI, the locked dependencies,
                                bubblewrap; linux/amd64, as PrairieLearn requires) and the commands to build and
                                push it

The image holds no course file: PrairieLearn pulls images from Docker Hub, where they are public, so
the cases and their fixtures stay in serverFilesCourse, which students cannot read.
"""

from __future__ import annotations

import json
import shutil
import tomllib
import uuid
from pathlib import Path

from cs_basics.harness.config import Assignment
from cs_basics.harness.course.bundle import CARRIED, grader_files
from cs_basics.harness.course.handout import write_files
from cs_basics.harness.grading.pipeline.upload import written_files

GRADER = "cs_basics"  # the folder in serverFilesCourse
VENV = "/opt/cs-basics/.venv"  # the image's environment (the locked dependencies, not the course's code)
DEFAULT_IMAGE = "DOCKERHUB_USER/cs-basics-grader:latest"
TIMEOUT = 180  # seconds PrairieLearn gives a grading job (its most: 600)
TOTAL_SECONDS = 150  # the grader's own limit, inside PrairieLearn's: the results file is always written in time
MEMORY_MB = (
    1280  # what the student's code may allocate: PrairieLearn's 2 GiB less the grader's 680 MiB (limits.py) is 1368
)

RUN_TEMPLATE = """#!/bin/sh
# PrairieLearn runs this for each submission, as root, in the course's grading image: it grades the
# files in /grade/student and writes /grade/results/results.json. PrairieLearn reads that file only when
# this exits 0: so 0 also when cs-basics says the submission holds nothing to grade (its status 1, and the
# file says gradable: false and names the file). Python's own status 1, an uncaught error, leaves the file
# saying "grading did not finish" with 0 points: that, like 2 (the staff must act), fails the job for the
# staff instead of giving the student the 0.
GRADE="${{CS_BASICS_GRADE_ROOT:-/grade}}"
export CS_BASICS_GRADE_ROOT="$GRADE"
cd "$(dirname "$0")" || exit 2
{pythonpath}"${{CS_BASICS_PYTHON:-{venv}/bin/python}}" -m cs_basics.cli grade --format prairielearn \\
    --submission "$GRADE/student" --total-seconds {total_seconds} --memory-mb {memory_mb}
status=$?
[ "$status" -eq 1 ] && grep -q '"gradable": false' "$GRADE/results/results.json" && exit 0
exit "$status"
"""


def run_script(carried: list[str]) -> str:
    """run.sh; the course's carried path dependencies (folders beside it) on PYTHONPATH, as an editable
    install would put them: the image installs none of the course's own code."""
    folders = ":".join(f"$PWD/{name}" for name in carried)
    pythonpath = f'PYTHONPATH="{folders}${{PYTHONPATH:+:$PYTHONPATH}}" ' if carried else ""
    return RUN_TEMPLATE.format(pythonpath=pythonpath, venv=VENV, total_seconds=TOTAL_SECONDS, memory_mb=MEMORY_MB)


RUN = run_script([])  # a course without path dependencies outside it


UV_VERSION = "0.13.9"  # the uv the images install from PyPI (pip refuses Debian's own Python: a venv of its own)

DOCKERFILE = f"""# The grading image of the course's PrairieLearn questions: Debian's Python, uv, the locked
# dependencies, bubblewrap. No course file: the grader and its cases come from serverFilesCourse at grading time.
# PrairieLearn runs linux/amd64 images only: docker build --platform linux/amd64 (README.md).
FROM debian:bookworm-slim
RUN apt-get update \\
    && apt-get install -y --no-install-recommends python3 python3-venv bubblewrap ca-certificates \\
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/uv && /opt/uv/bin/pip install --no-cache-dir --quiet uv=={UV_VERSION} \\
    && ln -s /opt/uv/bin/uv /usr/local/bin/uv
ENV UV_PYTHON_DOWNLOADS=never UV_PROJECT_ENVIRONMENT={VENV} UV_LINK_MODE=copy
WORKDIR /opt/cs-basics
COPY pyproject.toml uv.lock ./
# the same install the Gradescope bundle's setup.sh makes, without the course's own package or its path
# dependencies (they are in serverFilesCourse: run.sh puts them on PYTHONPATH)
RUN uv sync --frozen --no-dev --no-install-project --no-install-local --compile-bytecode && rm -rf /root/.cache/uv
"""

README = """# The course's PrairieLearn grader, as `cs-basics autograder --platform prairielearn` wrote it

1. Build and push the grading image (Docker Hub; PrairieLearn pulls it from there, so it is public and
   holds no course file). PrairieLearn runs linux/amd64 images only: on an ARM machine (an Apple-silicon
   Mac) a plain `docker build` makes an arm64 image every grading job fails on, so name the platform:

       docker build --platform linux/amd64 -t {image} .
       docker push {image}

   then sync it on the course's "Sync" page in PrairieLearn.
2. Copy `questions/{question}/` into the course repository's `questions/`, and `serverFilesCourse/{grader}/`
   into its `serverFilesCourse/` (students cannot read serverFilesCourse: the hidden cases are there).
3. Add the question to an assessment and submit `functional.py` as a student would.

The question's `info.json` names the image `{image}`; the grader runs `run.sh` with a {timeout}-second job
limit, networking off.
"""

QUESTION_HTML = """<pl-question-panel>
  <p>{title}</p>
  <p>Upload your {names} from <code>{paths}</code>. It is graded as <code>uv run cs-basics grade</code> grades
  it in the handout, with hidden cases besides the public ones (their inputs and messages stay hidden).</p>
</pl-question-panel>

<pl-file-upload file-names="{names}"></pl-file-upload>

<pl-submission-panel>
  <pl-external-grader-results></pl-external-grader-results>
  <pl-file-preview></pl-file-preview>
</pl-submission-panel>
"""


class PrairieLearnError(Exception):
    pass


def question_name(assignment: Assignment) -> str:
    project = tomllib.loads((assignment.root / "pyproject.toml").read_text()).get("project", {})
    return str(project.get("name") or assignment.root.name).replace("-", "_")


def info_json(assignment: Assignment, image: str) -> dict:
    name = question_name(assignment)
    return {
        "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"cs-basics/{name}")),
        "type": "v3",
        "title": f"{name}: {', '.join(assignment.problems)}",
        "topic": "Autograded code",
        "tags": ["cs-basics"],
        "singleVariant": True,
        "gradingMethod": "External",
        "externalGradingOptions": {
            "enabled": True,
            "image": image,
            "entrypoint": f"/grade/serverFilesCourse/{GRADER}/run.sh",
            "serverFilesCourse": [f"{GRADER}/"],
            "timeout": TIMEOUT,
            "enableNetworking": False,
        },
    }


def build(assignment: Assignment, out: Path, image: str = DEFAULT_IMAGE) -> list[Path]:
    """Write the question, the grader and the image's recipe under `out` (new or empty); return the files."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PrairieLearnError(f"{out} already exists and is not an empty folder; choose a new one")
    written = written_files(assignment)
    if not written:
        raise PrairieLearnError(
            f"no student file in {assignment.root} has a '# BEGIN SOLUTION' region: nothing for students to upload"
        )
    name = question_name(assignment)
    question = out / "questions" / name
    grader = out / "serverFilesCourse" / GRADER
    files: dict[Path, str] = {
        question / "info.json": json.dumps(info_json(assignment, image), indent=2) + "\n",
        question / "question.html": QUESTION_HTML.format(
            title=f"Write {', '.join(assignment.problems)}.",
            names=", ".join(p.name for p in written),
            paths=", ".join(p.as_posix() for p in written),
        ),
        question / "tests" / "README.md": (
            f"The cases of this question are the grader's own: serverFilesCourse/{GRADER}/ (the public ones "
            "as in the handout, the hidden ones beside them).\n"
        ),
        out / "Dockerfile": DOCKERFILE,
        out / "README.md": README.format(image=image, question=name, grader=GRADER, timeout=TIMEOUT),
    }
    shipped = grader_files(assignment)
    carried = sorted(
        {(CARRIED / rel.relative_to(CARRIED).parts[0]).as_posix() for rel in shipped if rel.is_relative_to(CARRIED)}
    )
    files[grader / "run.sh"] = run_script(carried)
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (grader / "run.sh").chmod(0o755)
    write_files(shipped, grader)
    files |= {grader / rel: "" for rel in shipped}
    for name_ in ("pyproject.toml", "uv.lock"):  # the image's build context: the dependencies, no course code
        shutil.copy2(grader / name_, out / name_)
        files[out / name_] = ""
    return sorted(files)
