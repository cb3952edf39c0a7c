"""The platform lab: each platform's grading container reproduced with podman, the grader run there as the
platform runs it (issue 35). Images are built once per machine and cached by what they are built from
(staff_tests/lab/images.py); each platform's jobs run back to back in its own module-scoped fixture
(staff_tests/lab/platforms.py). Where no engine can run (no root, no podman/runc/debootstrap), every test
here says so and skips.

What each platform's reader requires of a file is checked as the platform documents it: PrairieLearn's
results (docs/externalGrading.md; apps/grader-host refuses over 1 MiB; the feedback is Postgres jsonb,
which refuses NUL and lone surrogates), Gradescope's results.json (autograder_samples' spec).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .adversarial import STUDENTS, judge
from .lab import images, platforms
from .lab.submissions import CONFINED, RELEASED, SUBMISSIONS, hidden_lines, solution_lines
from .submissions import ROOT
from .test_platforms import SECRET, reporter_reads

PROBLEM = images.engine_problem()
# a cold machine builds the images in the first test's set-up (debootstrap, apt, torch's wheels from uv's cache)
pytestmark = [pytest.mark.skipif(PROBLEM is not None, reason=str(PROBLEM)), pytest.mark.timeout(1800)]


def lab_group(platform: str) -> pytest.MarkDecorator:
    """One xdist group a platform: its jobs run once, on one worker, while the other platforms' run on others
    (each job waits on its container's CPU quota, Gradescope's half a CPU most: back to back they took most of
    the suite's time). Two workers that need the same image wait for one build (images.cache_lock). An explicit
    group, since `jobs` reaches the platforms' module fixtures through getfixturevalue, which conftest's
    grouping cannot see."""
    return pytest.mark.xdist_group(f"platform_lab-{platform}")


FULL = {"softmax": 1.0, "scaled_dot_product_attention": 5.0}
GRADESCOPE_VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}
PL_LIMIT = 1 << 20  # apps/grader-host: "The grading results were larger than 1MB"


# ---------------------------------------------------------------- the images, built once per machine


@pytest.fixture(scope="module")
def built() -> list[str]:
    """The images this run built (a warm run builds none)."""
    return []


@pytest.fixture(scope="module")
def prairielearn_course(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lab-prairielearn") / "course"
    command = [sys.executable, "-m", "cs_basics.cli", "autograder", "--platform", "prairielearn", str(out)]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=300)
    return out


@pytest.fixture(scope="module")
def prairielearn_image(prairielearn_course, built) -> str:
    """The image from the Dockerfile `cs-basics autograder --platform prairielearn` writes, as it stands."""
    base = images.base_image(images.BOOKWORM, built)
    uv = images.uv_image((prairielearn_course / "Dockerfile").read_text(), built)
    inputs = images.inputs_of(base, uv)
    return images.image_from("prairielearn", prairielearn_course, built, inputs=inputs)


@pytest.fixture(scope="module")
def gradescope_image(tmp_path_factory, built) -> str:
    """Gradescope's layout on Ubuntu 22.04 (Python 3.10, as Gradescope's newest base), the bundle's setup.sh
    run at build."""
    base = images.base_image(images.JAMMY, built)
    context = gradescope_context(tmp_path_factory.mktemp("lab-gradescope"))
    env = images.SYSTEM_CERTS if images.host_cas() else None
    return images.image_from("gradescope", context, built, inputs=images.inputs_of(base), env=env)


def gradescope_context(tmp: Path) -> Path:
    """`cs-basics autograder`'s bundle, unzipped as Gradescope unzips it, with the build's Dockerfile."""
    command = [sys.executable, "-m", "cs_basics.cli", "autograder", str(tmp / "autograder.zip")]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=300)
    return images.gradescope_context(tmp / "autograder.zip", images.JAMMY.tag, tmp / "context")


# ---------------------------------------------------------------- each platform's jobs, back to back


@pytest.fixture(scope="module")
def prairielearn_jobs(prairielearn_image, prairielearn_course, tmp_path_factory) -> dict[str, platforms.Job]:
    tmp = tmp_path_factory.mktemp("lab-prairielearn-jobs")
    done = {
        name: platforms.prairielearn(
            prairielearn_image, prairielearn_course, source, tmp / name, RELEASED if name == "spy" else None
        )
        for name, source in SUBMISSIONS.items()
    }
    record("prairielearn", done)
    return done


@pytest.fixture(scope="module")
def prairielearn_confined(prairielearn_image, prairielearn_course, tmp_path_factory) -> platforms.Job:
    """The confine submission's PrairieLearn job, under the lab's init and listener (platforms.WATCH)."""
    tmp = tmp_path_factory.mktemp("lab-prairielearn-confine")
    course, source = prairielearn_course, CONFINED["confine"]
    job = platforms.prairielearn(prairielearn_image, course, source, tmp, RELEASED, watch=True)
    record("prairielearn-confine", {"confine": job})
    return job


@pytest.fixture(scope="module")
def gradescope_jobs(gradescope_image, tmp_path_factory) -> dict[str, platforms.Job]:
    tmp = tmp_path_factory.mktemp("lab-gradescope-jobs")
    done = {
        name: platforms.gradescope(gradescope_image, source, tmp / name, RELEASED if name == "spy" else None)
        for name, source in SUBMISSIONS.items()
    }
    record("gradescope", done)
    return done


PLATFORMS = ["prairielearn", "gradescope"]
# what the lab saw fail, by test and platform, and whose fix it waits for (each strict: a fix makes it pass,
# and the marker must then go)
WAITS_FOR: dict[tuple[str, str], str] = {}


@pytest.fixture(params=[pytest.param(platform, marks=lab_group(platform)) for platform in PLATFORMS])
def jobs(request) -> tuple[str, dict[str, platforms.Job]]:
    return request.param, request.getfixturevalue(f"{request.param}_jobs")


def waits_for_a_fix(request, submission: str, platform: str) -> None:
    reason = WAITS_FOR.get((submission, platform))
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


def record(platform: str, done: dict[str, platforms.Job]) -> None:
    """Each job's exit status, seconds and peak memory, kept beside the image cache for docs/platforms.md."""
    path = images.CACHE / "measured.json"
    with images.cache_lock("measured"):  # the platforms' workers write it in turn
        found = json.loads(path.read_text()) if path.exists() else {}
        found[platform] = {
            name: {"status": job.status, "seconds": round(job.seconds, 1), "peak_mib": (job.peak_bytes or 0) >> 20}
            for name, job in done.items()
        }
        path.write_text(json.dumps(found, indent=2) + "\n")


# ---------------------------------------------------------------- each platform's reader


def strict_strings(value: object, where: str = "") -> None:
    """Every string valid UTF-8 without NUL: what Postgres jsonb and a strict reader take."""
    if isinstance(value, str):
        assert "\0" not in value, f"NUL in {where}"
        value.encode("utf-8")  # a lone surrogate raises here
    elif isinstance(value, dict):
        for key, item in value.items():
            strict_strings(key, where)
            strict_strings(item, f"{where}.{key}")
    elif isinstance(value, list):
        for n, item in enumerate(value):
            strict_strings(item, f"{where}[{n}]")


def prairielearn_reads(job: platforms.Job) -> dict:
    """As the grader host and the server read it: exit 0, under 1 MiB, JSON, a score in [0, 1], each test
    with a name and numbers (docs/externalGrading.md), storable as jsonb."""
    assert job.status == 0, f"the entrypoint exited {job.status}: PrairieLearn fails the job\n{job.log[-3000:]}"
    raw = job.files["results.json"]
    assert len(raw) <= PL_LIMIT
    data = json.loads(raw.decode("utf-8"))
    strict_strings(data)
    assert data["gradable"] is True
    assert isinstance(data["score"], int | float) and 0 <= data["score"] <= 1
    for test in data["tests"]:
        assert isinstance(test["name"], str) and isinstance(test.get("message", ""), str)
        assert isinstance(test["points"], int | float) and isinstance(test["max_points"], int | float)
    return data


def gradescope_reads(job: platforms.Job) -> dict:
    """As Gradescope's spec gives results.json: JSON, tests with numbers, names, output and a visibility."""
    assert job.status == 0, f"run_autograder exited {job.status}\n{job.log[-3000:]}"
    data = json.loads(job.files["results.json"].decode("utf-8"))
    strict_strings(data)
    for test in data["tests"]:
        assert isinstance(test["score"], int | float) and isinstance(test["max_score"], int | float)
        assert isinstance(test["name"], str) and isinstance(test.get("output", ""), str)
        assert test.get("visibility", "visible") in GRADESCOPE_VISIBILITY
    return data


def points(platform: str, job: platforms.Job) -> dict[str, float]:
    """Each problem's points, as the platform's reader gives them."""
    found = {problem: 0.0 for problem in FULL}
    if platform == "prairielearn":
        for test in prairielearn_reads(job)["tests"]:
            found[problem_of(test["name"])] += test["points"]
    else:
        for test in gradescope_reads(job)["tests"]:
            found[problem_of(test["name"])] += test["score"]
    return {problem: round(value, 4) for problem, value in found.items()}


def lost(platform: str, job: platforms.Job) -> str:
    """Each test that got less than its points, with the message the platform shows: what a failure of the
    reference's full marks must say (CI showed only the sums)."""
    data = json.loads(job.files["results.json"].decode("utf-8"))
    if platform == "prairielearn":
        rows = [(t["name"], t["points"], t["max_points"], t.get("message", "")) for t in data["tests"]]
    else:
        rows = [(t["name"], t["score"], t["max_score"], t.get("output", "")) for t in data["tests"]]
    return "\n".join(f"{name}: {got} of {full}: {said[:400]}" for name, got, full, said in rows if got < full)


def problem_of(name: str) -> str:
    return "scaled_dot_product_attention" if "attention" in name else "softmax"


# ---------------------------------------------------------------- the tests


@lab_group("kubernetes")
def test_the_containers_are_as_the_platforms_make_them(prairielearn_image, gradescope_image, tmp_path):
    """Root without CAP_SYS_ADMIN and mount namespaces refused, in both; no kill binary in PrairieLearn's
    debian:bookworm-slim: what the grader must live with there."""
    script = (
        "grep CapEff /proc/self/status; unshare -m true 2>/dev/null; echo unshare $?; "
        "for k in /bin/kill /usr/bin/kill; do [ -e $k ] && echo has $k; done; echo uid $(id -u)"
    )
    found = {}
    for image, limits in ((prairielearn_image, platforms.PRAIRIELEARN), (gradescope_image, platforms.GRADESCOPE)):
        job = platforms.inside(image, script, tmp_path / image.split("/")[-1].replace(":", "-"), limits)
        assert job.status == 0, job.log
        cap_eff = int(next(line for line in job.log.splitlines() if line.startswith("CapEff")).split()[1], 16)
        assert not cap_eff & (1 << 21), "CAP_SYS_ADMIN"
        assert "unshare 0" not in job.log and "uid 0" in job.log
        found[image] = job.log
    assert "has /" not in found[prairielearn_image]


def test_the_reference_gets_full_marks(jobs):
    platform, done = jobs
    job = done["reference"]
    assert points(platform, job) == FULL, f"the reference lost points:\n{lost(platform, job)}\n{job.log[-3000:]}"


def test_the_spy_reads_nothing_it_must_not(jobs, request):
    """What the student sees (the results, the log) holds no line of the solution or of the hidden cases' code;
    nothing the spy's processes read, in either phase, holds the solution, the hidden expected values, the
    root-only file or the grader's environment. (The hidden phase's own process is given its inputs: what it
    read of them is not counted; on these platforms it has no network to carry them out.)"""
    platform, done = jobs
    waits_for_a_fix(request, "spy", platform)
    job = done["spy"]
    # a verdict the platform's reader takes (full marks where its daemon is ended in time; a grading that
    # fails closed because a process of the public phase lived on is also right)
    points(platform, job)
    dropped = "\n".join(data.decode("utf-8", "replace") for data in job.drop.values())
    for where, text in (("the results or the log", job.text()), ("what the spy read", dropped)):
        assert job.secrets["root-only"] not in text and job.secrets["env"] not in text, where
        leaked = [line for line in solution_lines() if line in text]
        assert not leaked, f"{len(leaked)} lines of the solution in {where}, e.g. {leaked[:3]}"
    leaked = [line for line in hidden_lines() if line in job.text()]
    assert not leaked, f"{len(leaked)} lines of the hidden cases' code in the results or the log, e.g. {leaked[:3]}"
    paths = {data.split(b"\n", 1)[0].decode("utf-8", "replace") for data in job.drop.values()}
    expected_values = sorted(p for p in paths if "/hidden/" in p and p.endswith(".safetensors"))
    assert not expected_values, f"the spy read hidden expected values: {expected_values[:5]}"


def test_forged_text_lone_surrogates_and_nul_are_graded_normally(jobs, request):
    """staff_tests/test_platforms.py's HOSTILE text, and a lone surrogate, NUL and control characters in an
    exception's message: each platform's reader takes the file; the public softmax cases pass; no hidden text
    where the platform shows everything."""
    platform, done = jobs
    waits_for_a_fix(request, "forged", platform)
    found = points(platform, done["forged"])  # each platform's reader takes the file
    assert 0 < found["softmax"] < 1 and found["scaled_dot_product_attention"] < 5
    if platform == "prairielearn":
        assert SECRET not in done["forged"].text()


def test_a_hungry_submission_loses_its_problem_and_the_rest_is_scored(jobs, request):
    """300 MB kept per call: its attention's later cases fail naming the memory, its softmax is scored, and
    the grader finishes within the container's memory (Gradescope's 768 MB, PrairieLearn's 2 GiB)."""
    platform, done = jobs
    waits_for_a_fix(request, "hungry", platform)
    found = points(platform, done["hungry"])
    assert found["softmax"] == 1.0 and found["scaled_dot_product_attention"] < 5
    results = json.loads(done["hungry"].files["results.json"])
    failed = [
        t
        for t in results["tests"]
        if problem_of(t["name"]) != "softmax" and "hidden" not in t["name"] and not t.get("score", t.get("points"))
    ]
    assert failed and all("memory" in (t.get("output", "") + t.get("message", "")).lower() for t in failed)


# ---------------------------------------------------------------- round 7's battery in PrairieLearn's container


@pytest.fixture(scope="module")
def prairielearn_battery(prairielearn_image, prairielearn_course, tmp_path_factory) -> platforms.Job:
    """Round 7's battery (issue 40: staff_tests/students/r7_*), whole packages with their `__init__.py` files,
    graded in PrairieLearn's container: the fallback without namespaces."""
    folders = {p.name: p for p in sorted(STUDENTS.glob("r7_*")) if (p / "expected.toml").is_file()}
    tmp = tmp_path_factory.mktemp("lab-prairielearn-battery")
    done = platforms.prairielearn_batch(prairielearn_image, prairielearn_course, folders, tmp)
    record("prairielearn-battery", {"round 7's battery, one batch": done})
    return done


def test_round_7s_battery_is_held_or_zeroed_and_its_honest_code_full_in_prairielearns_container(
    prairielearn_battery,
):
    from cs_basics.harness.config import Assignment
    from cs_basics.harness.grading.writers import results as results_module

    job = prairielearn_battery
    assert job.status == 0, job.log[-3000:]
    assignment = Assignment.find(ROOT)
    cases = {results_module.test_name(c): c for c in assignment.cases}
    problems = {name: float(t["points"]) for name, t in assignment.table["problems"].items()}
    wrong = {}
    for folder in sorted(STUDENTS.glob("r7_*")):
        data = json.loads(job.files.get(f"{folder.name}.json", b"{}"))
        found = judge(folder, data, cases, problems).problems_found
        if found or not data:
            wrong[folder.name] = found or ["no results"]
    assert not wrong, wrong


# ---------------------------------------------------------------- GitHub Actions: the grading step, not root


@pytest.fixture(scope="module")
def github_actions_job(prairielearn_image, tmp_path_factory) -> platforms.Job:
    """The handout workflow's grading step as the runner's user (uid 1001), each submission pushed in turn,
    in Debian's Python with uv (PrairieLearn's image: the runner's Ubuntu 24.04 cannot be fetched here)."""
    tmp = tmp_path_factory.mktemp("lab-actions")
    command = [sys.executable, "-m", "cs_basics.cli", "handout", "--no-check", str(tmp / "handout")]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=300)
    flow = yaml.safe_load((tmp / "handout/.github/workflows/classroom.yml").read_text())
    step = next(s for s in flow["jobs"]["run-autograding-tests"]["steps"] if s.get("id") == "grade")
    cache = platforms.runner_uv_cache(images.host_uv_cache(), images.CACHE)
    done = platforms.github_actions(
        prairielearn_image, tmp / "handout", step, SUBMISSIONS, cache, tmp / "job", RELEASED
    )  # released for every push: only the spy's problems are held
    record("github-actions", {"all four, one runner": done})
    return done


def classroom_points(job: platforms.Job, name: str) -> dict[str, float]:
    """Each runner's points as the reporter reads them from the step's outputs (the public cases only)."""
    status = job.files[f"{name}.status"].decode().strip()
    log = job.files[f"{name}.log"].decode("utf-8", "replace")
    assert status == "0", f"{name}: the grading step exited {status}\n{log[-3000:]}"
    found = reporter_reads(job.files[f"{name}.outputs"].decode("utf-8"))
    for data in found.values():
        strict_strings(data)
    return {problem: round(sum(t["score"] for t in data["tests"]), 4) for problem, data in found.items()}


@lab_group("github-actions")
def test_github_actions_grades_as_the_runners_user(github_actions_job):
    assert classroom_points(github_actions_job, "reference") == FULL


@lab_group("github-actions")
def test_github_actions_takes_forged_text_and_lone_surrogates(github_actions_job):
    found = classroom_points(github_actions_job, "forged")
    assert found["scaled_dot_product_attention"] < 5


@lab_group("github-actions")
def test_github_actions_spy_reads_no_root_only_file_or_grader_secret(github_actions_job):
    """On the student's own runner nothing is hidden (the checkout is theirs): what must stay out of reach is
    root's and the runner's own secrets."""
    job = github_actions_job
    seen = job.text() + "\n".join(d.decode("utf-8", "replace") for d in job.drop.values())
    assert job.secrets["root-only"] not in seen
    assert classroom_points(job, "spy") == FULL


# ---------------------------------------------------------------- Kubernetes: the image the recipe names


def shipped_dockerfile() -> Path | None:
    """The Dockerfile the repository ships for the cluster image (docs/cluster/grade-job.yaml's)."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    found = [ROOT / p for p in tracked.splitlines() if Path(p).name.startswith("Dockerfile")]
    return next((p for p in found if "cluster" in p.as_posix() or p.parent == ROOT), None)


@pytest.fixture(scope="module")
def kubernetes_job(tmp_path_factory, built) -> platforms.Job:
    """Every submission graded as one shard of the recipe's Job, in the image built as the Dockerfile the
    repository ships says: its build context the Gradescope bundle unzipped (what the grader ships)."""
    dockerfile = shipped_dockerfile()
    assert dockerfile is not None, "no Dockerfile in the repository builds the image docs/cluster/grade-job.yaml names"
    tmp = tmp_path_factory.mktemp("lab-kubernetes")
    command = [sys.executable, "-m", "cs_basics.cli", "autograder", str(tmp / "autograder.zip")]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=300)
    context = images.unzipped(tmp / "autograder.zip", tmp / "context")
    shutil.copy2(dockerfile, context / "Dockerfile")
    base = images.base_image(images.BOOKWORM, built)
    uv = images.uv_image((context / "Dockerfile").read_text(), built)
    inputs = images.inputs_of(base, uv)
    env = images.SYSTEM_CERTS if images.host_cas() else None  # this machine's proxy, as for Gradescope's build
    image = images.image_from("kubernetes", context, built, inputs=inputs, env=env)
    job_yaml = yaml.safe_load((ROOT / "docs/cluster/grade-job.yaml").read_text())
    command = job_yaml["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["sh", "-c"], command
    # the confine submission twice: what one grading keeps (System V objects) is for the next to find; every
    # problem released (the spy's walk and the confine submission's ctypes are held), as staff who read them would
    sources = {**SUBMISSIONS, **CONFINED, "confine-again": CONFINED["confine"]}
    done = platforms.kubernetes(image, command[2], sources, tmp / "job", RELEASED)
    record("kubernetes", {"all four, one pod": done})
    return done


@lab_group("kubernetes")
def test_kubernetes_grades_every_submission_in_the_recipes_pod(kubernetes_job):
    assert kubernetes_job.status == 0, kubernetes_job.log[-3000:]
    by_name = {name: json.loads(data) for name, data in kubernetes_job.files.items() if name.endswith(".json")}
    reference = next(data for name, data in by_name.items() if "reference" in name)
    lost = {t["name"]: t.get("output", "")[:300] for t in reference["tests"] if t["score"] < t["max_score"]}
    assert sum(t["score"] for t in reference["tests"]) == pytest.approx(6.0), lost
    spy = kubernetes_job.text() + "\n".join(d.decode("utf-8", "replace") for d in kubernetes_job.drop.values())
    assert not [line for line in solution_lines() + hidden_lines() if line in spy]


# ---------------------------------------------------------------- what the fallback confines (issue 41)

# each what confined the job, in either of the words the grader has for it: bubblewrap in a user namespace of its
# own (issue 42) gives the job a network namespace; the fallback refuses sockets by seccomp
CONFINEMENT_SAID = (
    ("no network: sockets other than Unix ones refused (seccomp)", "with its own namespaces (no network"),
    ("no System V IPC (seccomp)",),
)
MEMORY_SAID = ("in a memory cgroup of its own", "counting all of the job's memory (a memory cgroup of its own) needs")


def confinement_held(tests: list[dict], text: str) -> None:
    """The confine submission's tests as a platform's reader gives them, and what the student reads: softmax full
    (nothing reached the listener, no System V object a grading before kept was found), the public cases whose Q
    has 4 dimensions lost to their shared memory (refused, or ended at the job cgroup's limit), the other attention
    cases passed, and the notes say what confined the job and what the container could not give."""
    score = {t["name"]: t.get("points", t.get("score")) for t in tests}
    most = {t["name"]: t.get("max_points", t.get("max_score")) for t in tests}
    said = {t["name"]: t.get("message", "") + t.get("output", "") for t in tests}
    softmax = [name for name in score if problem_of(name) == "softmax"]
    assert softmax and all(score[n] == most[n] for n in softmax), {n: said[n][:500] for n in softmax}
    public = [name for name in score if problem_of(name) != "softmax" and "hidden" not in name]
    mapped = [name for name in public if "4d" in name]
    lost = ("PermissionError", "held more than")
    assert mapped and all(score[n] == 0 and any(w in said[n] for w in lost) for n in mapped), [said[n] for n in mapped]
    assert all(score[n] == most[n] for n in public if n not in mapped), [said[n] for n in public if n not in mapped]
    said_all = text.lower()  # a note read as a sentence starts with a capital
    assert all(any(note.lower() in said_all for note in notes) for notes in CONFINEMENT_SAID), text[:3000]
    assert any(note.lower() in said_all for note in MEMORY_SAID), text[:3000]


@lab_group("prairielearn")
def test_prairielearns_container_confines_the_job(prairielearn_confined):
    """Where namespaces are refused (PrairieLearn's container): the job reaches no listener on 127.0.0.1, leaves no
    System V object, no zombie under a container's init that never reaps, and loses the cases whose shared memory
    goes past its limit, while the grader finishes (exit 0, results the grader host reads)."""
    job = prairielearn_confined
    watch = platforms.watch_of(job)
    assert watch["received"] == [] and watch["ipc"] == [], watch
    confinement_held(prairielearn_reads(job)["tests"], job.text())
    zombies_left(watch)


def zombies_left(watch: dict) -> None:
    """No zombie under the container's init: the grader adopts all it starts from its first process on (bubblewrap's
    probe leaves its PID namespace's init an orphan) and reaps it as it exits."""
    assert watch["zombies"] == [], f"zombies left under the container's init: {watch['zombies']}"


@lab_group("kubernetes")
def test_the_kubernetes_pod_confines_each_job(kubernetes_job):
    """The same in the cluster recipe's pod, two confine submissions among the others graded by two workers: the
    later finds nothing the earlier kept, and nothing is left after the batch."""
    assert kubernetes_job.status == 0, kubernetes_job.log[-3000:]
    watch = platforms.watch_of(kubernetes_job)
    assert watch["received"] == [] and watch["ipc"] == [], watch
    found = kubernetes_job.files.items()
    confined = {name: json.loads(data) for name, data in found if "confine" in name and name.endswith(".json")}
    assert len(confined) == 2, sorted(kubernetes_job.files)
    for data in confined.values():
        confinement_held(data["tests"], json.dumps(data))
    zombies_left(watch)


@lab_group("github-actions")
def test_a_warm_lab_builds_nothing(prairielearn_image, gradescope_image, prairielearn_course, tmp_path):
    """Asked again for every image, the lab finds each by what it is built from (a cold run built them once)."""
    again: list[str] = []
    assert images.base_image(images.BOOKWORM, again) and images.base_image(images.JAMMY, again)
    base = images.base_image(images.BOOKWORM, again)
    uv = images.uv_image((prairielearn_course / "Dockerfile").read_text(), again)
    inputs = images.inputs_of(base, uv)
    assert images.image_from("prairielearn", prairielearn_course, again, inputs=inputs) == prairielearn_image
    jammy = images.base_image(images.JAMMY, again)
    env = images.SYSTEM_CERTS if images.host_cas() else None
    context = gradescope_context(tmp_path)
    assert images.image_from("gradescope", context, again, inputs=images.inputs_of(jammy), env=env) == gradescope_image
    assert again == []
