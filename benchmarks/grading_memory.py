"""Benchmark: the memory one grading takes, its whole process tree, as a container's cgroup counts it.

Runs `cs-basics grade` of this checkout (the reference; `--submission` another) in a memory cgroup of
its own, as a container engine would (cgroup v1's memory controller, or v2's where this machine has
it): the cgroup's peak (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`: the processes' own memory
and the page cache they brought in) and, sampled every 0.1 s, each process's peak RSS, PSS and
anonymous memory (its own, beside the libraries' pages it shares). `--limit-mb` gives the cgroup a
limit (Gradescope's default is 768): past it the kernel reclaims page cache, then its OOM killer ends
a process. `--cold` first drops this environment's files from the page cache (posix_fadvise), so that
the grading reads torch's libraries again and the cgroup is charged for them, as in a fresh container;
pages another process holds mapped (another Python with torch, on a shared machine) stay, and are
charged to whoever read them first: the peak is then lower than a container's.
Needs root (to make the cgroup). Usage:
    uv run python benchmarks/grading_memory.py [--limit-mb 768] [--cold] [--submission FOLDER]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
V1, V2 = Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup")


def make_cgroup(limit_mb: int) -> tuple[Path, str]:
    """A fresh memory cgroup (`limit_mb` MiB, no swap beyond it, unless 0) and the name of its peak's file."""
    name, size = f"cs-basics-memory-{uuid.uuid4().hex[:8]}", str(limit_mb << 20)
    if (V1 / "memory.limit_in_bytes").exists():  # memsw: memory and swap together
        group, peak, limits = (
            V1 / name,
            "memory.max_usage_in_bytes",
            {"memory.limit_in_bytes": size, "memory.memsw.limit_in_bytes": size},
        )
    elif "memory" in (V2 / "cgroup.subtree_control").read_text():  # swap.max: swap alone
        group, peak, limits = V2 / name, "memory.peak", {"memory.max": size, "memory.swap.max": "0"}
    else:
        raise SystemExit("no memory controller to make a cgroup with (cgroup v1's, or v2's enabled at the root)")
    group.mkdir()
    for file, value in limits.items() if limit_mb else ():
        if (group / file).exists():  # no swap accounting: no memsw file
            (group / file).write_text(value)
    return group, peak


def evict(folder: Path) -> int:
    """Drop `folder`'s files from the page cache (those no process has mapped); how many files."""
    count = 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                count += 1
            finally:
                os.close(fd)
    return count


def sample(pid: str) -> dict[str, int] | None:
    """A process's RSS, PSS, anonymous memory and VmData, in MiB; None once it is gone."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    fields = {line.split(":")[0]: int(line.split()[1]) >> 10 for line in rollup[1:] if line.endswith("kB")}
    data = next((int(line.split()[1]) >> 10 for line in status if line.startswith("VmData:")), 0)
    return {"rss": fields.get("Rss", 0), "pss": fields.get("Pss", 0), "anon": fields.get("Anonymous", 0), "data": data}


def role(pid: str) -> str:
    """Which process of the grading: the grader, its server, a job's child, the scan, bubblewrap."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        parent_command = Path(f"/proc/{parent}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    if command.startswith("/usr/bin/bwrap") or command.startswith("bwrap"):
        return "bubblewrap"
    if "zygote.py" in command:  # a job's child is a fork of the server (bubblewrap's command names it too)
        return (
            "a job's child"
            if b"python" in parent_command[0] and b"zygote.py" in b" ".join(parent_command)
            else "the grading server"
        )
    if "scan" in command:
        return "the scan"
    return "the grader" if "cs_basics.cli" in command else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-mb", type=int, default=0, help="the cgroup's limit (0: none)")
    parser.add_argument("--cold", action="store_true", help="drop the environment's files from the page cache first")
    parser.add_argument("--submission", type=Path, default=ROOT, help="what to grade (default: this checkout)")
    args = parser.parse_args()
    if args.cold:
        print(f"dropped {evict(Path(sys.prefix)) + evict(ROOT / 'cs_basics')} files from the page cache")
    group, peak_file = make_cgroup(args.limit_mb)
    peaks: dict[str, dict[str, int]] = {}  # pid -> its peaks
    roles: dict[str, str] = {}  # pid -> which process of the grading it is
    try:
        with tempfile.TemporaryDirectory() as tmp:
            command = [sys.executable, "-m", "cs_basics.cli", "grade", "--project", str(ROOT), "--quiet"]
            command += ["--submission", str(args.submission), "--results", f"{tmp}/results.json"]
            start = time.perf_counter()
            log = open(f"{tmp}/log", "w+")  # noqa: SIM115 (read once the command is done)
            process = subprocess.Popen(
                command,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())),
            )
            while process.poll() is None:
                for pid in (group / "cgroup.procs").read_text().split():
                    now, name = sample(pid), role(pid) or roles.get(pid)
                    if now is not None and name:
                        roles[pid] = name
                        peaks[pid] = {k: max(v, peaks.get(pid, {}).get(k, 0)) for k, v in now.items()}
                time.sleep(0.1)
            seconds = time.perf_counter() - start
            log.seek(0)
            said = [line for line in log.read().splitlines() if line.startswith(("cs-basics grade:", "score"))]
        peak = int((group / peak_file).read_text()) >> 20
    finally:
        for _ in range(100):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    print("\n".join(said))
    print(f"exit status {process.returncode} in {seconds:.1f} s; the cgroup's peak: {peak} MiB", end="")
    print(f" (limit {args.limit_mb} MiB)" if args.limit_mb else " (no limit)")
    print(f"{'process':<34} {'RSS':>6} {'PSS':>6} {'anon':>6} {'VmData':>7}  (peaks, MiB)")
    for pid, p in sorted(peaks.items(), key=lambda kv: -kv[1]["pss"]):
        if p["rss"] >= 2:
            print(f"{f'{roles[pid]} ({pid})':<34} {p['rss']:>6} {p['pss']:>6} {p['anon']:>6} {p['data']:>7}")


if __name__ == "__main__":
    main()
