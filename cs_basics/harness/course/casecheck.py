"""What the staff would otherwise check by hand about an assignment's cases (`cs-basics check-cases`), and what
its handout must not ship (`shipped_answers`, for the handout's check).

- The reference's share of each tolerance: the model solution (this checkout's code, through the adapters) on
  every case, its worst error over each output's tolerance (1 would be on the edge: a case that tight fails
  correct code that rounds differently).
- Every known mistake fails at least one case, and the failure message names it (`known mistake: NAME`) in at
  least one of the cases it fails: a mistake that fails nowhere has no case showing it; one never named is
  advice no student reads.
- What students get computes no graded answer: an oracle or a known mistake shipped in the handout must be no
  more than a call of a library function the rule forbids (it runs a forbidden operator); one that computes
  from scratch (a from-scratch RoPE, an exp-over-sum softmax) belongs with the staff (a "module:attribute"
  string into hidden/: its outputs are stored in the fixtures, see problem.py and diagnosis.py).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cs_basics.harness.cases import Case, CheckContext, run_call
from cs_basics.harness.config import Assignment
from cs_basics.harness.diagnosis import split_stored
from cs_basics.harness.problem import Oracle, resolve
from cs_basics.harness.rule.record import forbids

NAMED = "(known mistake: {name})"
CPU = torch.device("cpu")


@dataclass
class Report:
    shares: dict[str, dict[str, float]] = field(default_factory=dict)  # case id -> output -> worst error / tolerance
    reference_fails: dict[str, str] = field(default_factory=dict)  # case id -> the first line of its failure
    failed: dict[str, list[str]] = field(default_factory=dict)  # mistake -> the cases it fails
    named: dict[str, list[str]] = field(default_factory=dict)  # mistake -> the cases whose message names it

    @property
    def problems(self) -> list[str]:
        found = [f"the reference fails {case_id}: {why}" for case_id, why in self.reference_fails.items()]
        for mistake, cases in self.failed.items():
            if not cases:
                found.append(f"the known mistake {mistake} fails no case: add a case that shows it")
            elif not self.named.get(mistake):
                found.append(f"the known mistake {mistake} fails {len(cases)} cases but is named in none")
        return found

    def text(self) -> str:
        lines = ["the reference's worst error, as a share of each tolerance (1 = on the edge):"]
        for case_id, shares in self.shares.items():
            worst = ", ".join(f"{name} {share:.2g}" for name, share in shares.items())
            lines.append(f"  {case_id}: {worst}")
        lines.append("the known mistakes: the cases each fails, and where its message names it:")
        for mistake, cases in self.failed.items():
            named = self.named.get(mistake, [])
            lines.append(f"  {mistake}: fails {len(cases)}, named in {len(named)} ({', '.join(named[:4])}"
                         f"{', ...' if len(named) > 4 else ''})")  # fmt: skip
        lines += [f"PROBLEM: {p}" for p in self.problems] or ["every mistake fails a case and is named"]
        return "\n".join(lines)


def share(actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> float:
    a, e = actual.detach().to("cpu", torch.float64), expected.to(torch.float64)
    if a.shape != e.shape:
        return float("inf")
    both_nan = a.isnan() & e.isnan()
    error = (a - e).abs().masked_fill(both_nan | (a == e), 0.0)
    return float((error / (atol + rtol * e.abs())).max()) if error.numel() else 0.0


def reference_shares(assignment: Assignment, case: Case, adapters: Any, report: Report) -> None:
    inputs, expected = assignment.store_for(case).load(case.id)
    try:
        outputs = run_call(case, adapters, inputs, CPU)
        args = case.prepare(inputs, CPU)
        ctx = CheckContext(case, inputs, split_stored(expected)[0], args, outputs, CPU)
        report.shares[case.id] = {
            name: share(outputs[name], value, ctx.tolerance(name).atol, ctx.tolerance(name).rtol)
            for name, value in ctx.expected.items()
            if isinstance(outputs.get(name), torch.Tensor)
        }
        case.check(ctx)
    except Exception as err:  # the reference must pass; say how it does not
        report.reference_fails[case.id] = str(err).partition("\n")[0]


def wrong_adapters(adapters: Any, mistake: Any) -> SimpleNamespace:
    """The course's adapters with the mistake's wrong implementations in place of its own."""
    return SimpleNamespace(**(vars(adapters) | {n: resolve(code) for n, code in mistake.adapters.items()}))


def check_cases(assignment: Assignment, *, until_named: bool = False) -> Report:
    """Run the reference and every known mistake through every case of its problem, on the CPU; with
    `until_named`, a mistake only until a case's message names it (what the suite asks, in a third of the time)."""
    from cs_basics.harness.cases import run_case

    report = Report()
    adapters = assignment.adapters()
    for case in assignment.cases:
        reference_shares(assignment, case, adapters, report)
    for case in assignment.cases:
        for index, mistake in enumerate(case.mistakes):
            label = f"{case.problem}: {mistake.name}" + (f" #{index}" if variant(case.mistakes, index) else "")
            report.failed.setdefault(label, [])
            if until_named and label in report.named:
                continue
            try:
                run_case(case, wrong_adapters(adapters, mistake), assignment.store_for(case), CPU)
            except Exception as err:  # AssertionError, or the mistake crashed: it fails the case either way
                report.failed[label].append(case.id)
                if NAMED.format(name=mistake.name) in "\n".join([str(err), *getattr(err, "__notes__", ())]):
                    report.named.setdefault(label, []).append(case.id)
    return report


def variant(mistakes: Iterable[Any], index: int) -> bool:
    """Whether the mistake at `index` shares its name with another (an epsilon of 1e-6 or of 1e-8)."""
    mistakes = list(mistakes)
    return sum(m.name == mistakes[index].name for m in mistakes) > 1


# ---------------------------------------------------------------- what the handout ships


class OperatorsRun(TorchDispatchMode):
    """The ATen operators ("aten._softmax") that reach torch's dispatcher while it is on, and the functions the
    course's own code (files under `root`) calls ("torch.nn.functional.rms_norm": a library's RMSNorm reaches
    the dispatcher as its primitives; what the library calls in turn is the library's business)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = str(root.resolve())
        self.seen: set[str] = set()
        self.called: set[str] = set()

    def __enter__(self) -> OperatorsRun:
        entered = super().__enter__()
        torch.ones(1).add(1)  # the mode's first operator imports much of torch: not under the profile (~20 s)
        self.seen.clear()
        sys.setprofile(self.profile)
        return entered

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)
        super().__exit__(*exc)

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        """Python functions called from the course's code (C functions, torch.softmax, show as operators)."""
        caller = frame.f_back
        if event == "call" and caller is not None and self.courses(caller.f_code.co_filename):
            self.called.add(f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_qualname}")

    def courses(self, filename: str) -> bool:
        """A file of the course's own code: in its folder, neither an installed package nor the harness."""
        parts = Path(filename).parts
        harness = any(parts[i : i + 2] == ("cs_basics", "harness") for i in range(len(parts)))
        return filename.startswith(self.root) and not harness and "site-packages" not in parts

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        namespace, _, rest = func._schema.name.partition("::")
        self.seen.add(f"{namespace}.{rest}")
        return func(*args, **(kwargs or {}))


def shipped(code: Callable, assignment: Assignment) -> bool:
    """Whether the handout carries the code: its file is in the project, outside `hidden` and `handout_exclude`."""
    try:
        path = Path(inspect.getsourcefile(inspect.unwrap(code)) or "").resolve()
    except TypeError:  # a builtin (torch.softmax): a library's, not the course's
        return False
    root = assignment.root.resolve()
    if not path.is_relative_to(root):
        return False
    kept_out = [assignment.table.get("hidden", "hidden"), *assignment.handout_exclude]
    return not any(path.is_relative_to(root / name) for name in kept_out)


def answers_of(case: Case) -> list[tuple[str, Any, Callable[[], Any]]]:
    """What of the case computes an answer: (what it is, its code, a call of it on the case's inputs)."""
    inputs = case.make_inputs(case.seed)
    oracle = case.oracle
    code = oracle.reference if isinstance(oracle, Oracle) else oracle
    found = [(described(code, "the reference"), code, lambda: oracle(inputs))]
    for mistake in case.mistakes:
        for code in mistake.adapters.values():
            found.append(
                (described(code, f"the known mistake {mistake.name}"), code, mistake_run(case, mistake, inputs))
            )
    return found


def mistake_run(case: Case, mistake: Any, inputs: dict) -> Callable[[], Any]:
    def run() -> Any:
        args = case.prepare(inputs, CPU, dtype=torch.float64, layout=False)
        return case.call(SimpleNamespace(**mistake.adapters), args)

    return run


def described(code: Any, what: str) -> str:
    return f"{what} ({getattr(code, '__module__', '?')}.{getattr(code, '__qualname__', repr(code))})"


def shipped_answers(assignment: Assignment) -> list[str]:
    """The oracles and known mistakes the handout would carry that compute an answer without calling a function
    or running an operator the rule forbids their problem: each is code a student could copy. Empty when none."""
    found: dict[str, str] = {}
    cleared: set[str] = set()  # ran a forbidden operator on a case: a call of the library's own
    problems = assignment.problems
    for case in assignment.cases:
        problem = problems[case.problem]
        for label, code, run in answers_of(case):
            if label in found or label in cleared or isinstance(code, str) or not shipped(code, assignment):
                continue  # a "module:attribute" string is staff-only code, read only where fixtures are made
            watch = OperatorsRun(assignment.root)
            try:
                with watch:
                    run()
            except Exception:  # cannot run on this case: another case of the problem may tell
                continue
            # a library function the rule names outright (torch.nn.functional.rms_norm, which reaches the dispatcher
            # as its primitives); not the patterns that sweep private names, which torch's own machinery calls
            names = {name for name in problem.forbidden if not any(c in name for c in "*?[")}
            if any(forbids(problem.forbidden_ops, op) for op in watch.seen) or watch.called & names:
                cleared.add(label)
            else:
                found[label] = (
                    f"{case.problem}: {label} ships in the handout and computes its answer without an operator the "
                    "rule forbids (it is more than a call of a forbidden library function); move it to the staff's "
                    'hidden/ and name it as "module:attribute" (its outputs are then stored in the fixtures)'
                )
    return list(found.values())
