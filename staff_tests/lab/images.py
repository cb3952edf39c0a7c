"""The lab's images, built with podman from Debian's and Ubuntu's packages and the project's own files.

Every image is tagged or labelled by a hash of what it is built from, so a warm suite builds nothing:
a base image from `debootstrap --variant=minbase` (its rootfs tarball kept in CACHE, outside the repository,
so CI on the same machine reuses it), uv's image from this machine's uv binary, and the platforms' images
from the files the project writes (PrairieLearn's Dockerfile as `cs-basics autograder --platform
prairielearn` writes it, Gradescope's bundle unzipped into /autograder/source and its setup.sh run).
Builds mount this machine's uv cache as an overlay, so torch (a 3 GB CUDA build) is never downloaded twice
and the host's cache is never written.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("CS_BASICS_LAB_CACHE", "/var/cache/cs-basics-lab"))
LABEL = "cs-basics-lab.inputs"  # the hash of what an image was built from
RECIPE = "2"  # bump when the way an image is made changes, not what it is made from
# The lab's own image store and build staging, apart from the machine's: what a killed or failed build leaves
# (a working container holding a 12 GB layer, a 6 GB blob being committed) is the lab's own to sweep
STORE = CACHE / "store"
STAGING = CACHE / "staging"
# runc, not crun (crun refuses this machine's hybrid cgroup layout); ulimits within the session's hard limits
PODMAN = ["podman", "--runtime", "runc", "--root", str(STORE), "--runroot", "/run/cs-basics-lab"]
# what one platform image's build needs free: torch's CUDA build unpacked (about 6 GB in the layer, twice while
# it is committed) and the commit's staged copy; below it the build is not started (a test that needs what the
# machine lacks skips and says why)
BUILD_NEEDS_GB = 20
ULIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
UV_CACHE_IN_BUILD = "/var/cache/uv-host"  # not /root/.cache/uv: PrairieLearn's Dockerfile removes that


@dataclass(frozen=True)
class Base:
    """A base image made with debootstrap: Debian's bookworm as PrairieLearn's `debian:bookworm-slim`, Ubuntu
    22.04 as Gradescope's base (its Python 3.10, older than the course's 3.11: setup.sh's other branch)."""

    tag: str
    suite: str
    mirror: str
    components: tuple[str, ...] = ("main",)
    include: tuple[str, ...] = ()
    sources: str = ""  # the image's apt sources, where debootstrap's one line is not what the platform has
    keyring_url: str = ""  # Ubuntu's archive key, which Debian does not package
    # this machine's own certificate authorities (its egress proxy's), trusted in the image as on the machine,
    # where a build reaches PyPI with pip (Gradescope's setup.sh installs uv so)
    host_cas: bool = False

    def key(self) -> str:
        fields = asdict(self)
        if not self.host_cas:  # no field of its own where there is nothing of the machine's in it
            del fields["host_cas"]
        cas = [digest(path.read_bytes()) for path in host_cas()] if self.host_cas else []
        return digest(json.dumps(fields, sort_keys=True), *cas, RECIPE)


def host_cas() -> list[Path]:
    return sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))


# PrairieLearn's Dockerfile installs uv with pip from PyPI: the base trusts this machine's own authorities as the
# jammy one does (Debian's pip reads the system's store); the Dockerfile itself is built as it stands
BOOKWORM = Base(
    "docker.io/library/debian:bookworm-slim",
    "bookworm",
    "http://deb.debian.org/debian",
    include=("ca-certificates",),
    host_cas=True,
)
UBUNTU = "http://archive.ubuntu.com/ubuntu"
JAMMY = Base(
    "localhost/gradescope-like:jammy",
    "jammy",
    UBUNTU,
    components=("main", "universe"),
    # Gradescope's base images carry Python 3 and pip (setup.sh installs uv with it)
    include=("python3", "python3-pip", "ca-certificates"),
    sources="".join(
        f"deb {UBUNTU} {pocket} main universe\n" for pocket in ("jammy", "jammy-updates", "jammy-security")
    ),
    keyring_url=f"{UBUNTU}/pool/main/u/ubuntu-keyring/ubuntu-keyring_2021.03.26_all.deb",
    host_cas=True,
)


def digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def files_digest(root: Path) -> str:
    """A hash of a folder's files, their paths, modes and bytes."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(f"{path.relative_to(root).as_posix()}\0{path.stat().st_mode & 0o777:o}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def podman(*args: str, check: bool = True, timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    STAGING.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TMPDIR": str(STAGING)}  # where podman stages a commit's blobs (else /var/tmp)
    return subprocess.run(
        [*PODMAN, *args], check=check, timeout=timeout, text=True, capture_output=True, env=env, **kwargs
    )


def engine_problem() -> str | None:
    """Why no container can run here, or None. Rootful podman with runc is what the lab needs."""
    if os.geteuid() != 0:
        return "the platform lab needs root (rootful podman with runc)"
    for tool in ("podman", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            return f"the platform lab needs {tool} (.ci/run installs podman, runc and debootstrap as root)"
    found = podman("info", "--format", "{{.Host.OCIRuntime.Name}}", check=False, timeout=60)
    if found.returncode != 0:
        return f"podman cannot run here: {(found.stderr or found.stdout).strip()[-300:]}"
    return None


@contextlib.contextmanager
def building():
    """Held (shared) by every build; the first build that finds none running sweeps what dead builds left."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "lock-store", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another build runs: what is in the store may be its own
        else:
            sweep()
        fcntl.flock(lock, fcntl.LOCK_SH)
        yield


def sweep() -> None:
    """Remove what builds killed or failed left behind (podman removes its build containers only when it lives
    to the end): their working containers and staged blobs, and the images nothing names."""
    found = podman("ps", "--all", "--external", "--format", "json", check=False)
    leftovers = [c["Id"] for c in json.loads(found.stdout or "[]") if c.get("State") == "storage"]
    if leftovers:
        podman("rm", "--force", *leftovers, check=False)
    for staged in STAGING.glob("*"):
        shutil.rmtree(staged, ignore_errors=True) if staged.is_dir() else staged.unlink(missing_ok=True)
    podman("image", "prune", "-f", check=False)


def space_problem() -> str | None:
    """Why no image can be built here now: too little free space where the lab's store is."""
    STORE.mkdir(parents=True, exist_ok=True)
    free_gb = shutil.disk_usage(STORE).free / 2**30
    if free_gb < BUILD_NEEDS_GB:
        return (
            f"the platform lab needs {BUILD_NEEDS_GB} GB free to build an image ({STORE} has {free_gb:.1f} GB): "
            f"free some space, or remove old images with `podman --root {STORE} image prune -a`"
        )
    return None


@contextlib.contextmanager
def cache_lock(name: str):
    """One build of an image at a time on this machine (two pytest runs, or CI beside a developer)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"lock-{name.replace('/', '_')}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def label_of(image: str) -> str | None:
    found = podman("image", "inspect", image, "--format", f'{{{{index .Labels "{LABEL}"}}}}', check=False)
    return found.stdout.strip() if found.returncode == 0 else None


def base_image(base: Base, built: list[str]) -> str:
    """The base image, imported from its cached rootfs tarball, debootstrapped once per machine."""
    key = base.key()
    if label_of(base.tag) == key:
        return base.tag
    with cache_lock(base.suite):
        if label_of(base.tag) == key:
            return base.tag
        tarball = CACHE / f"rootfs-{base.suite}-{key}.tar"
        if not tarball.exists():
            debootstrap(base, tarball)
        podman("import", "--change", f"LABEL {LABEL}={key}", "--change", 'CMD ["/bin/bash"]', str(tarball), base.tag)
        built.append(base.tag)
    return base.tag


def debootstrap(base: Base, tarball: Path) -> None:
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        rootfs = Path(tmp) / "rootfs"
        command = ["debootstrap", "--variant=minbase", f"--components={','.join(base.components)}"]
        if base.include:
            command.append(f"--include={','.join(base.include)}")
        if base.keyring_url:
            command.append(f"--keyring={ubuntu_keyring(base.keyring_url, Path(tmp))}")
        subprocess.run([*command, base.suite, str(rootfs), base.mirror], check=True, capture_output=True, text=True)
        if base.sources:
            (rootfs / "etc/apt/sources.list").write_text(base.sources)
        if base.host_cas and host_cas():
            for ca in host_cas():
                shutil.copy2(ca, rootfs / "usr/local/share/ca-certificates" / ca.name)
            subprocess.run(["chroot", str(rootfs), "update-ca-certificates"], check=True, capture_output=True)
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True)
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], check=True)
        partial.replace(tarball)
    for stale in CACHE.glob(f"rootfs-{base.suite}-*.tar"):  # made from what this base no longer is
        if stale != tarball:
            stale.unlink()


def ubuntu_keyring(url: str, tmp: Path) -> Path:
    deb = tmp / "ubuntu-keyring.deb"
    subprocess.run(["curl", "-fsSL", "--max-time", "60", "-o", str(deb), url], check=True)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp / "keyring")], check=True)
    return tmp / "keyring/etc/apt/trusted.gpg.d/ubuntu-keyring-2018-archive.gpg"


def uv_image(dockerfile: str, built: list[str]) -> str | None:
    """The `COPY --from=ghcr.io/astral-sh/uv:X` image a Dockerfile names, made from this machine's uv (the same
    binary as uv's image holds) when the versions agree; None where the Dockerfile names none."""
    named = re.search(r"COPY --from=(ghcr\.io/astral-sh/uv:([0-9.]+))", dockerfile)
    if named is None:
        return None
    image, version = named.groups()
    uv = shutil.which("uv")
    have = subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    if have != version:
        raise RuntimeError(f"the Dockerfile names uv {version}, this machine has uv {have}: install uv {version}")
    key = digest(Path(uv).read_bytes(), RECIPE)
    if label_of(image) == key:
        return image
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy2(uv, Path(tmp) / "uv")
        (Path(tmp) / "Dockerfile").write_text("FROM scratch\nCOPY uv /uv\n")
        build(image, Path(tmp), key)
    built.append(image)
    return image


# uv trusts its own roots, not the system's: where this machine reaches PyPI through its own authority, a
# build's uv must use the system's store (the base image trusts the machine's authorities: Base.host_cas)
SYSTEM_CERTS = {"UV_NATIVE_TLS": "1", "UV_SYSTEM_CERTS": "1"}


def host_uv_cache() -> Path:
    return Path(subprocess.run(["uv", "cache", "dir"], capture_output=True, text=True, check=True).stdout.strip())


def build(
    tag: str,
    context: Path,
    key: str,
    *,
    dockerfile: Path | None = None,
    uv_cache: bool = False,
    env: dict[str, str] | None = None,
) -> None:
    """`podman build` with the lab's engine settings; the host's uv cache as an overlay (never written). Where
    the machine has too little space, the tests that need the image skip and say so."""
    command = ["build", "--pull=never", "--label", f"{LABEL}={key}", "-t", tag, *ULIMITS]
    for name, value in (env or {}).items():
        command += ["--env", f"{name}={value}"]
    if dockerfile is not None:
        command += ["-f", str(dockerfile)]
    if uv_cache:
        command += ["-v", f"{host_uv_cache()}:{UV_CACHE_IN_BUILD}:O", "--env", f"UV_CACHE_DIR={UV_CACHE_IN_BUILD}"]
    with building():
        if (problem := space_problem()) is not None:
            pytest.skip(problem)
        done = podman(*command, str(context), check=False)
    (CACHE / "logs").mkdir(parents=True, exist_ok=True)  # what each build did (did it download torch?)
    (CACHE / "logs" / f"{tag.replace('/', '_')}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        if "no space left on device" in (done.stdout + done.stderr).lower():  # taken by others while it built
            with building():
                pass  # sweep what this build left, where no other build runs
            pytest.skip(f"the platform lab ran out of space building {tag}: {space_problem() or 'the disk filled'}")
        raise BuildFailed(tag, done.stdout + done.stderr)


class BuildFailed(Exception):
    def __init__(self, tag: str, log: str):
        super().__init__(f"podman build of {tag} failed:\n{log[-4000:]}")
        self.log = log


def copied_digest(context: Path) -> str:
    """A hash of the Dockerfile and the files its COPY and ADD lines take from the context: what the image is
    built from (a course's files beside the Dockerfile that it does not copy rebuild nothing)."""
    dockerfile = (context / "Dockerfile").read_text()
    parts = [dockerfile]
    for line in dockerfile.splitlines():
        words = line.split()
        if words[:1] in (["COPY"], ["ADD"]) and not any(w.startswith("--from") for w in words):
            for source in (w for w in words[1:-1] if not w.startswith("--")):
                found = context / source
                parts.append(files_digest(found) if found.is_dir() else digest(found.read_bytes()))
    return digest(*parts)


def image_from(
    name: str,
    context: Path,
    built: list[str],
    *,
    inputs: str = "",
    uv_cache: bool = True,
    env: dict[str, str] | None = None,
) -> str:
    """An image built from `context`'s Dockerfile, tagged by the hash of what it copies and what it builds on
    (`inputs`: the base images' ids)."""
    key = digest(copied_digest(context), inputs, RECIPE)
    tag = f"localhost/cs-basics-lab/{name}:{key}"
    if label_of(tag) == key:
        return tag
    with cache_lock(name):
        if label_of(tag) != key:
            build(tag, context, key, uv_cache=uv_cache, env=env)
            built.append(tag)
            prune(tag)
    return tag


def prune(tag: str, keep: int = 1) -> None:
    """Remove all but the newest `keep` images of the tag's name (each platform image is some GB), and the
    layers no image uses any more."""
    name = tag.rsplit(":", 1)[0]
    found = podman("images", "--sort", "created", "--format", "{{.Repository}}:{{.Tag}}", name, check=False)
    tags = [t for t in found.stdout.split() if t.startswith(name + ":")]
    for old in tags[keep:]:  # newest first
        podman("rmi", old, check=False)
    podman("image", "prune", "-f", check=False)


def inputs_of(*found: str | None) -> str:
    """What the images an image builds on were built from (their labels, not their ids: a base imported
    again from the same tarball is the same base)."""
    return "+".join(label_of(image) or "" for image in found if image)


# Gradescope's image builder, as its docs describe it: the bundle unzipped into /autograder/source,
# run_autograder copied to /autograder, setup.sh run there once as root with the network. The lab runs the
# bundle's setup.sh twice: first on the bundle's pyproject.toml and uv.lock alone, installing only the locked
# dependencies (a layer podman keeps while they are unchanged: every change to the course's code would
# otherwise install torch again), then on the whole bundle as Gradescope does, which finds them installed
DEPENDENCY_FILES = ("pyproject.toml", "uv.lock", "setup.sh")
GRADESCOPE_DOCKERFILE = """FROM {base}
COPY deps/ /autograder/source/
RUN cd /autograder/source && UV_NO_INSTALL_PROJECT=1 UV_NO_INSTALL_LOCAL=1 bash ./setup.sh
COPY source/ /autograder/source/
RUN mkdir -p /autograder/submission /autograder/results \\
    && cp /autograder/source/run_autograder /autograder/run_autograder \\
    && cd /autograder/source && bash ./setup.sh
"""


def unzipped(bundle: Path, into: Path) -> Path:
    """The bundle unzipped as Gradescope and `unzip` unpack it: with the modes its files carry (setup.sh and
    run_autograder executable), which zipfile alone drops."""
    import zipfile

    with zipfile.ZipFile(bundle) as zf:
        for info in zf.infolist():
            zf.extract(info, into)
            if (mode := info.external_attr >> 16 & 0o777) and not info.is_dir():
                (into / info.filename).chmod(mode)
    return into


def gradescope_context(bundle: Path, base: str, context: Path) -> Path:
    """A build context holding the bundle unzipped as Gradescope unzips it (modes kept) and its Dockerfile."""
    unzipped(bundle, context / "source")
    (context / "deps").mkdir()
    for name in DEPENDENCY_FILES:
        shutil.copy2(context / "source" / name, context / "deps" / name)
    (context / "Dockerfile").write_text(GRADESCOPE_DOCKERFILE.format(base=base))
    return context
