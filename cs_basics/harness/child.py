"""The child that runs a submission's code: the only process where student code executes.

Run by path (`python -I child.py JOB_DIR`), never imported, so nothing of the grader's
packages is loaded before it. It first imports torch and friends as whoever started it
(staff code only), then, when started as root, drops to an unprivileged uid for good, and
only then imports the submission. For each case it computes the outputs (and gradients)
and writes them to `out/<case>.safetensors`; it reports progress as JSON lines on the file
descriptor named in the job. It decides nothing: the grader compares and scores.
"""

import contextlib
import importlib
import json
import os
import sys
import traceback
from pathlib import Path

import torch
from safetensors.torch import load_file, save, save_file

TRACEBACK_LIMIT = 4000


def warm_up() -> None:
    """Load, while still privileged, what student code commonly imports and torch loads lazily:
    after the drop the interpreter's own files may be unreadable (a Python under /root)."""
    import collections  # noqa: F401
    import dataclasses  # noqa: F401
    import functools  # noqa: F401
    import itertools  # noqa: F401
    import math  # noqa: F401
    import typing  # noqa: F401

    import einops
    import jaxtyping  # noqa: F401
    import numpy  # noqa: F401
    from torch.utils._python_dispatch import TorchDispatchMode  # the record of operators loads torch._dynamo

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passthrough():
        x = torch.randn(2, 3, 4, requires_grad=True)
        y = einops.einsum(x, x, "b i d, b j d -> b i j").masked_fill(torch.eye(3, dtype=torch.bool), -1e9)
        (torch.exp(y - y.amax(-1, keepdim=True)) @ x).sum().backward()
    # safetensors loads parts of numpy on its first save: save to memory, never to a file (as root, a
    # save to os.devnull replaced /dev/null with a regular file: safetensors writes through a rename)
    save({"x": x.detach()})


def drop_privileges(uid: int | None) -> None:
    if uid is None or os.getuid() != 0:
        return
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        raise SystemExit("could not drop root")


class Reporter:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, **event: object) -> None:
        for stream in (sys.stdout, sys.stderr):  # what the code printed reaches the grader before it may end us
            with contextlib.suppress(Exception):
                stream.flush()
        os.write(self.fd, (json.dumps(event) + "\n").encode())


def describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device.type})"
    if isinstance(value, tuple | list):
        return f"{type(value).__name__}({', '.join(describe(v) for v in value)})"
    return type(value).__name__


def save_outputs(outputs: dict, path: Path) -> None:
    """Tensors go to CPU (their dtype and device are recorded); anything else as a description."""
    tensors, meta = {}, {}
    for key, value in outputs.items():
        if isinstance(value, torch.Tensor) and not value.is_meta:
            tensors[key] = value.detach().to("cpu", copy=True).contiguous()
            meta[key] = {"kind": "tensor", "device": str(value.device)}
        else:
            sequence = type(value).__name__ if isinstance(value, tuple | list) else ""
            meta[key] = {"kind": "other", "describe": describe(value), "sequence": sequence}
    save_file(tensors, str(path), metadata={"outputs": json.dumps(meta)})


def trusted_path(code: Path, repo: str) -> list[str]:
    """The staged code first; nothing of the staff repository (an editable install puts it on the path)."""
    keep = [p for p in sys.path if (p and not (p == repo or p.startswith(repo + os.sep))) or "site-packages" in p]
    return [str(code), *keep]


def check_origin(packages: list[str], code: Path) -> None:
    """The student's packages must come from the submission, not from an installed copy."""
    for name in packages:
        module = sys.modules.get(name) or importlib.import_module(name)
        where = list(getattr(module, "__path__", [])) or [getattr(module, "__file__", "") or ""]
        if not all(Path(p).resolve().is_relative_to(code.resolve()) for p in where):
            raise ImportError(f"the submission has no {name!r} package of its own (found {where})")


def main(job_dir: Path) -> None:
    job = json.loads((job_dir / "job.json").read_text())
    report = Reporter(job["fd"])
    warm_up()
    drop_privileges(job.get("uid"))
    code = Path(job["code"])
    sys.path[:] = trusted_path(code, job["repo"])
    os.chdir(job["workdir"])
    from cs_basics.harness import record

    record.install()  # before the submission's code runs: threads it starts are recorded too
    rule = job["rule"]
    frames = record.StudentFrames(code, record.student_predicate(rule["student_code"], rule["excluded"]))
    try:
        adapters = importlib.import_module(job["adapters"])
        check_origin(job["student_packages"], code)
        cases = {c.id: c for module in job["case_modules"] for c in importlib.import_module(module).CASES}
        from cs_basics.harness.cases import run_call
    except BaseException:  # a stub, a SyntaxError, an ImportError, SystemExit at import
        report.send(event="import_error", message=traceback.format_exc(limit=-6)[-TRACEBACK_LIMIT:])
        return
    report.send(event="ready")
    device = torch.device(job["device"])
    for case_id in job["cases"]:
        report.send(event="start", case=case_id)
        case = cases[case_id]
        watch = record.Watch(rule["forbidden_ops"].get(case.problem, []), frames, enabled=rule.get("record", True))
        try:
            inputs = load_file(str(job_dir / "inputs" / f"{case_id}.safetensors"))
            with watch:
                outputs = run_call(case, adapters, inputs, device)
            save_outputs(outputs, job_dir / "out" / f"{case_id}.safetensors")
        except BaseException as err:  # KeyboardInterrupt and SystemExit too: the case failed, grading goes on
            where = traceback.format_exc(limit=-6)[-TRACEBACK_LIMIT:]
            message = f"{type(err).__name__}: {err}"
            report.send(event="error", case=case_id, message=message, traceback=where, record=watch.record.to_json())
            continue
        report.send(event="done", case=case_id, record=watch.record.to_json())
    report.send(event="finished")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    sys.stdout.flush()
    os._exit(0)  # skip interpreter shutdown: atexit hooks a submission registered run no code
