"""The static half of the from-scratch rule: forbidden library names in the code a problem reaches.

The code is parsed, never imported. Imports are followed so that aliases resolve to full names
(`import torch.nn.functional as F` makes `F.softmax` read `torch.nn.functional.softmax`;
`from torch import softmax as s` makes `s` read `torch.softmax`; `getattr(torch, "softmax")`
reads `torch.softmax`). A use counts against a problem only where that problem's function can
reach it: starting from each of the problem's adapters, through the functions and classes they name in
the student's modules (a name-based call graph), and the module-level code of the modules it
reaches. A method called on something the scan cannot resolve (`self.softmax(x)`,
`scores.softmax(-1)`) is not a use: the run-time record (record.py) decides those. Patterns are
matched with fnmatch, so `torch.ops.*` forbids every operator reached through `torch.ops`.
Code that cannot run (after an unconditional `return`, under `if False:` or `if TYPE_CHECKING:`, ...) is
removed before anything is read (prune_dead_code): a name there costs nothing.

The parts, a module each: `syntax` (names, patterns, dead code, the bounds), `program` (the modules and the call
graph), `methods` (which objects and methods are the student's own), `constructs` (what is held for the staff),
`strings` (strings that run as code or names). This module runs them: `scan`, within bounds (`bounded_scan`).
"""

from __future__ import annotations

import json
import pickle
import sys
import threading
from pathlib import Path

from cs_basics.harness.cgroup import killed_first
from cs_basics.harness.portable import is_linux, unix_module
from cs_basics.harness.rule.allowed import ALLOWED, Allowed
from cs_basics.harness.rule.constructs import Construct, constructs
from cs_basics.harness.rule.program import Module, Program, entry_points
from cs_basics.harness.rule.syntax import RECURSION_LIMIT, STACK_BYTES, USES_KEPT, Unreadable, Use


def scan(job: dict) -> dict[str, tuple[list[Use], list[Construct]]]:
    """Each problem's forbidden names in the code its adapters reach, and the constructs that reach into the
    interpreter in all the code that runs for it (what the adapters module imports runs for every problem).
    `job`: "code" (the folder), "files" (the student's files under it), "adapters" (module name),
    "adapters_path" and "problems" (name -> [its adapter functions, forbidden patterns]): a problem may have
    several adapters (SiLU's and SwiGLU's), and the scan walks from each."""
    code = Path(job["code"])
    try:
        program = Program.parse(code, [Path(f) for f in job["files"]])
        program.allowed = Allowed(job.get("allowed", ALLOWED))
        program.packages = tuple(job.get("packages", ()))
    except (Unreadable, RecursionError, MemoryError):
        raise
    except Exception as err:  # a bug of the scan's on valid Python: every problem read by a person, not stopped
        return {name: ([], [unjudged(err)]) for name in job["problems"]}
    try:
        adapters = Module(job["adapters"], Path(job["adapters_path"]).name, Path(job["adapters_path"]).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return {}
    imported = list(adapters.aliases.values())
    found = {}
    for name, (functions, forbidden) in job["problems"].items():
        try:
            entries = [entry for function in functions for entry in entry_points(adapters, program, function)]
            uses = program.uses(program.reachable(entries), forbidden)[:USES_KEPT]
            runs = program.runs(entries, imported)
            held = [c for m, nodes in runs.items() for c in constructs(program.modules[m], program, nodes)]
        except (RecursionError, MemoryError):
            raise  # the code is too deep or too large to read: Unreadable, for every problem
        except Exception as err:  # valid Python this scan cannot describe: judged all the same, held for a reading
            uses, held = [], [unjudged(err)]
        found[name] = (uses, held[:USES_KEPT])
    return found


def unjudged(err: Exception) -> Construct:
    """The hold for code the scan failed to read (a bug of the scan's, never of the student's): a person reads it."""
    where = err.__traceback__
    while where is not None and where.tb_next is not None:
        where = where.tb_next
    line = where.tb_lineno if where is not None else 0
    file = Path(where.tb_frame.f_code.co_filename).name if where is not None else "scan.py"
    what = f"code this scan could not read ({type(err).__name__} at {file}:{line})"
    return Construct(what, "the staff read it instead", "", 0)


def bounded_scan(job: dict) -> dict:
    """scan(job) within the scan's bounds, in this process (fresh: main's Python, or a fork of the warm scan
    process, scanserver.py): its address space limited to job["memory"] before it reads a byte of the student's
    code, the recursion and the stack the visitors need, in a thread of its own. {"found": ...} or
    {"unreadable": why}; a bug raises."""
    resource = unix_module("resource")  # Windows has none: portable.scan_notes says the scan runs without it
    if resource is not None:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (job["memory"], job["memory"]))
        except (ValueError, OSError):  # macOS may refuse RLIMIT_AS; on Linux, the staff must hear of it
            if is_linux():
                raise
    killed_first()
    sys.setrecursionlimit(RECURSION_LIMIT)
    threading.stack_size(STACK_BYTES)
    result: dict = {}

    def work() -> None:
        try:
            result["found"] = scan(job)
        except Unreadable as err:
            result["unreadable"] = str(err)
        except RecursionError:
            result["unreadable"] = "it is nested too deeply to read"
        except MemoryError:
            result["unreadable"] = "it needs more memory to read than the grader gives"
        except BaseException as err:  # a bug, not a verdict: raised again in the caller's thread
            result["error"] = err

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result


def main() -> None:
    """The scan in a fresh Python of its own (scanprocess.start_scan starts it): the job as JSON on stdin, the
    result pickled on stdout, {"found": ...} or {"unreadable": why}."""
    sys.stdout.buffer.write(pickle.dumps(bounded_scan(json.load(sys.stdin))))
