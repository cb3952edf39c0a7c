"""`cs-basics experiments` and `cs-basics bench` in quick mode: what they print and write."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cs_basics.cli import main
from cs_basics.study import bench, experiments

PNG = b"\x89PNG\r\n\x1a\n"


def is_png(path):
    return path.is_file() and path.read_bytes()[:8] == PNG and path.stat().st_size > 5_000


@pytest.fixture(scope="module")
def quick_experiments(tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    return out, experiments.run(out, seed=3, quick=True)


def test_experiments_write_real_pngs(quick_experiments):
    out, _ = quick_experiments
    assert sorted(p.name for p in out.iterdir()) == ["masking.png", "scaling.png"]
    assert all(is_png(out / name) for name in ("masking.png", "scaling.png"))


def test_verification_against_torch(quick_experiments):
    v = quick_experiments[1]["verification"]
    assert v["output_shape"] == [2, 4, 16] and v["weights_shape"] == [2, 4, 6]
    assert v["max_abs_diff"] < 1e-5 and v["max_row_sum_error"] < 1e-5


def test_variance_table_matches_theory(quick_experiments):
    rows = quick_experiments[1]["variance"]
    assert [r["d_k"] for r in rows] == [8, 64, 512]
    for r in rows:  # 20,000 draws: the standard error of the variance is about 1%
        assert r["variance"] == pytest.approx(r["d_k"], rel=0.05)
        assert r["relative_error"] == pytest.approx(r["variance"] / r["d_k"] - 1)


def test_scale_keeps_the_weights_from_peaking(quick_experiments):
    rows = quick_experiments[1]["peakedness"]
    first, last = rows[0], rows[-1]
    assert last["unscaled_max"] > 0.9 > first["unscaled_max"] and last["unscaled_entropy"] < 0.3
    assert all(0.2 < r["scaled_max"] < 0.45 and r["scaled_entropy"] > 1.7 for r in rows)


def test_experiments_are_deterministic_for_a_seed(tmp_path):
    a = experiments.run(tmp_path / "a", seed=5, quick=True)
    b = experiments.run(tmp_path / "b", seed=5, quick=True)
    assert a["variance"] == b["variance"] and a["peakedness"] == b["peakedness"]
    assert (tmp_path / "a/masking.png").read_bytes() == (tmp_path / "b/masking.png").read_bytes()


def test_experiments_use_the_adapter(monkeypatch, tmp_path):
    """A student's broken function shows up in the verification: the adapter is what runs."""
    from cs_basics.harness.config import Assignment

    adapters = Assignment.find().adapters()
    real = adapters.run_scaled_dot_product_attention
    monkeypatch.setattr(
        adapters, "run_scaled_dot_product_attention", lambda Q, K, V, mask=None: real(Q * 2, K, V, mask)
    )
    v = experiments.verify(adapters, torch.Generator().manual_seed(0))
    assert v["max_abs_diff"] > 1e-3


def test_bench_quick_writes_json_with_leaderboard_and_a_plot(tmp_path, capsys):
    args = ["bench", "--seq", "32", "64", "--batch", "1", "--heads", "2", "--head-dim", "8", "--repeats", "2"]
    assert main([*args, "--json", str(tmp_path / "b.json"), "--plot", str(tmp_path / "b.png")]) == 0
    assert "ratio" in capsys.readouterr().out
    result = json.loads((tmp_path / "b.json").read_text())
    assert is_png(tmp_path / "b.png")
    rows = result["measurements"]
    assert {(r["seq"], r["pass"], r["impl"]) for r in rows} == {
        (s, p, i) for s in (32, 64) for p in bench.PASSES for i in (bench.YOURS, bench.TORCH)
    }
    for r in rows:
        assert r["median_ms"] > 0 and len(r["times_ms"]) == 2 and r["peak_mib"] is not None
    torch_ms = {(r["seq"], r["pass"]): r["median_ms"] for r in rows if r["impl"] == bench.TORCH}
    for r in rows:
        assert r["ratio_to_torch"] == pytest.approx(r["median_ms"] / torch_ms[r["seq"], r["pass"]])
    board = result["leaderboard"]
    assert [e["name"] for e in board] == [
        "forward ms at seq 64",
        "forward time / torch at seq 64",
        "forward peak MiB at seq 64",
    ]
    assert all(e["order"] == "asc" and isinstance(e["value"], float) for e in board)
    assert result["config"]["impl"] == "adapter" and result["measured"].startswith("yours (the attention behind")


def test_bench_measures_the_study_kernel_when_asked_and_says_so(tmp_path, capsys):
    args = ["bench", "--impl", "flash", "--seq", "32", "--batch", "1", "--heads", "2", "--head-dim", "8"]
    assert main([*args, "--repeats", "1", "--no-memory", "--json", str(tmp_path / "b.json")]) == 0
    assert "flash ms" in capsys.readouterr().out
    result = json.loads((tmp_path / "b.json").read_text())
    assert result["config"]["impl"] == "flash" and result["measured"].startswith("flash (the study kernel")
    assert {r["impl"] for r in result["measurements"]} == {bench.FLASH, bench.TORCH}
    assert result["leaderboard"][0]["name"] == "flash forward ms at seq 32"


def test_cpu_peak_memory_is_measured_in_a_child():
    config = bench.Config(batch=1, heads=8, head_dim=64, seqs=[2048])
    from cs_basics.harness.config import Assignment

    root = Assignment.find().root
    fused = bench.cpu_peak_mib(config, root, bench.TORCH, 2048, backward=False)
    plain = bench.cpu_peak_mib(config, root, "plain", 2048, backward=False)
    scores_mib = 8 * 2048 * 2048 * 4 / 2**20  # 128 MiB
    assert plain > scores_mib > fused  # materializing every score shows up in the measured peak


# a fork of a process that imported torch, before and after it touched the pages of its parent's libraries that its
# parent's page tables held (a fork holds none of them, and its measured call would count them again)
TOUCHED = """
import os
import torch
from cs_basics.study import bench

def rss_file():
    return int(next(line for line in open("/proc/self/status") if line.startswith("RssFile:")).split()[1])

runs = bench.resident_file_pages()
parent = rss_file()
read, write = os.pipe()
if os.fork() == 0:
    before = rss_file()
    bench.touch(runs)
    os.write(write, f"{parent} {before} {rss_file()}".encode())
    os._exit(0)
os.wait()
print("RSSFILE", os.read(read, 100).decode())
"""


@pytest.mark.skipif(not Path("/proc/self/pagemap").exists(), reason="no /proc/self/pagemap here (Linux only)")
def test_a_forked_probe_holds_its_parents_library_pages_before_it_measures():
    """A fork of the warm child holds none of its parent's library pages in its page tables: the call it measures
    would fault them in again and count them (3 to 7 MiB more for torch's own attention), which a fresh Python that
    imported torch holds already. Touched first, they are the parent's."""
    done = subprocess.run([sys.executable, "-c", TOUCHED], capture_output=True, text=True, timeout=120)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RSSFILE ")), None)
    assert line is not None, done.stdout + done.stderr[-2000:]
    parent, before, after = map(int, line.split()[1:])
    assert before < parent / 2 and after > parent * 0.95, (parent, before, after)


def test_the_cpus_peaks_come_from_forks_of_one_warm_child_and_a_failed_one_costs_only_its_own():
    """`cs-basics bench` measures each peak in a fresh fork of one child that imported torch once (not a Python a
    measurement): a measurement that fails says None, and the next ones are measured all the same, as before."""
    from cs_basics.harness.config import Assignment

    config = bench.Config(batch=1, heads=8, head_dim=64, seqs=[2048])
    probe = bench.PeakProbe(config, Assignment.find().root)
    try:
        plain = probe.measure("plain", 2048, backward=False)
        warm = probe.process.pid
        assert probe.measure("no such implementation", 2048, backward=False) is None
        fused = probe.measure(bench.TORCH, 2048, backward=False)
        assert probe.process.pid == warm and probe.process.poll() is None
    finally:
        probe.close()
    assert plain > 8 * 2048 * 2048 * 4 / 2**20 > fused


@pytest.mark.parametrize("command", [["experiments", "--quick"], ["bench", "--seq", "16", "--no-memory"]])
def test_a_stub_gets_a_message_not_a_traceback(command, monkeypatch, tmp_path, capsys):
    from cs_basics.nn import functional

    def stub(Q, K, V, mask=None):
        raise NotImplementedError

    monkeypatch.setattr(functional, "scaled_dot_product_attention", stub)
    if command[0] == "experiments":
        command = [*command, "--out", str(tmp_path)]
    assert main(command) == 1
    assert "raises NotImplementedError; write scaled_dot_product_attention" in capsys.readouterr().err


def test_bench_of_an_unwritten_study_kernel_says_so(monkeypatch, capsys):
    from cs_basics.study import flash

    def stub(Q, K, V, mask=None):
        raise NotImplementedError

    monkeypatch.setattr(flash, "flash_attention", stub)
    assert main(["bench", "--impl", "flash", "--seq", "16", "--no-memory"]) == 1
    assert "cs_basics/study/flash.py (an extra) is not written yet" in capsys.readouterr().err


def test_bench_rejects_a_length_below_one(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--seq", "0"])
    assert "--seq: must be at least 1, got 0" in capsys.readouterr().err
