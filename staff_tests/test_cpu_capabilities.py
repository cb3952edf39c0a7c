"""The suite holds on any CPU: under every ATEN_CPU_CAPABILITY torch can use on this machine.

torch's vectorized CPU kernels round differently per capability (default, avx2, avx512 on x86; sve256,
vsx, zvector elsewhere), so running each one here stands in for running on other machines. One child
process per capability regenerates every fixture folder (this assignment's, its hidden ones and
examples/multihead_attention's) into a temporary copy, which must stay byte for byte as committed, then
runs the graded tests and the fixture check. Run as `python -m staff_tests.test_cpu_capabilities CAP REPORT`
it is that child.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cs_basics.harness.config import Assignment
from cs_basics.harness.fixtures import FixtureStore
from cs_basics.harness.generate import oracle_name, regenerate_store

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "multihead_attention"
X86 = ("default", "avx2", "avx512")  # torch's order: each runs wherever the next one does
GRADED = ["-q", "tests", "hidden", "staff_tests/test_fixture_store.py", "-p", "no:cacheprovider"]


def capability_here(env: dict[str, str]) -> str:
    """What torch picks under `env` (lower case, as ATEN_CPU_CAPABILITY spells it)."""
    if env.get("ATEN_CPU_CAPABILITY") == os.environ.get("ATEN_CPU_CAPABILITY"):
        return torch.backends.cpu.get_cpu_capability().lower()  # this process already knows
    ask = [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"]
    return subprocess.run(ask, env=env, capture_output=True, text=True, check=True).stdout.strip().lower()


def capabilities() -> list[str]:
    """Each capability at or below what torch picks unasked. Not above: torch takes `avx512` on its
    word, and on a CPU without AVX-512 the child would die of an illegal instruction."""
    native = capability_here({k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"})
    ladder = X86 if native in X86 else ("default", native)
    return list(ladder[: ladder.index(native) + 1])


@pytest.mark.timeout(600)
def test_fixtures_and_graded_tests_hold_under_every_cpu_capability(tmp_path):
    """Under each capability: regenerating every fixture folder leaves each file byte for byte, and
    `pytest tests hidden staff_tests/test_fixture_store.py` passes. A capability torch does not take is skipped."""
    names = capabilities()
    # the capability is about CPU kernels, whatever else the machine has; one thread each, as the children
    # run side by side and these tensors are far below torch's grain for splitting a kernel across threads
    env = os.environ | {"CS_BASICS_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}
    children = {
        name: subprocess.Popen(
            [sys.executable, "-m", "staff_tests.test_cpu_capabilities", name, str(tmp_path / f"{name}.json")],
            cwd=ROOT,
            env=env | {"ATEN_CPU_CAPABILITY": name},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in names
    }
    try:
        failures, accepted = [], []
        for name, child in children.items():
            output = child.communicate(timeout=500)[0]
            report_path = tmp_path / f"{name}.json"
            report = json.loads(report_path.read_text()) if report_path.is_file() else {}
            if not report.get("accepted", True):
                print(f"ATEN_CPU_CAPABILITY={name}: torch runs {report['capability']} instead here; skipped")
                continue
            accepted.append(name)
            print(f"ATEN_CPU_CAPABILITY={name}: largest gaps {report.get('worst')}")
            if child.returncode != 0 or report.get("changed") or report.get("pytest") != 0:
                changed = "\n".join(f"  {file}: {why}" for file, why in report.get("changed", {}).items())
                failures.append(
                    f"ATEN_CPU_CAPABILITY={name} (exit {child.returncode}, graded tests exit {report.get('pytest')})"
                    + (f"\n regenerating the fixtures changed:\n{changed}" if changed else "")
                    + f"\n{output[-3000:]}"
                )
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
    assert "default" in accepted, f"torch refused ATEN_CPU_CAPABILITY=default: the test would prove nothing ({names})"
    assert not failures, (
        "\n\n".join(failures) + f"\nrerun one: ATEN_CPU_CAPABILITY=CAP uv run pytest {' '.join(GRADED)}"
    )


@pytest.mark.parametrize(
    ("native", "tried"),
    [("avx512", ["default", "avx2", "avx512"]), ("avx2", ["default", "avx2"]), ("sve256", ["default", "sve256"])],
)
def test_capabilities_tried_are_those_at_or_below_what_torch_picks(monkeypatch, native, tried):
    monkeypatch.setattr(sys.modules[__name__], "capability_here", lambda env: native)
    assert capabilities() == tried


# ---------------------------------------------------------------- the child, one per capability


def fixture_sets(root: Path) -> tuple[list, str]:
    assignment = Assignment.find(root)
    if root == ROOT:
        return assignment.stores(), oracle_name(assignment)
    # another assignment's `tests` package would clash with ours in this process: load its cases by path
    path = root / (assignment.table.get("cases", "tests.cases").replace(".", "/") + ".py")
    spec = importlib.util.spec_from_file_location(f"cases_of_{root.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [(assignment.store, list(module.CASES))], oracle_name(assignment)


def regenerate_copies(scratch: Path) -> tuple[dict[str, str], dict[str, list]]:
    """Regenerate a copy of every fixture folder; return the files that changed (with why) and the
    largest distance found of inputs and of expected values (in ulps, with where)."""
    changed: dict[str, str] = {}
    worst = {"input": [0.0, ""], "expected": [0.0, ""]}
    for root in (ROOT, EXAMPLE):
        stores, oracle = fixture_sets(root)
        for store, cases in stores:
            copy = FixtureStore(scratch / store.root.relative_to(ROOT))
            shutil.copytree(store.root, copy.root)
            before = {p.name: p.read_bytes() for p in copy.root.iterdir()}
            done = regenerate_store(copy, cases, oracle)
            after = {p.name: p.read_bytes() for p in copy.root.iterdir()}
            for name in sorted(before.keys() | after.keys()):
                if before.get(name) != after.get(name):
                    why = done.written.get(name.removesuffix(".safetensors"), "(the checksums of the files above)")
                    why = "removed: no case uses it" if name in done.removed else why
                    changed[str(store.root.relative_to(ROOT) / name)] = why
            for kind in worst:
                worst[kind] = max(worst[kind], list(done.worst(kind)))
    return changed, worst


def child(requested: str, report_path: Path) -> int:
    report: dict = {"capability": torch.backends.cpu.get_cpu_capability().lower()}
    report["accepted"] = report["capability"] == requested
    if report["accepted"]:
        scratch = report_path.with_suffix("")
        report["changed"], report["worst"] = regenerate_copies(scratch)
        report["pytest"] = int(pytest.main(GRADED))
    report_path.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(child(sys.argv[1], Path(sys.argv[2])))
