"""Each platform's grading job, run as the platform runs it, in the lab's images (staff_tests/lab/images.py).

- PrairieLearn (apps/grader-host): one container per job, as the image's user (root), Docker's default
  capabilities, networking off, 2 GiB of memory and as much swap, 0.9 CPU, 1,024 processes; `/grade` holds
  `student/`, `tests/`, `serverFilesCourse/` and `data/data.json`, every file made executable; the
  entrypoint is run and results/results.json read only when it exits 0.
- Gradescope: /autograder/source holds the bundle (setup.sh ran at build), the submission in
  /autograder/submission, `run_autograder` run as root with 768 MB (no swap) and half a CPU; the results
  are /autograder/results/results.json.
- Kubernetes: a pod's defaults (the runtime's default capabilities, no CAP_SYS_ADMIN), the recipe's command.
- GitHub Actions: the handout workflow's grading step as a user without root.

Every job also gets what the lab checks a submission cannot reach: a root-only file (ROOT_ONLY), a secret in
the grader's environment (ENV_SECRET), and LAB_DROP, where the spy leaves what it read. Each job reports its
exit status, seconds, and the container's peak memory (cgroup v1's memory.max_usage_in_bytes, v2's
memory.peak), read by a wrapper around the platform's command.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .images import PODMAN, SYSTEM_CERTS, ULIMITS, digest, host_cas
from .submissions import ENV_SECRET, LAB_DROP, LAB_PORT, ROOT_ONLY

PEAK = "/lab-meter/peak"
# after the platform's command: the container's peak memory, where only root (the lab) can write it
METER = (
    '"$@"; status=$?; cat /sys/fs/cgroup/memory/memory.max_usage_in_bytes /sys/fs/cgroup/memory.peak '
    f"2>/dev/null | head -n 1 > {PEAK}; exit $status"
)
PRAIRIELEARN = ["--network=none", "--memory", "2g", "--memory-swap", "4g", "--cpus", "0.9", "--pids-limit", "1024"]
GRADESCOPE = ["--network=none", "--memory", "768m", "--memory-swap", "768m", "--cpus", "0.5"]
KUBERNETES = ["--network=none", "--cpus", "2", "--memory", "10g"]  # the recipe's requests

# Around the platform's command (issue 41), with the image's own python3: a container's init that adopts orphans
# and never reaps them (a child subreaper that waits for its one child alone), and the lab's listener on
# 127.0.0.1:LAB_PORT (TCP and UDP), as root; after the command, what reached the listener, the zombies left under
# it and every System V IPC object left in the container, on one line of the log ("LAB-WATCH {...}").
WATCH = f"""
import ctypes, json, os, socket, subprocess, sys, threading

ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
received = []
tcp, udp = socket.socket(), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
tcp.bind(("127.0.0.1", {LAB_PORT}))
tcp.listen()
udp.bind(("127.0.0.1", {LAB_PORT}))


def serve(receive, kind):
    while True:
        receive()
        received.append(kind)


threading.Thread(target=serve, args=(tcp.accept, "tcp"), daemon=True).start()
threading.Thread(target=serve, args=(lambda: udp.recv(64), "udp"), daemon=True).start()
status = subprocess.run(sys.argv[1:]).returncode
zombies = []
for entry in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{{entry}}/stat").read()
    except OSError:
        continue
    if stat[stat.rindex(")") + 2 :].split()[:2] == ["Z", str(os.getpid())]:
        zombies.append(int(entry))
ipc = [row for table in ("shm", "msg", "sem") for row in open(f"/proc/sysvipc/{{table}}").read().splitlines()[1:]]
print("LAB-WATCH", json.dumps({{"received": received, "zombies": zombies, "ipc": ipc}}), flush=True)
sys.exit(status)
"""


def watched(command: list[str]) -> list[str]:
    """The platform's command under the lab's init and listener (WATCH)."""
    return ["python3", "-c", WATCH, *command]


def watch_of(job: Job) -> dict:
    """What WATCH saw: {"received": [...], "zombies": [...], "ipc": [...]}."""
    line = next((line for line in job.log.splitlines() if line.startswith("LAB-WATCH ")), None)
    assert line is not None, f"the lab's watch said nothing:\n{job.log[-3000:]}"
    return json.loads(line.removeprefix("LAB-WATCH "))


@dataclass
class Job:
    """One container's run: its exit status, time, peak memory, what it printed, and the files it left."""

    status: int
    seconds: float
    peak_bytes: int | None
    log: str
    secrets: dict[str, str]
    drop: dict[str, bytes] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)

    def text(self) -> str:
        """Everything the job wrote a reader sees: its files and its log, as text."""
        return "\n".join([self.log, *(data.decode("utf-8", "replace") for data in self.files.values())])


def run(
    image: str,
    command: list[str],
    tmp: Path,
    *,
    limits: list[str],
    mounts: dict[Path, str],
    env=None,
    workdir: str | None = None,
    user: str | None = None,
    timeout: float = 600,
) -> Job:
    """`podman run` the command in a fresh container with the lab's secrets, drop and meter."""
    tmp.mkdir(parents=True, exist_ok=True)
    secrets = {"root-only": f"LAB-ROOT-ONLY-{uuid.uuid4().hex}", "env": f"LAB-ENV-{uuid.uuid4().hex}"}
    root_only, drop, meter = tmp / "root-only", tmp / "drop", tmp / "meter"
    root_only.write_text(secrets["root-only"] + "\n")
    root_only.chmod(0o600)
    drop.mkdir()
    drop.chmod(0o1777)
    meter.mkdir(mode=0o700)
    if user:  # the meter is written by the job's user, after its command
        uid, gid = (int(n) for n in user.split(":"))
        os.chown(meter, uid, gid)
    args = ["run", "--rm", *ULIMITS, *limits, "-e", f"{ENV_SECRET}={secrets['env']}"]
    for key, value in (env or {}).items():
        args += ["-e", f"{key}={value}"]
    volumes = {root_only: f"{ROOT_ONLY}:ro", drop: LAB_DROP, meter: "/lab-meter", **mounts}
    for host, inside in volumes.items():
        args += ["-v", f"{host}:{inside}"]
    if workdir:
        args += ["-w", workdir]
    if user:
        args += ["--user", user]
    # named, so that a job past its time is removed: killing `podman run` leaves its container running
    name = f"cs-basics-lab-{uuid.uuid4().hex[:12]}"
    args += ["--name", name]
    start = time.monotonic()
    try:
        done = subprocess.run(
            [*PODMAN, *args, image, "sh", "-c", METER, "sh", *command],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        with contextlib.suppress(subprocess.TimeoutExpired):  # the job's time is what to report, not this one's
            subprocess.run([*PODMAN, "rm", "--force", "--time", "0", name], capture_output=True, timeout=120)
        raise
    seconds = time.monotonic() - start
    peak = (meter / "peak").read_text().strip() if (meter / "peak").exists() else ""
    dropped = {p.name: p.read_bytes() for p in sorted(drop.iterdir()) if p.is_file()}
    return Job(
        done.returncode, seconds, int(peak) if peak.isdigit() else None, done.stdout + done.stderr, secrets, dropped
    )


def executable(root: Path) -> None:
    for path in root.rglob("*"):
        path.chmod(path.stat().st_mode | 0o111)


def prairielearn(
    image: str,
    course: Path,
    source: str,
    tmp: Path,
    env: dict[str, str] | None = None,
    watch: bool = False,
) -> Job:
    """One PrairieLearn job: `course` is what `cs-basics autograder --platform prairielearn` wrote; `env` what the
    staff set in the question's image (CS_BASICS_RELEASE); `watch`: its entrypoint under the lab's init and
    listener (WATCH)."""
    info = json.loads(next((course / "questions").glob("*/info.json")).read_text())
    options = info["externalGradingOptions"]
    grade = tmp / "grade"
    (grade / "student").mkdir(parents=True)
    (grade / "student/functional.py").write_text(source, errors="surrogatepass")
    shutil.copytree(next((course / "questions").glob("*/tests")), grade / "tests")
    for folder in options["serverFilesCourse"]:
        shutil.copytree(course / "serverFilesCourse" / folder, grade / "serverFilesCourse" / folder)
    (grade / "data").mkdir()
    (grade / "data/data.json").write_text(
        json.dumps({"params": {}, "correct_answers": {}, "submitted_answers": {}, "gradable": True, "options": {}})
    )
    executable(grade)
    job = run(
        image,
        watched([options["entrypoint"]]) if watch else [options["entrypoint"]],
        tmp,
        limits=PRAIRIELEARN,
        mounts={grade: "/grade"},
        env=env,
        timeout=options["timeout"] + 60,
    )
    results = grade / "results/results.json"
    if job.status == 0 and results.exists():  # the grader host reads the file only on exit 0
        job.files["results.json"] = results.read_bytes()
    return job


def gradescope(image: str, source: str, tmp: Path, env: dict[str, str] | None = None) -> Job:
    """One Gradescope submission: the uploaded functional.py, run_autograder, results.json."""
    submission, results = tmp / "submission", tmp / "results"
    submission.mkdir(parents=True)
    results.mkdir()
    (submission / "functional.py").write_text(source, errors="surrogatepass")
    job = run(
        image,
        ["/autograder/run_autograder"],
        tmp,
        limits=GRADESCOPE,
        env=env,
        workdir="/autograder",
        mounts={submission: "/autograder/submission", results: "/autograder/results"},
    )
    if (results / "results.json").exists():
        job.files["results.json"] = (results / "results.json").read_bytes()
    return job


def prairielearn_batch(image: str, course: Path, folders: dict[str, Path], tmp: Path) -> Job:
    """Whole submissions (a package of the student's, its `__init__.py` files included) graded as one batch in
    PrairieLearn's container, with its limits and its grader (the question's serverFilesCourse): the fallback
    without namespaces, as every job there; results/<name>.json each."""
    data = tmp / "data"
    for name, folder in folders.items():
        shutil.copytree(folder, data / "submissions" / name, ignore=shutil.ignore_patterns("__pycache__"))
    (data / "results").mkdir(parents=True)
    server = course / "serverFilesCourse"
    command = (
        f"cd /grade/serverFilesCourse/{next(p.name for p in server.iterdir() if p.is_dir())} && "
        '"${CS_BASICS_PYTHON:-/opt/cs-basics/.venv/bin/python}" -m cs_basics.cli grade --quiet --workers 1 '
        "--submission /data/submissions --results /data/results --total-seconds 150 --memory-mb 1280"
    )
    job = run(
        image,
        ["sh", "-c", command],
        tmp,
        limits=PRAIRIELEARN,
        mounts={server: "/grade/serverFilesCourse", data: "/data"},
        timeout=1500,
    )
    for path in (data / "results").glob("*.json"):
        job.files[path.name] = path.read_bytes()
    return job


def kubernetes(image: str, command: str, sources: dict[str, str], tmp: Path, env: dict[str, str] | None = None) -> Job:
    """The recipe's shard (1 of 1): every submission in one pod, /data/submissions/<name>/functional.py, under
    the lab's init and listener (WATCH)."""
    data = tmp / "data"
    for name, source in sources.items():
        (data / "submissions" / name).mkdir(parents=True)
        (data / "submissions" / name / "functional.py").write_text(source, errors="surrogatepass")
    (data / "results").mkdir()
    job = run(
        image,
        watched(["sh", "-c", command]),
        tmp,
        limits=KUBERNETES,
        mounts={data: "/data"},
        env={"CS_BASICS_SHARDS": "1", "JOB_COMPLETION_INDEX": "0", **(env or {})},
    )
    for path in (data / "results").rglob("*"):
        if path.is_file():
            job.files[path.relative_to(data / "results").as_posix()] = path.read_bytes()
    return job


def inside(image: str, script: str, tmp: Path, limits: list[str] = PRAIRIELEARN) -> Job:
    """A shell script run in the platform's container as its job would run: what the container allows."""
    return run(image, ["sh", "-c", script], tmp, limits=limits, mounts={})


def quoted(command: list[str]) -> str:
    return " ".join(shlex.quote(word) for word in command)


RUNNER = "1001:1001"  # the hosted runner's user (`runner`), not root
ACTIONS = ["--cpus", "2", "--memory", "7g"]  # a hosted runner: 2 (4 on public repositories) cores, 7 GB or more


RUNNER_HOME_CACHE = "/home/runner/.lab"  # the runner's restored caches: uv's, and the checkout's .venv for each lock


def runner_uv_cache(host_cache: Path, lab_cache: Path) -> Path:
    """setup-uv's restored cache: a copy of this machine's uv cache the runner's user owns (made once; the
    host's own cache is never handed to another user), in `runner/uv`, beside the venvs it fills (one folder,
    one mount: uv links the wheels' files into a venv instead of copying 5 GB of torch)."""
    cache = lab_cache / "runner" / "uv"
    if not cache.exists():
        cache.parent.mkdir(exist_ok=True)
        earlier = lab_cache / "runner-uv-cache"  # where an earlier lab kept it: moved, not copied again
        if earlier.is_dir():
            earlier.replace(cache)
        else:
            partial = cache.with_suffix(".partial")
            shutil.rmtree(partial, ignore_errors=True)
            subprocess.run(["cp", "-a", f"{host_cache}/.", str(partial)], check=True)
            subprocess.run(["chown", "-R", RUNNER, str(partial)], check=True)
            partial.replace(cache)
    for stale in lab_cache.glob("runner-venv-*"):  # an earlier lab's venvs, outside the mount: 5 GB each
        shutil.rmtree(stale, ignore_errors=True)
    return cache


def runner_venv(cache: Path, lock: bytes) -> Path:
    """The checkout's .venv kept between runs of the lab (a runner whose workflow caches .venv), for this lock:
    a cold lab links torch's files into it once, a warm one syncs only the handout's own project."""
    venv = cache.parent / f"venv-{digest(lock)}"
    for stale in cache.parent.glob("venv-*"):  # made for another lock, kept for nothing
        if stale != venv:
            shutil.rmtree(stale, ignore_errors=True)
    if not venv.exists():
        venv.mkdir()
        os.chown(venv, *(int(n) for n in RUNNER.split(":")))
    return venv


def github_actions(
    image: str, handout: Path, step: dict, sources: dict[str, str], cache: Path, tmp: Path, more: dict | None = None
) -> Job:
    """The handout workflow's grading step, as the runner's user, for each submission pushed in turn to one
    checkout (the first push syncs the checkout's .venv from the restored uv cache, as `uv run` does there)."""
    home = tmp / "home"
    work = home / "work"
    shutil.copytree(handout, work / "handout", ignore=shutil.ignore_patterns(".venv"))
    venv = runner_venv(cache, (handout / "uv.lock").read_bytes())
    (work / "handout/.venv").symlink_to(f"{RUNNER_HOME_CACHE}/{venv.name}")
    for name, source in sources.items():
        (home / "pushed" / f"{name}.py").parent.mkdir(parents=True, exist_ok=True)
        (home / "pushed" / f"{name}.py").write_text(source, errors="surrogatepass")
    subprocess.run(["chown", "-hR", RUNNER, str(home)], check=True)
    env = {
        "HOME": "/home/runner",
        "UV_CACHE_DIR": f"{RUNNER_HOME_CACHE}/{cache.name}",
        "GITHUB_ACTIONS": "true",
        "CI": "true",
        "GITHUB_WORKFLOW": "Autograding Tests",
        "GITHUB_WORKSPACE": "/home/runner/work/handout",
        "RUNNER_TEMP": "/home/runner/temp",
        **step.get("env", {}),
        **(more or {}),
    }
    script = (
        "cd /home/runner/work/handout && mkdir -p /home/runner/temp /home/runner/out && "
        'for name in $(ls /home/runner/pushed | sed "s/[.]py$//"); do '
        "cp /home/runner/pushed/$name.py cs_basics/nn/functional.py; : > /home/runner/out/$name.outputs; "
        'GITHUB_OUTPUT=/home/runner/out/$name.outputs env -u UV_PROJECT_ENVIRONMENT -u UV_LINK_MODE bash -e -c "$STEP" '
        "> /home/runner/out/$name.log 2>&1; echo $? > /home/runner/out/$name.status; done"
    )
    mounts = {home: "/home/runner", cache.parent: RUNNER_HOME_CACHE}
    if host_cas():  # the runner reaches PyPI (the project's build backend) through this machine's authority
        mounts[Path("/etc/ssl/certs/ca-certificates.crt")] = "/etc/ssl/lab-host-cas.crt:ro"
        env |= {"SSL_CERT_FILE": "/etc/ssl/lab-host-cas.crt", **SYSTEM_CERTS}
    try:
        job = run(
            image,
            ["sh", "-c", script],
            tmp,
            limits=ACTIONS,
            user=RUNNER,
            env={**env, "STEP": step["run"]},
            mounts=mounts,
        )
    except subprocess.TimeoutExpired as err:  # say how far each push got
        logs = {p.name: p.read_text(errors="replace")[-2000:] for p in sorted((home / "out").glob("*.log"))}
        raise AssertionError(f"the runner's job took over {err.timeout} s; its logs so far: {logs}") from err
    for path in sorted((home / "out").glob("*")):
        job.files[path.name] = path.read_bytes()
    return job
