"""`cs-basics bench`: an attention against torch's fused kernel: the one behind tests/adapters.py
(`--impl adapter`, the student's), or the study kernel (`--impl flash`, cs_basics/study/flash.py).

For each sequence length, times the forward pass and forward plus backward of both, in one
process, interleaved (warm-up, then repeats, then the median). Peak memory: on CUDA the
allocator's peak; on the CPU, in a fresh child process (a fork of one warm child that imported
torch) that makes the inputs, resets the kernel's peak resident size (/proc/self/clear_refs) and
makes one call, VmHWM less VmRSS before the call: measured, not estimated.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from cs_basics.harness.portable import is_linux, skipped

YOURS, FLASH, TORCH = "yours", "flash", "torch"
# --impl: the name of its rows, and what it is
MEASURED = {"adapter": YOURS, "flash": FLASH}
DESCRIBED = {
    "adapter": "yours (the attention behind tests/adapters.py)",
    "flash": "flash (the study kernel, cs_basics/study/flash.py)",
}
PASSES = ("forward", "forward+backward")
SHORT = {"forward": "fwd", "forward+backward": "fwd+bwd"}  # the table fits 80 columns
MiB = 2**20


@dataclass
class Config:
    impl: str = "adapter"  # a key of MEASURED
    device: str = "cpu"
    dtype: str = "float32"
    seqs: list[int] = field(default_factory=lambda: [256, 512, 1024, 2048, 4096, 8192])
    batch: int = 4
    heads: int = 8
    head_dim: int = 64
    warmup: int = 1
    repeats: int = 5
    memory: bool = True
    leaderboard_seq: int = 2048
    max_backward_gib: float | None = None  # skip the measured forward+backward where the scores would be larger

    def shape(self, seq: int) -> tuple[int, ...]:
        return (self.batch, self.heads, seq, self.head_dim)

    def scores_gib(self, seq: int) -> float:
        return self.batch * self.heads * seq * seq * torch.tensor([], dtype=self.torch_dtype).element_size() / 2**30

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def measured(self) -> str:
        return MEASURED[self.impl]


def implementations(root: Path, impl: str = "adapter") -> dict[str, Callable]:
    """The measured attention (the student's function, loaded through the assignment's config, or the
    study kernel) and torch's fused kernel."""
    if impl == "flash":
        from cs_basics.study.flash import flash_attention

        return {FLASH: flash_attention, TORCH: F.scaled_dot_product_attention}
    from cs_basics.harness.config import Assignment

    adapters = Assignment.find(root).adapters()
    return {YOURS: adapters.run_scaled_dot_product_attention, TORCH: F.scaled_dot_product_attention}


def plain(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """Materialize every score, softmax, multiply: the baseline the fused kernel is measured against."""
    return torch.softmax(Q @ K.mT / Q.shape[-1] ** 0.5, dim=-1) @ V


def make_inputs(config: Config, seq: int, grad: bool, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(config.shape(seq), generator=gen).to(config.device, config.torch_dtype).requires_grad_(grad)
        for _ in range(3)
    ]


def call(fn: Callable, inputs: list[torch.Tensor], backward: bool) -> None:
    if backward:
        fn(*inputs).sum().backward()
        for t in inputs:
            t.grad = None
    else:
        with torch.no_grad():
            fn(*inputs)


def seconds(fn: Callable, inputs: list[torch.Tensor], backward: bool, device: str) -> float:
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    start = time.perf_counter()
    call(fn, inputs, backward)
    sync()
    return time.perf_counter() - start


def cuda_peak_mib(fn: Callable, inputs: list[torch.Tensor], backward: bool) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    call(fn, inputs, backward)
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / MiB


class PeakProbe:
    """The CPU's peak memory of one call, each in a fresh fork of one warm child (`serve`): a Python that imported
    torch and nothing of the implementations, which each fork imports, then makes the inputs, as a fresh child
    would (a fresh Python a measurement imported torch again: about 1.5 CPU s each, eight of them for two lengths).
    Started at the first measurement; another where the warm child ended (the machine's OOM killer chose it)."""

    def __init__(self, config: Config, root: Path):
        self.setup = json.dumps({"config": asdict(config), "root": str(root)})
        self.process: subprocess.Popen | None = None

    def measure(self, impl: str, seq: int, backward: bool) -> float | None:
        """Peak RSS growth of one call; None if its fork failed (out of memory)."""
        if self.process is None or self.process.poll() is not None:
            command = [sys.executable, "-m", "cs_basics.study.bench", self.setup]
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self.process.stdin.write(json.dumps({"impl": impl, "seq": seq, "backward": backward}) + "\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline().strip()
        except OSError:  # it ended meanwhile
            answer = ""
        return float(answer) if answer not in ("", "failed") else None

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait()


def cpu_peak_mib(
    config: Config, root: Path, impl: str, seq: int, backward: bool, probe: PeakProbe | None = None
) -> float | None:
    """Peak RSS growth of one call in a child of its own (`probe`'s, else one started for it); None if the child
    failed (out of memory)."""
    if probe is not None:
        return probe.measure(impl, seq, backward)
    probe = PeakProbe(config, root)
    try:
        return probe.measure(impl, seq, backward)
    finally:
        probe.close()


def _status_mib(field: str) -> float:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1]) / 1024  # kB


def serve(setup: str) -> None:
    """The warm child of PeakProbe: for each request on stdin, a fork that answers one line (`_probe`), or
    "failed" where it ended otherwise."""
    spec = json.loads(setup)
    resident = resident_file_pages()
    for line in sys.stdin:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                touch(resident)
                _probe(spec | json.loads(line))
                sys.stdout.flush()
                status = 0
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            print("failed", flush=True)


PAGE = 4096


def resident_file_pages() -> list[tuple[int, int]]:
    """The pages of this process's file mappings (its libraries) that its page tables hold now, as (start, count)
    runs: a fork gets none of them (the kernel copies only anonymous memory's), and would count each again as the
    measured call faults it in, which a fresh Python that imported torch had not."""
    runs: list[tuple[int, int]] = []
    try:
        maps, pagemap = open("/proc/self/maps"), open("/proc/self/pagemap", "rb")  # noqa: SIM115
    except OSError:  # no pagemap: each fork counts them again
        return runs
    with maps, pagemap:
        for line in maps:
            found = re.match(r"([0-9a-f]+)-([0-9a-f]+) r\S+ \S+ \S+ (\d+)", line)
            if found is None or found.group(3) == "0":
                continue
            start, end = int(found.group(1), 16), int(found.group(2), 16)
            pagemap.seek(start // PAGE * 8)
            entries = memoryview(pagemap.read((end - start) // PAGE * 8)).cast("Q")
            first = None
            for index, entry in enumerate([*entries, 0]):
                if entry >> 63 and first is None:
                    first = index
                elif not entry >> 63 and first is not None:
                    runs.append((start + first * PAGE, index - first))
                    first = None
    return runs


def touch(runs: list[tuple[int, int]]) -> None:
    """Read a byte of each page of `runs` (resident_file_pages): this process's page tables as its parent's."""
    for start, count in runs:
        for page in range(count):
            ctypes.c_char.from_address(start + page * PAGE).value  # noqa: B018


def _probe(spec: dict) -> None:
    """One measurement in a fork of `serve`: the implementation imported and its inputs made first, then the peak
    resident size during one call, less before."""
    config = Config(**spec["config"])
    fn = {**implementations(Path(spec["root"]), config.impl), "plain": plain}[spec["impl"]]
    inputs = make_inputs(config, spec["seq"], spec["backward"])
    Path("/proc/self/clear_refs").write_text("5")  # Linux: reset the peak (VmHWM) to the current size
    before = _status_mib("VmRSS")
    call(fn, inputs, spec["backward"])
    print(_status_mib("VmHWM") - before)


def peak_mib(
    config: Config, root: Path, impl: str, fn: Callable, seq: int, backward: bool, probe: PeakProbe | None = None
) -> float | None:
    if not config.memory:
        return None
    if config.device.startswith("cuda"):
        return cuda_peak_mib(fn, make_inputs(config, seq, backward), backward)
    if config.device == "cpu" and is_linux():  # read from /proc
        return cpu_peak_mib(config, root, impl, seq, backward, probe)
    return None  # MPS: no peak statistic; macOS and Windows: no /proc (run() says so)


def measure(
    config: Config, root: Path, seq: int, backward: bool, impls: dict[str, Callable], probe: PeakProbe | None = None
) -> list[dict]:
    """Both implementations at one length and pass, interleaved repeats: one row per implementation."""
    pass_name = PASSES[backward]
    too_big = config.max_backward_gib is not None and config.scores_gib(seq) > config.max_backward_gib
    skip = {config.measured} if backward and too_big else set()
    memory = {n: peak_mib(config, root, n, fn, seq, backward, probe) for n, fn in impls.items() if n not in skip}
    if config.memory and config.device == "cpu" and is_linux():
        skip |= {name for name, mib in memory.items() if mib is None}  # its child ran out of memory
    inputs = make_inputs(config, seq, backward)
    times: dict[str, list[float]] = {name: [] for name in impls if name not in skip}
    for r in range(config.warmup + config.repeats):
        for name in times:
            elapsed = seconds(impls[name], inputs, backward, config.device)
            if r >= config.warmup:
                times[name].append(elapsed * 1e3)
    rows = []
    for name in impls:
        row = {"seq": seq, "pass": pass_name, "impl": name, "median_ms": None, "times_ms": [], "peak_mib": None}
        if name in times:
            row |= {"median_ms": statistics.median(times[name]), "times_ms": times[name]}
            row["peak_mib"] = memory.get(name)
        rows.append(row)
    return rows


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each row gains `ratio_to_torch`: its median over torch's at the same length and pass."""
    torch_ms = {(r["seq"], r["pass"]): r["median_ms"] for r in rows if r["impl"] == TORCH}
    for r in rows:
        base = torch_ms.get((r["seq"], r["pass"]))
        r["ratio_to_torch"] = r["median_ms"] / base if r["median_ms"] and base else None
    return rows


def run(config: Config, root: Path | None = None) -> dict:
    from rich.progress import Progress

    from cs_basics.harness.config import Assignment

    root = Assignment.find(root).root
    impls = implementations(root, config.impl)
    if config.memory and config.device == "cpu" and not is_linux():
        note = skipped("measuring the CPU's peak memory", "Linux's /proc (WSL on Windows)", "its column stays empty")
        print(f"cs-basics bench: {note}", file=sys.stderr)
    rows: list[dict] = []
    probe = PeakProbe(config, root)
    try:
        with Progress(transient=True) as progress:
            task = progress.add_task("benchmarking", total=len(config.seqs) * len(PASSES))
            for seq in config.seqs:
                for backward in (False, True):
                    progress.update(task, description=f"seq {seq}, {PASSES[backward]}")
                    rows += measure(config, root, seq, backward, impls, probe)
                    progress.advance(task)
    finally:
        probe.close()
    return report(config, with_ratios(rows))


def report(config: Config, rows: list[dict]) -> dict:
    """Everything measured, plus Gradescope leaderboard entries (lower is better; the study kernel's are
    named for it)."""

    def value(impl: str, key: str, seq: int, pass_name: str = PASSES[0]) -> float | None:
        found = [r[key] for r in rows if (r["impl"], r["seq"], r["pass"]) == (impl, seq, pass_name)]
        return found[0] if found else None

    seq = config.leaderboard_seq if config.leaderboard_seq in config.seqs else config.seqs[-1]
    name, prefix = config.measured, "" if config.impl == "adapter" else f"{config.measured} "
    entries = [
        (f"{prefix}forward ms at seq {seq}", value(name, "median_ms", seq)),
        (f"{prefix}forward time / torch at seq {seq}", value(name, "ratio_to_torch", seq)),
        (f"{prefix}forward peak MiB at seq {seq}", value(name, "peak_mib", seq)),
    ]
    return {
        "config": asdict(config),
        "measured": DESCRIBED[config.impl],
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "measurements": rows,
        "leaderboard": [{"name": name, "value": round(v, 3), "order": "asc"} for name, v in entries if v is not None],
    }


def table(result: dict):
    from rich.table import Table

    config = result["config"]
    name = MEASURED[config["impl"]]
    out = Table(title=f"attention: {result['measured']} vs torch's fused SDPA, median of {config['repeats']} (ms)")
    for column in ("seq", "pass", f"{name} ms", "torch ms", "ratio", f"{name} MiB", "torch MiB"):
        out.add_column(column, justify="right", no_wrap=True)

    def fmt(v: float | None, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    rows = result["measurements"]
    for seq in result["config"]["seqs"]:
        for pass_name in PASSES:
            pair = {r["impl"]: r for r in rows if r["seq"] == seq and r["pass"] == pass_name}
            yours, ref = pair[name], pair[TORCH]
            out.add_row(
                str(seq),
                SHORT[pass_name],
                fmt(yours["median_ms"], ".1f"),
                fmt(ref["median_ms"], ".1f"),
                fmt(yours["ratio_to_torch"], ".2f"),
                fmt(yours["peak_mib"], ".0f"),
                fmt(ref["peak_mib"], ".0f"),
            )
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
    measured = MEASURED[result["config"]["impl"]]
    for impl, color in ((measured, "tab:blue"), (TORCH, "tab:orange")):
        for pass_name, style, marker in zip(PASSES, ("-", "--"), ("o", "s"), strict=True):
            rows = [r for r in result["measurements"] if r["impl"] == impl and r["pass"] == pass_name]
            timed = [r for r in rows if r["median_ms"] is not None]
            label = f"{impl}, {pass_name}"
            ax_t.plot(
                [r["seq"] for r in timed],
                [r["median_ms"] for r in timed],
                style,
                color=color,
                marker=marker,
                label=label,
            )
            mem = [r for r in rows if r["peak_mib"] is not None]
            ax_m.plot(
                [r["seq"] for r in mem],
                [max(r["peak_mib"], 0.01) for r in mem],
                style,
                color=color,
                marker=marker,
                label=label,
            )
    c = result["config"]
    for ax, ylabel, corner in (
        (ax_t, "median time (ms)", "upper left"),
        (ax_m, "peak extra memory (MiB)", "lower right"),
    ):
        ax.set(xscale="log", yscale="log", xlabel="sequence length", ylabel=ylabel)
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc=corner)  # the corners the curves leave empty
    fig.suptitle(f"{c['device']} {c['dtype']}, batch {c['batch']}, {c['heads']} heads, head size {c['head_dim']}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_json(result: dict, path: Path) -> None:
    path.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")


if __name__ == "__main__":
    serve(sys.argv[1])
