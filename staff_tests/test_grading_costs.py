"""What one grading and a batch cost, and what they no longer pay for (issue 31)."""

from __future__ import annotations

import subprocess
import sys

from cs_basics.harness.grading.sandbox import named_libraries

from .submissions import ROOT, run, submission, wrap_attention

ZYGOTE = ROOT / "cs_basics" / "harness" / "grading" / "zygote.py"

WARM_UP = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("zygote", sys.argv[1])
zygote = importlib.util.module_from_spec(spec)
spec.loader.exec_module(zygote)
zygote.warm_up()
print(sorted(name for name in ("torch", "einops", "torch._dynamo", "einx") if name in sys.modules))
"""


def test_the_grading_server_starts_without_torch_dynamo_or_einx():
    """einx's torch backend imports torch._dynamo, as long to import as torch: the server loads it only for a
    submission that names einx (staff_tests/students/honest_einx is graded with it)."""
    done = subprocess.run([sys.executable, "-I", "-c", WARM_UP, str(ZYGOTE)], capture_output=True, text=True)
    assert done.stdout.strip() == "['einops', 'torch']", done.stdout + done.stderr


def test_the_server_loads_einx_only_for_code_that_names_it(tmp_path):
    uses = tmp_path / "uses.py"
    uses.write_text("import einx\n")
    plain = tmp_path / "plain.py"
    plain.write_text("import torch\n")
    assert named_libraries([plain, uses]) == ["einx"]
    assert named_libraries([plain]) == []


def test_the_child_runs_with_the_threads_the_limits_give(assignment, tmp_path):
    """A batch gives each worker's child its share of the cores (two children of two threads on two cores
    spin in OpenMP's barriers); the child sets it before the submission's code runs."""
    said = wrap_attention('raise RuntimeError(f"threads={torch.get_num_threads()}")')
    result = run(assignment, submission(tmp_path, said), threads=1)
    outputs = [t.output for t in result.tests if t.case.problem == "scaled_dot_product_attention"]
    assert outputs and all("threads=1" in output for output in outputs), outputs[:2]


SERVER_FIRST = """
import sys
from cs_basics import cli
from cs_basics.harness.grading import sandbox

start = sandbox.Server.__init__
torch_then = []


def noted(self, *args, **kwargs):
    torch_then.append("torch" in sys.modules)
    start(self, *args, **kwargs)


sandbox.Server.__init__ = noted
status = cli.main(["grade", "--quiet", "--results", sys.argv[1]])
print("status", status, "torch imported when the server started:", torch_then)
"""


def test_one_grading_starts_the_server_before_it_imports_torch(tmp_path):
    """The grading server imports torch as the grader does: started first, the two imports run side by side."""
    script = [sys.executable, "-c", SERVER_FIRST, str(tmp_path / "results.json")]
    done = subprocess.run(script, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert "status 0 torch imported when the server started: [False]" in done.stdout, done.stdout + done.stderr[-3000:]
