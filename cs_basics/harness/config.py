"""An assignment's declaration: the `[tool.cs-basics]` table of its pyproject.toml.

[tool.cs-basics]
fixtures = "fixtures"                   # folder of stored tensors, relative to the project root
cases = "tests.cases"                   # module (importable from the root) defining CASES
adapters = "tests.adapters"             # module that plugs the student's code in
hidden = "hidden"                       # staff only: hidden/cases.py (CASES) and hidden/fixtures/
hidden_visibility = "after_published"   # when students see hidden cases' entries (Gradescope's values:
                                        # after_published, after_due_date or hidden)
hidden_summary = "each"                 # where a platform shows every test (PrairieLearn, JUnit): each hidden
                                        # case's name, points and pass/fail, or "one_line" for all of them
student_code = ["cs_basics"]            # what grading takes from a submission
staff_code = ["mypkg/grading_aids.py"] # ...except these, always taken from this repository (cs_basics's
                                       # own harness, study and cli.py always are: see rule/tooling.py)
handout_exclude = ["staff_tests"]       # left out of the student handout (besides `hidden`)
case_seconds = 20                       # each case's time limit in the grader (else `--case-seconds`, 20 s)
warm = ["torch._dynamo"]                # imported by the grading server before any job (an optimizer's first
                                        # step imports it: 20 s); problems' kinds add what they need
one_line_adapters = true                # each adapter only calls the student's function: pytest fails a case
                                        # whose adapter holds more, as the grader (the course's adapters) would
forbidden = ["torch.nn.functional.scaled_dot_product_attention"]  # every problem's, before its own
forbidden_ops = ["aten._scaled_dot_product_*"]
library_glue = ["torch.nn.modules.normalization.*"]  # library functions that may run operators for graded
                                        # code, beside the harness's glue (rule/glue.py); any other holds it
allowed = ["scipy.special"]             # modules and names graded code may import and use, beside the
                                        # harness's list (rule/allowed.py); any other holds the problem

[tool.cs-basics.problems.softmax]
points = 1
adapter = "run_softmax"                 # the adapter that calls the problem's function (default run_<name>)
forbidden = ["torch.softmax", "torch.Tensor.softmax"]   # library names the problem's code may not use
forbidden_ops = ["aten._softmax"]      # ATen operators (fnmatch patterns) its graded cases may not run
case_seconds = 60                       # its cases' time limit in the grader, instead of the course's
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

from cs_basics.harness.cases import Case, points_by_case
from cs_basics.harness.fixtures import FixtureStore

HIDDEN_VISIBILITIES = ("after_published", "after_due_date", "hidden")  # Gradescope's, for hidden cases' entries


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class GradedProblem:
    """A problem as grading sees it: its points and rule, from its [tool.cs-basics.problems.NAME] table or
    from its declaration in the cases module (problem.Problem), and the adapters its cases call."""

    name: str
    points: float
    forbidden: tuple[str, ...] = ()  # library names (fnmatch patterns) the code the problem reaches may not use
    forbidden_ops: tuple[str, ...] = ()  # ATen operators (fnmatch patterns) its graded cases may not run
    adapter: str = ""  # the adapter function that calls the problem's code (the first, where it has several)
    adapters: tuple[str, ...] = ()  # every adapter its cases call, `adapter` first
    case_seconds: float | None = None  # each of its cases' time limit in the grader (None: the course's)

    @classmethod
    def from_table(cls, name: str, table: dict, course: dict | None = None, declared: Any = None) -> GradedProblem:
        """The problem's own table, or its declaration (`declared`, a problem.Problem); the course-wide
        `forbidden` and `forbidden_ops` (in `course`, the [tool.cs-basics] table) hold for every problem,
        before the problem's own."""
        course = course or {}
        if declared is not None:
            both = [
                k
                for k in ("points", "forbidden", "forbidden_ops", "adapter", "case_seconds")
                if k in table and getattr(declared, "adapters" if k == "adapter" else k, None)
            ]
            if both or (declared.points is None and "points" not in table):
                where = f"[tool.cs-basics.problems.{name}] and its declaration in the cases module"
                raise ConfigError(f"{where}: give {', '.join(both) or 'points'} in one of them (exactly one)")
            table = {
                "points": table.get("points", declared.points),
                "forbidden": [*table.get("forbidden", ()), *declared.forbidden],
                "forbidden_ops": [*table.get("forbidden_ops", ()), *declared.forbidden_ops],
                "adapters": declared.adapters,
                "case_seconds": table.get("case_seconds", declared.case_seconds),
            }
        adapters = tuple(table.get("adapters", ())) or (table.get("adapter", f"run_{name}"),)
        own = table.get("case_seconds")
        seconds, where = (
            (own, f"[tool.cs-basics.problems.{name}]")
            if own is not None
            else (course.get("case_seconds"), "[tool.cs-basics]")
        )
        return cls(
            name,
            float(table["points"]),
            (*course.get("forbidden", ()), *table.get("forbidden", ())),
            (*course.get("forbidden_ops", ()), *table.get("forbidden_ops", ())),
            adapters[0],
            adapters,
            None if seconds is None else positive_seconds(seconds, f"{where} case_seconds"),
        )


def positive_seconds(value: Any, where: str) -> float:
    """A time limit from the course's declaration: a positive number of seconds, else ConfigError naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 86400:
        raise ConfigError(f"{where} = {value!r}: give a time limit in seconds (a number above 0)")
    return float(value)


@dataclass(frozen=True)
class Assignment:
    root: Path
    table: dict

    @classmethod
    def find(cls, start: Path | None = None) -> Assignment:
        """The nearest pyproject.toml at or above `start` that has a [tool.cs-basics] table."""
        start = Path(start or Path.cwd()).resolve()
        for folder in (start, *start.parents):
            pyproject = folder / "pyproject.toml"
            if pyproject.is_file():
                table = tomllib.loads(pyproject.read_text()).get("tool", {}).get("cs-basics")
                if table is not None:
                    return cls(folder, table)
        raise ConfigError(f"no pyproject.toml with a [tool.cs-basics] table at or above {start}")

    @cached_property
    def problems(self) -> dict[str, GradedProblem]:
        """Each problem's points and rule: its pyproject.toml table, its declaration among the cases, or both."""
        tables = self.table.get("problems") or {}
        declared = self.declarations
        if not tables and not declared:
            raise ConfigError(f"{self.root / 'pyproject.toml'}: [tool.cs-basics.problems] declares no problem")
        names = [*tables, *(n for n in declared if n not in tables)]
        return {n: GradedProblem.from_table(n, tables.get(n, {}), self.table, declared.get(n)) for n in names}

    @cached_property
    def declarations(self) -> dict[str, Any]:
        """The problem.Problem declarations behind the cases, by name."""
        return {c.declaration.name: c.declaration for c in self.cases if c.declaration is not None}

    @cached_property
    def store(self) -> FixtureStore:
        return FixtureStore(self.root / self.table.get("fixtures", "fixtures"))

    @property
    def hidden_dir(self) -> Path | None:
        """The staff-only folder of hidden cases, if this copy has one (a handout does not)."""
        name = self.table.get("hidden")
        return self.root / name if name and (self.root / name).is_dir() else None

    @property
    def hidden_visibility(self) -> str:
        """Gradescope's `visibility` of hidden cases' entries: everything a hidden case printed, raised or
        computed goes there, and only there."""
        return self.choice("hidden_visibility", HIDDEN_VISIBILITIES)

    def choice(self, name: str, choices: Sequence[str]) -> str:
        """The setting `name` of [tool.cs-basics], one of `choices` (the first by default); ConfigError names it."""
        value = self.table.get(name, choices[0])
        if value not in choices:
            raise ConfigError(
                f"{self.root / 'pyproject.toml'}: [tool.cs-basics] {name} = {value!r}; "
                f"choose one of {', '.join(choices)}"
            )
        return value

    @cached_property
    def hidden_store(self) -> FixtureStore | None:
        return FixtureStore(self.hidden_dir / "fixtures") if self.hidden_dir else None

    def store_for(self, case: Case) -> FixtureStore:
        if case.hidden:
            if self.hidden_store is None:
                raise ConfigError(f"case {case.id} is hidden, but {self.root} has no hidden folder")
            return self.hidden_store
        return self.store

    def stores(self) -> list[tuple[FixtureStore, list[Case]]]:
        """Each fixture store with the cases that own its files."""
        found = [(self.store, [c for c in self.cases if not c.hidden])]
        if self.hidden_store is not None:
            found.append((self.hidden_store, [c for c in self.cases if c.hidden]))
        return found

    def fixture_problems(self) -> list[str]:
        return [p for store, cases in self.stores() for p in store.problems(c.id for c in cases)]

    def _import(self, module: str) -> ModuleType:
        """The assignment's own `module` (its cases, adapters): every assignment names them alike (`tests.cases`),
        so where another assignment's module of that name is loaded in this process (a staff script or test that
        reads two), this one's is imported beside it, and the other's left in place."""
        if str(self.root) not in sys.path:
            sys.path.insert(0, str(self.root))
        try:
            found = importlib.import_module(module)
        except ImportError:  # it imports another module of the same name, already loaded from another root
            found = None
        if found is not None and self._holds(found):
            return found
        # every package the assignment holds (its hidden cases import its tests.cases, say), not only `module`'s
        ours = {module.partition(".")[0]} | {
            p.stem if p.suffix == ".py" else p.name
            for p in self.root.iterdir()
            if p.suffix == ".py" or (p / "__init__.py").is_file()
        }

        def loaded() -> list[str]:
            return [name for name in sys.modules if name.partition(".")[0] in ours]

        # only another root's modules step aside (this one's, the harness in this repository say, stay as they are)
        others = {name: sys.modules[name] for name in loaded() if not self._holds(sys.modules[name])}
        for name in others:
            del sys.modules[name]
        kept = set(sys.modules)
        sys.path.insert(0, str(self.root))
        try:
            return importlib.import_module(module)
        finally:
            sys.path.remove(str(self.root))
            for name in loaded():
                if name not in kept:
                    del sys.modules[name]
            sys.modules.update(others)

    def _holds(self, module: ModuleType) -> bool:
        where = getattr(module, "__file__", None)
        return where is not None and Path(where).resolve().is_relative_to(self.root.resolve())

    @cached_property
    def cases(self) -> list[Case]:
        cases = list(self._import(self.table.get("cases", "tests.cases")).CASES)
        if self.hidden_dir is not None:
            hidden = self._import(f"{self.hidden_dir.name}.cases").CASES
            cases += [dataclasses.replace(c, hidden=True) for c in hidden]
        ids = [c.id for c in cases]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ConfigError(f"case ids must be unique, repeated: {dupes}")
        return cases

    @property
    def warm(self) -> list[str]:
        """Modules whose first import the grading server pays before it forks a job (`warm` in [tool.cs-basics],
        and what its problems' kinds need: an optimizer's step imports torch._dynamo), never a student's case."""
        kinds = [m for p in self.declarations.values() if p.kind is not None for m in p.kind.warm]
        return list(dict.fromkeys([*self.table.get("warm", []), *kinds]))

    def case_seconds(self, case: Case) -> float | None:
        """The case's time limit in the grader: its problem's, else the course's; None: the grader's default."""
        problem = self.problems.get(case.problem)
        return problem.case_seconds if problem is not None else None

    @property
    def adapters_module(self) -> str:
        return self.table.get("adapters", "tests.adapters")

    def adapters(self) -> ModuleType:
        return self._import(self.adapters_module)

    @cached_property
    def points(self) -> dict[str, float]:
        return points_by_case(self.cases, {p.name: p.points for p in self.problems.values()})

    @property
    def student_code(self) -> list[str]:
        return list(self.table.get("student_code", ["cs_basics"]))

    @property
    def student_package(self) -> str:
        """The package (or module) the student writes, as messages name it: the first of `student_code`."""
        return Path(self.student_code[0]).parts[0].removesuffix(".py")

    @property
    def staff_code(self) -> list[str]:
        return list(self.table.get("staff_code", []))

    @property
    def library_glue(self) -> list[str]:
        """Library functions (fnmatch patterns over `module.qualified_name`) the course adds to the harness's
        glue (rule/glue.py): they may run operators for graded code without holding it."""
        return list(self.table.get("library_glue", []))

    @property
    def allowed(self) -> list[str]:
        """Modules and names the course allows graded code beside the harness's list (rule/allowed.py): fnmatch
        patterns over dotted names, `!` taking one back out."""
        return list(self.table.get("allowed", []))

    @property
    def handout_exclude(self) -> list[str]:
        return list(self.table.get("handout_exclude", []))
