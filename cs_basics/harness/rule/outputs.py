"""What a graded call returns, made plain while the case's watch is open (issue 36).

The record watches the call; whatever runs after its watch has closed is not seen. A Tensor subclass
returned by the student's code (or a gradient a hook swapped for one) runs its own Python whenever
torch touches it (`__torch_function__`), so saving or comparing it later could run library code that
no record sees. Every output is therefore checked and copied inside the watch: plain tensors (and
`nn.Parameter`, whose Python is torch's) are copied, detached, to new plain tensors; a subclass is the
student's mistake, said plainly. Values that are no tensor are left as they are (the grader describes
them inside the watch too; the checks say they are no tensor).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

PLAIN = (torch.Tensor, torch.nn.Parameter)
DETACH = torch.Tensor.detach  # taken at import: a method a subclass overrides is never the one called
CLONE = torch.Tensor.clone


class SubclassReturned(TypeError):
    """A graded call gave a Tensor subclass where the course expects a plain torch.Tensor."""


def what(name: str) -> str:
    if name.startswith("grad."):
        return f"the gradient of {name.removeprefix('grad.')} (after your code's hooks)"
    if name.startswith("after."):
        return f"the argument {name.removeprefix('after.')} (after your function returned)"
    return "your function" if name == "out" else f"your function's output {name!r}"


def plain_outputs(outputs: Mapping[str, Any]) -> dict[str, Any]:
    """`outputs` with every tensor copied to a new plain one; raises SubclassReturned for a subclass."""
    plain = {}
    for name, value in outputs.items():
        if isinstance(value, torch.Tensor):
            kind = type(value)
            if kind not in PLAIN:
                subject = what(name)
                verb = "returned" if subject.startswith("your function") else "is"
                raise SubclassReturned(
                    f"{subject} {verb} a {kind.__name__} (a subclass of torch.Tensor); return a plain torch.Tensor"
                )
            value = CLONE(DETACH(value))
        plain[name] = value
    return plain
