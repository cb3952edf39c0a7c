"""Make every case's fixture from its seed and the float64 oracle."""

from __future__ import annotations

import torch

from cs_basics.harness.cases import Case, Tensors
from cs_basics.harness.config import Assignment

COMMAND = "uv run cs-basics fixtures"
# this assignment's oracle; another declares its own as `oracle = "..."` in [tool.cs-basics]
ORACLE = "float64, torch.softmax / torch.nn.functional.scaled_dot_product_attention on the CPU"


def fixture_tensors(case: Case) -> Tensors:
    inputs = case.make_inputs(case.seed)
    expected = case.oracle({k: v.clone() for k, v in inputs.items()})
    return {f"input.{k}": v for k, v in inputs.items()} | {f"expected.{k}": v.detach() for k, v in expected.items()}


def provenance(case: Case, oracle: str = ORACLE) -> dict[str, str]:
    return {
        "case": case.id,
        "problem": case.problem,
        "seed": str(case.seed),
        "command": COMMAND,
        "torch": torch.__version__,
        "oracle": oracle,
    }


def regenerate(assignment: Assignment) -> list[str]:
    """Rewrite the fixture folder; return the case ids written."""
    oracle = assignment.table.get("oracle", ORACLE)
    written = []
    for store, cases in assignment.stores():
        store.write_all({case.id: (fixture_tensors(case), provenance(case, oracle)) for case in cases})
        written += [case.id for case in cases]
    return written
