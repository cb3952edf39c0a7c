"""What a course copies into its PrairieLearn course repository: `cs-basics autograder --platform prairielearn OUT/`.

OUT/questions/<question>/       info.json (gradingMethod External, externalGradingOptions), question.html
                                (a file upload for each file the student writes, pl-external-grader-results),
                                tests/ (a note: the cases are the grader's, in serverFilesCourse)
OUT/serverFilesCourse/cs_basics/ the course repository, hidden cases included, and run.sh, the entrypoint
OUT/Dockerfile, OUT/README.md   the grading image (the machine's Python, the locked dependencies, bubblewrap)
                                and the commands to build and push it

The image holds no course file: PrairieLearn pulls images from Docker Hub, where they are public, so
the cases, their fixtures and the solution stay in serverFilesCourse, which students cannot read.
"""

from __future__ import annotations

import json
import shutil
import tomllib
import uuid
from pathlib import Path

from cs_basics.harness.config import Assignment
from cs_basics.harness.course.bundle import course_files
from cs_basics.harness.grading.upload import written_files

GRADER = "cs_basics"  # the folder in serverFilesCourse
VENV = "/opt/cs-basics/.venv"  # the image's environment (the locked dependencies, not the course's code)
DEFAULT_IMAGE = "DOCKERHUB_USER/cs-basics-grader:latest"
TIMEOUT = 180  # seconds PrairieLearn gives a grading job (its most: 600)
TOTAL_SECONDS = 150  # the grader's own limit, inside PrairieLearn's: the results file is always written in time
MEMORY_MB = (
    1280  # what the student's code may allocate: PrairieLearn's 2 GiB less the grader's 680 MiB (limits.py) is 1368
)

RUN = f"""#!/bin/sh
# PrairieLearn runs this for each submission, as root, in the course's grading image: it grades the
# files in /grade/student and writes /grade/results/results.json. PrairieLearn reads that file only when
# this exits 0: so 0 also when cs-basics says the submission holds nothing to grade (its status 1, and the
# file says gradable: false and names the file). Python's own status 1, an uncaught error, leaves the file
# saying "grading did not finish" with 0 points: that, like 2 (the staff must act), fails the job for the
# staff instead of giving the student the 0.
GRADE="${{CS_BASICS_GRADE_ROOT:-/grade}}"
export CS_BASICS_GRADE_ROOT="$GRADE"
cd "$(dirname "$0")" || exit 2
"${{CS_BASICS_PYTHON:-{VENV}/bin/python}}" -m cs_basics.cli grade --format prairielearn \\
    --submission "$GRADE/student" --total-seconds {TOTAL_SECONDS} --memory-mb {MEMORY_MB}
status=$?
[ "$status" -eq 1 ] && grep -q '"gradable": false' "$GRADE/results/results.json" && exit 0
exit "$status"
"""

DOCKERFILE = f"""# The grading image of the course's PrairieLearn questions: Debian's Python, the locked dependencies,
# bubblewrap. No course file: the grader and its cases come from serverFilesCourse at grading time.
FROM debian:bookworm-slim
RUN apt-get update \\
    && apt-get install -y --no-install-recommends python3 python3-venv bubblewrap ca-certificates \\
    && rm -rf /var/lib/apt/lists/*
COPY --from=ghcr.io/astral-sh/uv:0.13.9 /uv /usr/local/bin/uv
ENV UV_PYTHON_DOWNLOADS=never UV_PROJECT_ENVIRONMENT={VENV} UV_LINK_MODE=copy
WORKDIR /opt/cs-basics
COPY pyproject.toml uv.lock ./
# the same install the Gradescope bundle's setup.sh makes, without the course's own package
RUN uv sync --frozen --no-dev --no-install-project --compile-bytecode && rm -rf /root/.cache/uv
"""

README = """# The course's PrairieLearn grader, as `cs-basics autograder --platform prairielearn` wrote it

1. Build and push the grading image (Docker Hub; PrairieLearn pulls it from there, so it is public and
   holds no course file):

       docker build -t {image} .
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
        grader / "run.sh": RUN,
    }
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (grader / "run.sh").chmod(0o755)
    for rel in course_files(assignment):
        target = grader / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(assignment.root / rel, target)
        files[target] = ""
    for name_ in ("pyproject.toml", "uv.lock"):  # the image's build context: the dependencies, no course code
        shutil.copy2(assignment.root / name_, out / name_)
        files[out / name_] = ""
    return sorted(files)
