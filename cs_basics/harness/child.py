"""A job's cases, run in the child the grading server (zygote.py) forked: the only place student code runs.

Loaded by path, never as part of `cs_basics` (the student's package has that name). By the time
`run_job` runs, the child is isolated and runs as the job's uid. It checks that this uid can read
the whole Python environment (else the staff must act, and no student code has run), imports the
submission, and for each case computes the outputs (and gradients) under the record of operators,
writes them to `out/<case>.safetensors` and reports progress as JSON lines on the progress pipe.
It decides nothing: the grader compares and scores.
"""

import contextlib
import importlib
import json
import os
import sys
import traceback
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

TRACEBACK_LIMIT = 4000  # characters of any text the child sends (a message, a traceback, a description)
LIST_LIMIT = 32  # items of any list it sends
LINE_LIMIT = 32 << 10  # bytes of one progress line: well under what the grader reads (Limits.progress_line_kb)


def cut(text: str, limit: int = TRACEBACK_LIMIT) -> str:
    """`text` with its middle cut out past `limit` characters (a student's message may be 300 MB)."""
    text = str.__str__(text)  # a plain copy of a str subclass, whose __len__ and slicing are the student's
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def bounded(value: object, limit: int) -> object:
    """An event with every string cut to `limit` characters and every list to LIST_LIMIT items."""
    if isinstance(value, str):
        return cut(value, limit)
    if isinstance(value, dict):
        return {str(k): bounded(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [bounded(v, limit) for v in value[:LIST_LIMIT]]
    return value


def error_text(err: BaseException, code: Path | None = None) -> tuple[str, str]:
    """("Type: message", traceback), each cut, calling the exception's __str__ once (one that never returns
    runs into the case's time limit) and never formatting the uncut message again. With the staged `code`,
    the traceback shows the student's frames first and folds the harness's."""
    try:
        message = f"{cut(str(type(err).__name__), 200)}: {cut(str(err))}"
    except Exception as failed:  # a __str__ that raises
        message = f"{type(err).__name__}: (its message could not be read: {type(failed).__name__})"
    try:
        from cs_basics.harness.diagnosis import folded_traceback

        where = folded_traceback(err, [__file__], code, message=message)
    except Exception:  # the harness not importable yet (an import error), or a frame it cannot read
        frames = "".join(traceback.format_tb(err.__traceback__, limit=-6))
        where = f"Traceback (most recent call last):\n{frames}{message}"
    return message, cut(where, TRACEBACK_LIMIT)


class Reporter:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, **event: object) -> None:
        """One JSON line, cut to LINE_LIMIT bytes: no event of one case can exhaust the pipe for the others."""
        for stream in (sys.stdout, sys.stderr):  # what the code printed reaches the grader before it may end us
            with contextlib.suppress(Exception):
                stream.flush()
        for limit in (TRACEBACK_LIMIT, 500, 64, 16):  # escapes may make a character 12 bytes long
            line = (json.dumps(bounded(event, limit)) + "\n").encode()
            if len(line) <= LINE_LIMIT:
                break
        else:  # fail closed: a case whose record could not be sent does not pass
            kind = "error" if event.get("event") in ("done", "error") else event.get("event")
            line = json.dumps({"event": kind, "case": event.get("case"), "message": "its report was too long"}) + "\n"
            line = line.encode()
        os.write(self.fd, line)

    def failed(self, case_id: str, err: BaseException, record: object, code: Path | None = None) -> None:
        """A case's error; if even that cannot be put into words (MemoryError), a fixed message instead."""
        try:
            message, where = error_text(err, code)
            self.send(event="error", case=case_id, message=message, traceback=where, record=record.to_json())
        except BaseException as failed:
            with contextlib.suppress(BaseException):
                message = f"{type(failed).__name__} (your code's error could not be reported)"
                self.send(event="error", case=case_id, message=message, traceback="", record=record.to_json())


def describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device.type})"
    if isinstance(value, tuple | list):
        more = f", ... {len(value) - LIST_LIMIT} more" if len(value) > LIST_LIMIT else ""
        return cut(f"{type(value).__name__}({', '.join(describe(v) for v in value[:LIST_LIMIT])}{more})")
    return cut(type(value).__name__, 200)


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


def unreachable(paths: list[str]) -> str | None:
    """The first folder on the way to an import path that this process may not enter or read."""
    for path in paths:
        for folder in [*reversed(Path(path).parents), Path(path)]:
            if not os.access(folder, os.X_OK) or (folder == Path(path) and not os.access(folder, os.R_OK)):
                mode = f"{folder.stat().st_mode & 0o777:o}" if os.access(folder.parent, os.X_OK) else "?"
                return (
                    f"the submission's process runs as uid {os.getuid()} and cannot enter {folder} (mode {mode}), "
                    f"on the way to the Python environment's {path}; it could not import what lies there. Grade "
                    "where namespaces are allowed (the grader then gives the process a view in which it can), or "
                    "make the folders on that path world-traversable (chmod o+x), or install Python elsewhere"
                )
    return None


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


def run_job(job: dict, progress: int, isolated: bool, import_paths: list[str]) -> None:
    """Run the job's cases; `import_paths` are the folders on sys.path (as the server saw them)."""
    report = Reporter(progress)
    job_dir = Path(job["dir"])
    code = job_dir / "code"
    problem = unreachable(import_paths)
    if problem:
        report.send(event="staff_error", message=problem)
        return
    sys.path[:] = trusted_path(code, job["repo"])
    os.chdir(job_dir / "work")
    os.environ["HOME"] = str(job_dir / "work")
    from cs_basics.harness import record

    record.install()  # before the submission's code runs: threads it starts are recorded too
    rule = job["rule"]
    frames = record.StudentFrames(code, record.student_predicate(rule["student_code"], rule["excluded"]))
    try:
        adapters = importlib.import_module(job["adapters"])
        check_origin(job["student_packages"], code)
        cases = {c.id: c for module in job["case_modules"] for c in importlib.import_module(module).CASES}
        from cs_basics.harness.cases import run_call
    except BaseException as err:  # a stub, a SyntaxError, an ImportError, SystemExit at import
        report.send(event="import_error", message=error_text(err, code)[1])
        return
    device = torch.device(job["device"])
    torch.zeros(1, device=device)  # the device's start-up (CUDA's takes seconds) counts before the first case
    report.send(event="ready", isolated=isolated)
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
            report.failed(case_id, err, watch.record, code)  # the student's frames first
            continue
        report.send(event="done", case=case_id, record=watch.record.to_json())
    report.send(event="finished")
