"""A single-node Slurm cluster stood up by hand in a temporary folder, for the tests and the benchmark.

munged, slurmctld and slurmd run in the foreground as our own child processes (no systemd, nothing
daemonised), with their key, socket, configuration, state, spool, logs and ports in the folder;
`SLURM_CONF` points Slurm's commands at it. Debian's `slurm-wlm` and `munge` are installed with
apt-get when missing. `stop()` cancels every job of this cluster, then ends the daemons it started.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

PACKAGES = ("slurm-wlm", "munge")
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}
START_SECONDS = 300  # the daemons' start, bounded for a hang: on a loaded machine a start may take minutes


class Unavailable(Exception):
    """Why a real Slurm cannot be stood up here (the tests skip with it)."""


def install() -> None:
    """Slurm and munge from the distribution, when missing: as root, with apt-get."""
    if os.geteuid() != 0:  # slurmd runs jobs as their users, and the jobs here grade as root
        raise Unavailable("not root: installing slurm-wlm and munge and starting their daemons needs root")
    if all(shutil.which(p) for p in PROGRAMS):
        return
    if not shutil.which("apt-get"):
        raise Unavailable("slurm-wlm and munge are not installed and there is no apt-get to install them")
    done = apt_get("install", "-y", "-qq", "--no-install-recommends", *PACKAGES)
    if done.returncode != 0:  # stale package lists: update once and try again
        apt_get("update", "-qq")
        done = apt_get("install", "-y", "-qq", "--no-install-recommends", *PACKAGES)
    if done.returncode != 0 or not all(shutil.which(p) for p in PROGRAMS):
        why = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no message"]
        raise Unavailable(f"apt-get could not install {' and '.join(PACKAGES)} (no network to the registry?): {why[0]}")


def apt_get(*args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["apt-get", *args], env=os.environ | APT_ENV, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"apt-get {args[0]} took more than 5 minutes (no network to the registry?)") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def memory_mb() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.85)


def slurm_conf(folder: Path, host: str, socket_path: Path) -> str:
    return "\n".join(
        [
            "ClusterName=cs-basics-test",
            f"SlurmctldHost={host}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={socket_path}",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "MpiDefault=none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "ReturnToService=2",
            "MailProg=/bin/true",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SchedulerParameters=sched_interval=1",
            "KillWait=30",
            "MinJobAge=600",  # finished jobs stay visible to scontrol for the checks
            f"StateSaveLocation={folder / 'state'}",
            f"SlurmdSpoolDir={folder / 'spool'}",
            f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
            f"SlurmdPidFile={folder / 'slurmd.pid'}",
            f"SlurmctldLogFile={folder / 'slurmctld.log'}",
            f"SlurmdLogFile={folder / 'slurmd.log'}",
            f"NodeName={host} CPUs={os.cpu_count()} RealMemory={memory_mb()} State=UNKNOWN",
            f"PartitionName=main Nodes={host} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


class Cluster:
    """`with Cluster(folder) as cluster:` a running single-node Slurm; `cluster.env` for its commands."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.daemons: list[subprocess.Popen] = []
        self.logs: list = []
        self.env = dict(os.environ)

    def start(self) -> Cluster:
        install()
        munge, host = self.folder / "munge", socket.gethostname().split(".")[0]
        for sub in ("munge", "state", "spool"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = munge / "munge.socket"
        conf = self.folder / "slurm.conf"
        conf.write_text(slurm_conf(self.folder, host, sock))
        outside = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}  # run inside a job: not its
        self.env = outside | {"SLURM_CONF": str(conf)}
        self.daemon(
            "munged", "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
            f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        )  # fmt: skip
        self.wait_for(sock.exists, "munged's socket", START_SECONDS, starting=True)
        self.daemon("slurmctld", "-D", "-i", "-f", str(conf))
        self.daemon("slurmd", "-D", "-f", str(conf))
        self.wait_for(lambda: self.node_state() == "idle", "the node to be idle", START_SECONDS, starting=True)
        return self

    def daemon(self, *command: str) -> None:
        log = open(self.folder / f"{command[0]}.out", "w")  # noqa: SIM115 (the daemon keeps it)
        self.logs.append(log)
        self.daemons.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env))

    def node_state(self) -> str:
        done = subprocess.run(["sinfo", "-h", "-o", "%T"], env=self.env, capture_output=True, text=True)
        return done.stdout.strip()

    def wait_for(self, ready, what: str, seconds: float = 60, starting: bool = False) -> None:
        """Until `ready()`; `seconds` bounds a hang, never measures a speed. A daemon that ends while `starting`
        is the machine refusing what Slurm needs (a container without the capabilities or cgroups slurmd asks
        for): Unavailable, so the tests skip with its log's last lines."""
        deadline = time.monotonic() + seconds
        while not ready():
            dead = [d.args[0] for d in self.daemons if d.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "".join(self.log_tail(p) for p in sorted(self.folder.glob("*.log")))
                if dead and starting:
                    raise Unavailable(f"{', '.join(dead)} ended as it started here\n{logs}")
                why = f"{', '.join(dead)} ended" if dead else f"no {what} after {seconds:g} s"
                raise RuntimeError(f"the test Slurm did not start: {why}\n{logs}")
            time.sleep(0.2)

    def log_tail(self, path: Path) -> str:
        return f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]) + "\n"

    def run(self, *command: str, check: bool = True) -> str:
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: {done.stderr}")
        return done.stdout.strip()

    def sbatch(self, *args: str, env: dict | None = None) -> str:
        """Submit; the job's id."""
        done = subprocess.run(
            ["sbatch", "--parsable", *args], env=self.env | (env or {}), capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(args)}: {done.stderr}")
        return done.stdout.strip().split(";")[0]

    def queued(self, job: str | None = None) -> list[str]:
        """`id state` of each job (each array task) this cluster has not finished."""
        listing = self.run("squeue", "-h", "-o", "%i %T", *(["-j", job] if job else []), check=False)
        return listing.splitlines()

    def wait(self, job: str, seconds: float = 300) -> None:
        self.wait_for(lambda: not self.queued(job), f"end of job {job}", seconds)

    def job(self, job: str) -> dict[str, str]:
        """`scontrol show job`'s fields of one job (or array task: `123_2`)."""
        text = self.run("scontrol", "-o", "show", "job", job)
        return dict(field.split("=", 1) for field in text.split() if "=" in field)

    def stop(self) -> None:
        """Cancel this cluster's jobs, then end its daemons (each is our child: no pid is guessed)."""
        if self.daemons and all(d.poll() is None for d in self.daemons[1:]):
            subprocess.run(["scancel", "--full", "--user", "root"], env=self.env, capture_output=True, timeout=60)
            deadline = time.monotonic() + 60
            while self.queued() and time.monotonic() < deadline:
                time.sleep(0.5)
        for daemon in reversed(self.daemons):
            if daemon.poll() is None:
                daemon.terminate()
                try:
                    daemon.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait()
        for log in self.logs:
            log.close()

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
