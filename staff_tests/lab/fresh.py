"""A fresh Debian 12 machine, as a newcomer meets it (issue 42): root in a container, the repository cloned under
/root (mode 700), python3, pip and git only (no python3-venv, pipx or curl), then the README's lines followed
literally. The images are built as the lab builds the platforms' (staff_tests/lab/images.py): with the network
and this machine's uv cache at build only (the README's install lines, and the first `uv run`, which installs
the locked environment), none when a job runs. That environment is installed in a layer of its own, from
the checkout's pyproject.toml and uv.lock, before the clone: the same one the first `uv run` installs, kept while
the lock is unchanged, so a change to the code rebuilds only the clone's layers.

- `fresh-debian`: the README's lines run in it at build; `fresh-debian-bubblewrap`: the same, then
  `apt-get install bubblewrap`, as the README's grading section says.
- Each job runs in a container as podman makes one by default (root, no CAP_SYS_ADMIN, `--network=none`):
  `uv run cs-basics grade`, a slice of `uv run pytest`, and a spy's grading, from /root/cs_basics.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

from . import images, platforms
from .submissions import SUBMISSIONS

ROOT = Path(__file__).resolve().parents[2]
CHECKOUT = "/root/cs_basics"
LIMITS = ["--network=none", "--cpus", "2", "--memory", "8g"]
# the slice of `uv run pytest` a job runs: the graded tests, and the grader's tests this issue is about
PYTEST_SLICE = [
    "tests",
    "staff_tests/test_sandbox.py::test_files_left_in_the_temporary_folders_are_gone_after_grading",
    "staff_tests/test_sandbox.py::test_without_namespaces_a_python_the_jobs_uid_cannot_enter_is_reached_and_graded_in_full",
    "staff_tests/test_sandbox.py::test_killing_a_uid_with_no_process_says_none_is_left_and_starts_nothing",
    "staff_tests/test_sandbox.py::test_killing_a_uid_ends_a_hidden_survivor_and_says_none_is_left",
    "staff_tests/test_grading_costs.py::test_killing_by_uid_never_forks_the_grader_where_setpriv_is_there",
    "staff_tests/test_grading_costs.py::test_a_submission_ends_the_jobs_processes_once_after_each_phase",
    "staff_tests/test_what_students_see.py::test_no_hidden_input_reaches_a_field_students_see_at_once",
]

LOCKED = ("pyproject.toml", "uv.lock")  # what the environment's layer is built from
DOCKERFILE = """FROM {base}
# a fresh Debian 12 as the issue found it: python3, pip and git (to clone); no python3-venv, pipx or curl
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip git
# the README's install lines, as a newcomer copies them (they need nothing of the checkout)
RUN {debian_first}
RUN {install}
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/root/.uv/bin
# the locked environment the first `uv run` installs, from the checkout's pyproject.toml and uv.lock alone, in a
# layer podman keeps while they are unchanged (torch's wheels from this machine's uv cache): every change to the
# code would otherwise copy and commit torch again, 13 minutes of each suite
COPY locked/ {checkout}/
RUN cd {checkout} && uv sync --frozen --no-install-project --quiet && rm pyproject.toml uv.lock
COPY repo/ /tmp/repo/
RUN git -C /tmp/repo init -q && git -C /tmp/repo add -A \\
    && git -C /tmp/repo -c user.name=lab -c user.email=lab@localhost commit -qm lab \\
    && git clone -q /tmp/repo /tmp/clone && cp -a /tmp/clone/. {checkout}/ && rm -rf /tmp/repo /tmp/clone \\
    && test "$(stat -c %a /root)" = 700
# the first `uv run`: the project itself installed into the environment above
RUN cd {checkout} && uv run cs-basics --help > /dev/null
"""

BUBBLEWRAP = """FROM {base}
RUN apt-get install -y --no-install-recommends bubblewrap
"""


def readme_lines() -> tuple[str, str]:
    """(the README's first command: uv's install line, the Debian and Ubuntu line it needs first), as written."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, "the README has no bash block"
    first = block.group(1).splitlines()[0]
    install = first.split("  #")[0].strip()
    debian = re.search(r"`(apt-get update && apt-get install -y python3-venv)`", text)
    assert debian, "the README names no Debian and Ubuntu line"
    return debian.group(1), install


def repository(into: Path) -> Path:
    """The repository's tracked files as they are in the working tree (what a clone of it holds)."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
    return into


def fresh_images(tmp: Path, built: list[str]) -> dict[str, str]:
    """{"without": the fresh machine's image, "bubblewrap": the same with bubblewrap installed}."""
    base = images.base_image(images.BOOKWORM, built)
    debian, install = readme_lines()
    context = tmp / "fresh"
    repository(context / "repo")
    (context / "locked").mkdir()
    for name in LOCKED:
        shutil.copy2(context / "repo" / name, context / "locked" / name)
    dockerfile = DOCKERFILE.format(base=base, checkout=CHECKOUT, debian_first=debian, install=install)
    (context / "Dockerfile").write_text(dockerfile)
    env = images.SYSTEM_CERTS if images.host_cas() else None
    without = images.image_from("fresh-debian", context, built, inputs=images.inputs_of(base), env=env)
    (tmp / "fresh-bubblewrap").mkdir()
    (tmp / "fresh-bubblewrap" / "Dockerfile").write_text(BUBBLEWRAP.format(base=without))
    with_it = images.image_from(
        "fresh-debian-bubblewrap", tmp / "fresh-bubblewrap", built, inputs=images.inputs_of(without), uv_cache=False
    )
    return {"without": without, "bubblewrap": with_it}


# as the newcomer types them: the README's commands, from the checkout, as root; each one's output and status
# kept in /out; the spy (staff_tests/lab/submissions.py) graded as a student's copy, its problems released as the
# staff would once they read it (its walk is held otherwise, and nothing it reads is tested)
RELEASE = "--release softmax --release scaled_dot_product_attention"
SCRIPT = f"""
cd {CHECKOUT}
uv run cs-basics grade --results /out/results.json > /out/grade.log 2>&1; echo $? > /out/grade.status
mkdir -p /tmp/spy && cp -r {CHECKOUT}/cs_basics /tmp/spy/ && cp /in/spy.py /tmp/spy/cs_basics/nn/functional.py
uv run cs-basics grade --submission /tmp/spy --results /out/spy.json {RELEASE} > /out/spy.log 2>&1
echo $? > /out/spy.status
uv run pytest -q -n 0 {shlex.join(PYTEST_SLICE)} > /out/pytest.log 2>&1; echo $? > /out/pytest.status
"""


def fresh_job(image: str, tmp: Path) -> platforms.Job:
    """The README's commands in a fresh container of `image`, as root, with no network."""
    inputs, out = tmp / "in", tmp / "out"
    inputs.mkdir(parents=True)
    out.mkdir()
    (inputs / "spy.py").write_text(SUBMISSIONS["spy"])
    job = platforms.run(
        image, ["sh", "-c", SCRIPT], tmp, limits=LIMITS, mounts={inputs: "/in:ro", out: "/out"}, timeout=1500
    )
    for path in sorted(out.iterdir()):
        job.files[path.name] = path.read_bytes()
    return job
