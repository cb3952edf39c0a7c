"""What the staff would otherwise check by hand about an assignment's cases (`cs-basics check-cases`), and what
its handout must not ship (`shipped_answers`, for the handout's check).

- The reference's share of each tolerance: the model solution (this checkout's code, through the adapters) on
  every case, its worst error over each output's tolerance (1 would be on the edge: a case that tight fails
  correct code that rounds differently).
- Every known mistake fails at least one case, and the failure message names it (`known mistake: NAME`) in at
  least one of the cases it fails: a mistake that fails nowhere has no case showing it; one never named is
  advice no student reads; one the diagnosis cannot run (it raises where a failure's diagnosis runs it) is said.
- The course's own adapters pass the one-line check the students' pytest and the grader apply.
- What students get computes no graded answer the rule would let a student copy: an oracle or a known mistake
  shipped in the handout must be, or name, a library function its problem forbids (`torch.nn.utils.clip_grad_norm_`
  as given, `lambda: torch.optim.Adam`), or run an operator it forbids; one that computes from scratch (a
  from-scratch RoPE, an exp-over-sum softmax) belongs with the staff (a "module:attribute" string into hidden/:
  its outputs are stored in the fixtures, see problem.py and diagnosis.py). Each one is reported, by where it is.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
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
from cs_basics.harness.diagnosis import mistake_outputs, split_stored, staff_only
from cs_basics.harness.oneline import thick_adapter
from cs_basics.harness.problem import Oracle, resolve
from cs_basics.harness.rule.record import forbids
from cs_basics.harness.rule.syntax import matches, references

NAMED = "(known mistake: {name})"
CPU = torch.device("cpu")


@dataclass
class Report:
    shares: dict[str, dict[str, float]] = field(default_factory=dict)  # case id -> output -> worst error / tolerance
    reference_fails: dict[str, str] = field(default_factory=dict)  # case id -> the first line of its failure
    failed: dict[str, list[str]] = field(default_factory=dict)  # mistake -> the cases it fails
    named: dict[str, list[str]] = field(default_factory=dict)  # mistake -> the cases whose message names it
    cannot_run: dict[str, str] = field(default_factory=dict)  # mistake -> why the diagnosis cannot run it anywhere
    thick: list[str] = field(default_factory=list)  # the course's adapters the one-line check refuses

    @property
    def problems(self) -> list[str]:
        found = [f"the reference fails {case_id}: {why}" for case_id, why in self.reference_fails.items()]
        found += [f"the course's own {verdict} (one_line_adapters: the grader's check)" for verdict in self.thick]
        for mistake, cases in self.failed.items():
            if not cases:
                found.append(f"the known mistake {mistake} fails no case: add a case that shows it")
            elif mistake in self.cannot_run:
                found.append(
                    f"the known mistake {mistake} cannot run where a failure's diagnosis runs it, so it is never "
                    f"named: {self.cannot_run[mistake]}"
                )
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
    room = atol + rtol * e.abs()
    shares = torch.where(error == 0, 0.0, error / room)  # an exact tolerance (room 0) has no share of it used
    return float(shares.max()) if error.numel() else 0.0


def reference_shares(assignment: Assignment, case: Case, adapters: Any, report: Report) -> None:
    inputs, expected = assignment.store_for(case).load(case.id)
    try:
        outputs = run_call(case, adapters, inputs, CPU)
        args = case.prepare(inputs, CPU)
        ctx = CheckContext(case, inputs, split_stored(expected)[0], args, outputs, CPU)
        report.shares[case.id] = {
            case.words(name): share(outputs[name], value, ctx.tolerance(name).atol, ctx.tolerance(name).rtol)
            for name, value in sorted(ctx.expected.items())
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
    if assignment.table.get("one_line_adapters"):
        package = assignment.student_package
        names = dict.fromkeys(name for problem in assignment.problems.values() for name in problem.adapters)
        report.thick = [v for v in (thick_adapter(adapters, name, package) for name in names) if v]
    for case in assignment.cases:
        reference_shares(assignment, case, adapters, report)
    runs: dict[str, list[str]] = {}  # mistake -> why it could not run, case by case (empty: it ran somewhere)
    for case in assignment.cases:
        for index, mistake in enumerate(case.mistakes):
            label = f"{case.problem}: {mistake.name}" + (f" #{index}" if variant(case.mistakes, index) else "")
            report.failed.setdefault(label, [])
            if (label not in runs or runs[label]) and diagnosed_here(case, mistake):
                why = cannot_run(case, mistake, assignment.store_for(case))
                runs[label] = [] if why is None else [*runs.get(label, []), why]
            if until_named and label in report.named:
                continue
            try:
                run_case(case, wrong_adapters(adapters, mistake), assignment.store_for(case), CPU)
            except Exception as err:  # AssertionError, or the mistake crashed: it fails the case either way
                report.failed[label].append(case.id)
                if NAMED.format(name=mistake.name) in "\n".join([str(err), *getattr(err, "__notes__", ())]):
                    report.named.setdefault(label, []).append(case.id)
    report.cannot_run = {label: whys[0] for label, whys in runs.items() if whys}
    return report


def diagnosed_here(case: Case, mistake: Any) -> bool:
    """Whether a failure of the case runs the mistake to name it: a mistake of the case's adapter and dtype whose
    code is no staff-only string (those ran where the fixtures were made, and their outputs are stored)."""
    adapter = getattr(case.adapter_call, "adapter", None)
    shown = not mistake.dtypes or case.dtype in mistake.dtypes
    return not staff_only(mistake) and shown and (adapter is None or adapter in mistake.adapters)


def cannot_run(case: Case, mistake: Any, store: Any) -> str | None:
    """Why the diagnosis cannot compute the mistake's outputs on the case, None when it can."""
    inputs, _ = store.load(case.id)
    try:
        mistake_outputs(case, mistake, inputs, grad=True)
    except Exception as err:
        return f"on case {case.id} it raised {type(err).__name__}: {str(err).partition(chr(10))[0]}"
    return None


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
    path = source_file(code)
    if path is None:  # a builtin (torch.softmax): a library's, not the course's
        return False
    root = assignment.root.resolve()
    if not path.is_relative_to(root):
        return False
    kept_out = [assignment.table.get("hidden", "hidden"), *assignment.handout_exclude]
    return not any(path.is_relative_to(root / name) for name in kept_out)


def source_file(code: Any) -> Path | None:
    try:
        return Path(inspect.getsourcefile(inspect.unwrap(code)) or "").resolve()
    except TypeError:
        return None


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
    """What the code is, and where: two answers of one name in two places are two labels."""
    where = ""
    with_lines = inspect.unwrap(code) if callable(code) else code
    path = source_file(with_lines) if callable(code) else None
    if path is not None:
        try:
            where = f", {path.name}:{inspect.getsourcelines(with_lines)[1]}"
        except (OSError, TypeError):
            where = f", {path.name}"
    return f"{what} ({getattr(code, '__module__', '?')}.{getattr(code, '__qualname__', repr(code))}{where})"


def forbidden_objects(patterns: Iterable[str]) -> list[Any]:
    """The library objects the problem's forbidden names stand for (`torch.nn.utils.clip_grad_norm_` is the function
    torch.nn.utils.clip_grad defines), where one imports; patterns with wildcards match names instead."""
    found = []
    for name in patterns:
        if any(c in name for c in "*?["):
            continue
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            try:
                value = importlib.import_module(".".join(parts[:end]))
            except Exception:  # not a module: an attribute of the one above
                continue
            try:
                for attribute in parts[end:]:
                    value = getattr(value, attribute)
            except AttributeError:
                break
            found.append(value)
            break
    return found


def forbidden_name(code: Any, problem: Any) -> str | None:
    """The forbidden library name the code is, or names, as the rule's scan would read it in a student's code; None
    when it is none. A library object (a reference given as `torch.nn.utils.clip_grad_norm_`) is judged by what it
    is; the course's own function or lambda by the names its source uses, resolved through its module's globals."""
    patterns = list(problem.forbidden)
    objects = forbidden_objects(patterns)

    def judged(value: Any, full: str) -> str | None:
        if any(value is o for o in objects) or any(inspect.unwrap(value) is o for o in objects if callable(value)):
            return full
        return full if matches(full, patterns) else None

    plain = inspect.unwrap(code) if callable(code) else code
    qualified = f"{getattr(plain, '__module__', '')}.{getattr(plain, '__qualname__', '')}"
    if judged(plain, qualified):
        return qualified
    try:
        tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(plain)))
    except (OSError, TypeError, SyntaxError):
        return None
    scope = {**getattr(plain, "__globals__", {}), **closure_values(plain)}
    for chain, _ in references(tree):
        if chain[0] not in scope:
            continue
        value, resolved = scope[chain[0]], []
        for attribute in chain[1:]:
            if not hasattr(value, attribute):
                break
            value = getattr(value, attribute)
            resolved.append(attribute)
        head = scope[chain[0]]
        prefix = head.__name__ if inspect.ismodule(head) else f"{getattr(head, '__module__', '')}.{chain[0]}"
        full = ".".join([prefix, *chain[1:]])
        if judged(value, full) or (resolved != chain[1:] and matches(full, patterns)):
            return full
    return None


def closure_values(function: Any) -> dict[str, Any]:
    names = getattr(getattr(function, "__code__", None), "co_freevars", ())
    cells = getattr(function, "__closure__", None) or ()
    values = {}
    for name, cell in zip(names, cells, strict=False):
        with contextlib.suppress(ValueError):
            values[name] = cell.cell_contents
    return values


def shipped_answers(assignment: Assignment) -> list[str]:
    """One question of every oracle and known mistake the handout would carry, each reported: does it compute a
    graded answer that the rule would not refuse from a student? Code that is or names a library function its
    problem forbids (`forbidden`), or runs an operator it forbids (`forbidden_ops`), would be refused: it may stay.
    The rest could be copied as an answer. Empty when there is none."""
    found: dict[tuple[str, str], str] = {}
    cleared: set[tuple[str, str]] = set()  # is, names or ran what the problem forbids: the library's own answer
    problems = assignment.problems
    for case in assignment.cases:
        problem = problems[case.problem]
        for label, code, run in answers_of(case):
            key = (case.problem, label)
            if key in found or key in cleared or isinstance(code, str) or not shipped(code, assignment):
                continue  # a "module:attribute" string is staff-only code, read only where fixtures are made
            if forbidden_name(code, problem):
                cleared.add(key)
                continue
            watch = OperatorsRun(assignment.root)
            try:
                with watch:
                    run()
            except Exception:  # cannot run on this case: another case of the problem may tell
                continue
            # a library function the rule names outright, called from the course's code (what it calls in turn
            # reaches the dispatcher as its primitives); not the patterns that sweep private names, which torch's
            # own machinery calls
            names = {name for name in problem.forbidden if not any(c in name for c in "*?[")}
            if any(forbids(problem.forbidden_ops, op) for op in watch.seen) or watch.called & names:
                cleared.add(key)
            else:
                found[key] = (
                    f"{case.problem}: {label} ships in the handout and computes a graded answer that the rule would "
                    "not refuse from a student (it neither is nor names a library function the problem forbids, and "
                    "runs no operator it forbids): a student could copy it. Move it to the staff's hidden/ and name "
                    'it as "module:attribute" (its outputs are then stored in the fixtures)'
                )
    return list(found.values())
