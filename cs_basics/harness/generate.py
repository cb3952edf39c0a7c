"""Make every case's fixture from its seed and the float64 oracle, keeping the stored ones that still are.

torch's vectorized CPU kernels round differently under each CPU capability (`ATEN_CPU_CAPABILITY`:
default, avx2, avx512 on x86; others on ARM), so a fixture made on one machine is not bit for bit what
another makes. A stored fixture is therefore held to what its case makes *here*, up to that rounding:
its inputs to the inputs its seed makes, and its expected values to what the oracle makes of the
*stored* inputs (inputs one float32 ulp apart give expected values far more than a float64 ulp apart).
`regenerate` keeps a file that passes, byte for byte, so making the fixtures on another machine
changes nothing; the staff test of the committed fixtures asks the same question (`why_remake`).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch

from cs_basics.harness.cases import Case, CheckContext, Tensors
from cs_basics.harness.config import Assignment
from cs_basics.harness.diagnosis import STORED, agrees, staff_only
from cs_basics.harness.fixtures import FixtureError, FixtureStore, encode
from cs_basics.harness.problem import resolve

COMMAND = "uv run cs-basics fixtures"
# this assignment's oracle; another declares its own as `oracle = "..."` in [tool.cs-basics]
ORACLE = "float64, torch.softmax / torch.nn.functional.scaled_dot_product_attention on the CPU"

# How far a stored fixture may be from what its case makes here, in ulps of the tensor's largest
# magnitude (see `ulps`). Measured with torch 2.15 under ATEN_CPU_CAPABILITY=default, avx2 and avx512
# on one AVX-512 machine, over every case of this assignment, its hidden cases and
# examples/multihead_attention: regenerated inputs differ by at most 8 float32 ulps (torch.randn's
# vectorized Box-Muller, r·cos θ with r up to 5.8, rounds differently), expected values computed from
# the same inputs by at most 4 float64 ulps (sums taken in another order; MKL's own code paths,
# MKL_CBWR=COMPATIBLE/SSE4_2/AVX2, by at most 2.5). The tolerances are 4x those, room for other
# CPUs and BLAS libraries; a real change of a case (seed, shape, scale, mask, oracle) is off by
# orders of magnitude more. 16 float64 ulps of the largest expected value here (16.5) is 6e-14,
# far inside the tightest grading tolerance (float64 atol 1e-12).
INPUT_ULPS = 32.0
EXPECTED_ULPS = 16.0
REMAKE = (
    f"fix: if the case changed on purpose, run `{COMMAND}` and commit what it rewrites; if not, the file "
    "was edited, or this CPU rounds further than INPUT_ULPS / EXPECTED_ULPS in cs_basics/harness/generate.py allow"
)


def fixture_tensors(case: Case) -> Tensors:
    inputs = case.make_inputs(case.seed)
    return prefixed("input.", inputs) | prefixed("expected.", oracle_of_copies(case, inputs))


def prefixed(prefix: str, tensors: Tensors) -> Tensors:
    return {f"{prefix}{k}": v for k, v in tensors.items()}


def oracle_of_copies(case: Case, inputs: Tensors) -> Tensors:
    """The oracle's expected values, and beside them the outputs of the case's staff-only mistakes."""
    expected = {k: v.detach() for k, v in case.oracle({k: v.clone() for k, v in inputs.items()}).items()}
    return expected | stored_mistakes(case, inputs, expected)


def stored_mistakes(case: Case, inputs: Tensors, expected: Tensors) -> Tensors:
    """The outputs of each staff-only mistake of the case (its code a "module:attribute" string: left out of the
    handout) on the case's inputs, as the diagnosis would compute them, for the students' run to read; none of a
    mistake that the case cannot show."""
    stored: Tensors = {}
    for mistake in case.mistakes:
        if not staff_only(mistake) or (mistake.dtypes and case.dtype not in mistake.dtypes):
            continue
        adapter = getattr(case.adapter_call, "adapter", None)  # the one adapter a declared case calls
        if adapter is not None and adapter not in mistake.adapters:
            continue  # a mistake of the problem's other adapter (SiLU's, on a SwiGLU case)
        name = mistake.stored_name
        if "." in name or any(k.startswith(f"{STORED}{name}.") for k in stored):
            raise ValueError(
                f"{case.id}: a staff-only mistake needs a name without dots, and a `variant` of its own where several "
                f"share it: {name!r}"
            )
        dtype = case.dtype if mistake.in_case_dtype else torch.float64
        args = case.prepare({k: v.clone() for k, v in inputs.items()}, torch.device("cpu"), dtype=dtype, layout=False)
        wrong = SimpleNamespace(**{name: resolve(code) for name, code in mistake.adapters.items()})
        outputs = case.call(wrong, args)
        if not shows_anywhere(case, outputs, expected):
            continue
        stored |= {
            f"{STORED}{name}.{k}": v.detach()
            for k, v in outputs.items()
            if isinstance(v, torch.Tensor) and not k.startswith("after.")
        }
    return stored


def shows_anywhere(case: Case, outputs: Tensors, expected: Tensors) -> bool:
    """Whether a mistake's outputs differ from the expected ones beyond the case's tolerance (or in shape) anywhere:
    where none does, no failure of the case can name it (diagnosis.shows), and its outputs need not be stored."""
    if callable(case.tolerance):
        return True  # a tolerance the check works out on its device (half precision's): kept, to be safe
    ctx = CheckContext(case, {}, expected, {}, outputs, torch.device("cpu"))
    return any(
        value.shape != expected[name].shape or not agrees(value, expected[name], ctx.tolerance(name))
        for name, value in outputs.items()
        if name in expected and isinstance(value, torch.Tensor)
    )


def provenance(case: Case, oracle: str = ORACLE) -> dict[str, str]:
    return {
        "case": case.id,
        "problem": case.problem,
        "seed": str(case.seed),
        "command": COMMAND,
        "torch": torch.__version__,
        "oracle": oracle,
    }


def oracle_name(assignment: Assignment) -> str:
    return assignment.table.get("oracle", ORACLE)


def ulps(fresh: torch.Tensor, stored: torch.Tensor) -> float:
    """The largest difference between two tensors of one shape, in units in the last place (in the stored
    dtype) of their largest magnitude; bool and integer tensors are 0 or infinitely far apart.

    Not per element: the rounding that differs between CPUs is absolute, at the tensor's scale
    (Box-Muller's r·cos θ near θ = π/2, cancellation in sums and gradients). Measured per element,
    an input near 0 moves by up to 2e4 of its own float32 ulps and an expected value by 5e3 float64
    ulps; measured against the tensor's largest magnitude, by at most 8 and 4 (see INPUT_ULPS)."""
    if not stored.is_floating_point():
        return 0.0 if torch.equal(fresh, stored) else math.inf
    a, b = fresh.double(), stored.double()
    if not (torch.equal(a.isnan(), b.isnan()) and torch.equal(a.isinf(), b.isinf())):
        return math.inf
    if not torch.equal(a[a.isinf()], b[b.isinf()]):
        return math.inf
    a, b = a.nan_to_num(0.0, 0.0, 0.0), b.nan_to_num(0.0, 0.0, 0.0)
    scale = max(a.abs().max().item(), b.abs().max().item()) if a.numel() else 0.0
    info = torch.finfo(stored.dtype)
    ulp = max(math.ldexp(info.eps, math.frexp(scale)[1] - 1), info.smallest_normal * info.eps)  # scale in [2^e, 2^e+1)
    return (a - b).abs().max().item() / ulp if a.numel() else 0.0


@dataclass
class Agreement:
    """How a stored fixture compares with what its case makes now: the distance of each tensor
    (`gaps`, in ulps) and whatever is beyond the tolerances (`problems`, in words)."""

    gaps: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # the fixture's tensors with its stored inputs and expected values kept, where those still are what the case
    # makes (within rounding) and only the staff-only mistakes' outputs are not: a new mistake changes no answer
    answers_kept: Tensors | None = None

    def compare(self, kind: str, fresh: Tensors, stored: Tensors, tolerance: float, source: str) -> bool:
        """Record the gaps of `kind` ("input" or "expected"); False if the tensors are not even alike."""
        if fresh.keys() != stored.keys():
            self.problems.append(f"{kind} tensors stored {sorted(stored)}, made {sorted(fresh)}")
            return False
        alike = True
        for name in sorted(fresh):
            key, f, s = f"{kind}.{name}", fresh[name], stored[name]
            if f.shape != s.shape or f.dtype != s.dtype:
                self.problems.append(f"{key} stored {describe(s)}, made {describe(f)}")
                alike = False
                continue
            self.gaps[key] = gap = ulps(f, s)
            if not s.is_floating_point() and gap:
                self.problems.append(f"{key} differs from {source} in {int((f != s).sum())} of {s.numel()} elements")
            elif gap > tolerance:
                dtype = str(s.dtype).removeprefix("torch.")
                self.problems.append(
                    f"{key} is {gap:.3g} {dtype} ulps (of its largest magnitude) from {source}; "
                    f"rounding across CPUs is allowed {tolerance:g}"
                )
        return alike


def describe(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')} {tuple(t.shape)}"


def agreement(case: Case, inputs: Tensors, expected: Tensors, meta: dict[str, str], oracle: str = ORACLE) -> Agreement:
    """Compare a stored fixture (its inputs, expected values and provenance) with what `case` makes now."""
    found = Agreement()
    want = provenance(case, oracle)
    for key in sorted(want.keys() - {"torch"}):  # which torch made the stored values is a record, not a rule
        if meta.get(key) != want[key]:
            found.problems.append(f"its provenance says {key} {meta.get(key)!r}, the case says {want[key]!r}")
    if found.compare("input", case.make_inputs(case.seed), inputs, INPUT_ULPS, "the inputs its seed makes"):
        made = oracle_of_copies(case, inputs)  # the stored inputs: the ones the students' code gets
        (made_answers, made_mistakes), (answers, mistakes) = mistakes_apart(made), mistakes_apart(expected)
        source = "what the oracle makes of the stored inputs"
        if found.compare("expected", made_answers, answers, EXPECTED_ULPS, source) and not found.problems:
            found.answers_kept = prefixed("input.", inputs) | prefixed("expected.", answers | made_mistakes)
        found.compare("expected", made_mistakes, mistakes, EXPECTED_ULPS, "what its mistakes make of them")
    return found


def mistakes_apart(expected: Tensors) -> tuple[Tensors, Tensors]:
    """The expected values, and the staff-only mistakes' outputs stored beside them ("mistake.<name>.<output>")."""
    mistakes = {k: v for k, v in expected.items() if k.startswith(STORED)}
    return {k: v for k, v in expected.items() if k not in mistakes}, mistakes


def examine(store: FixtureStore, case: Case, oracle: str = ORACLE) -> Agreement:
    """How `case`'s stored fixture compares with what the case makes now; a missing file, or one the
    manifest does not vouch for, is a problem too (it is made again, never blessed)."""
    if not store.path(case.id).is_file():
        return Agreement(problems=["new"])
    try:
        inputs, expected = store.load(case.id)
    except FixtureError as err:
        return Agreement(problems=[str(err).partition("; ")[0]])
    return agreement(case, inputs, expected, store.metadata(case.id), oracle)


def why_remake(store: FixtureStore, case: Case, oracle: str = ORACLE) -> str | None:
    """Why `case`'s stored fixture must be made again; None when it is what the case makes, within rounding."""
    return "; ".join(examine(store, case, oracle).problems) or None


@dataclass
class Regenerated:
    """What `regenerate_store` did to one fixture folder."""

    root: Path
    kept: list[str] = field(default_factory=list)
    written: dict[str, str] = field(default_factory=dict)  # case id -> why
    removed: list[str] = field(default_factory=list)
    gaps: dict[str, dict[str, float]] = field(default_factory=dict)  # case id -> tensor -> ulps from the stored

    def worst(self, kind: str, case_ids: list[str] | None = None) -> tuple[float, str]:
        """The largest gap among the `kind` tensors ("input" or "expected") of `case_ids` (default: all), and where."""
        gaps = [
            (gap, f"{case_id} {key}")
            for case_id in (self.gaps if case_ids is None else case_ids)
            for key, gap in self.gaps[case_id].items()
            if key.startswith(f"{kind}.")
        ]
        return max(gaps, default=(0.0, ""))

    def report(self) -> str:
        size = sum(p.stat().st_size for p in self.root.glob("*.safetensors"))
        lines = [f"{self.root}: kept {len(self.kept)}, wrote {len(self.written)}, removed {len(self.removed)}"]
        lines[0] += f" ({size / 1024:.0f} KiB)"
        if self.kept:
            (inputs, _), (expected, _) = self.worst("input", self.kept), self.worst("expected", self.kept)
            lines.append(
                f"  kept, being what their cases make here within rounding (inputs within {inputs:.3g} ulps, "
                f"expected values within {expected:.3g}; allowed {INPUT_ULPS:g} and {EXPECTED_ULPS:g}):"
            )
            kept = ", ".join(self.kept)
            lines.append(
                textwrap.fill(kept, 110, initial_indent="    ", subsequent_indent="    ", break_on_hyphens=False)
            )
        lines += [f"  wrote {case_id}: {why}" for case_id, why in self.written.items()]
        lines += [f"  removed {name}: no case uses it" for name in self.removed]
        return "\n".join(lines)


def regenerate_store(store: FixtureStore, cases: list[Case], oracle: str = ORACLE) -> Regenerated:
    """Make `store` hold one fixture per case: the stored file where it passes `why_remake`, else a new one (with
    the stored inputs and expected values where only the staff-only mistakes' outputs changed)."""
    done = Regenerated(store.root)
    blobs = {}
    for case in cases:
        found = examine(store, case, oracle)
        done.gaps[case.id] = found.gaps
        if not found.problems:
            blobs[case.id] = store.path(case.id).read_bytes()
            done.kept.append(case.id)
        else:
            blobs[case.id] = encode(found.answers_kept or fixture_tensors(case), provenance(case, oracle))
            kept = "; its inputs and expected values kept as stored" if found.answers_kept else ""
            done.written[case.id] = "; ".join(found.problems) + kept
    done.removed = store.write_blobs(blobs)
    return done


def regenerate(assignment: Assignment) -> list[Regenerated]:
    """Bring every fixture folder of the assignment up to date with its cases."""
    return [regenerate_store(store, cases, oracle_name(assignment)) for store, cases in assignment.stores()]
