"""An assignment's declaration: the `[tool.cs-basics]` table of its pyproject.toml.

[tool.cs-basics]
fixtures = "fixtures"          # folder of stored tensors, relative to the project root
cases = "tests.cases"          # module (importable from the root) defining CASES
adapters = "tests.adapters"    # module that plugs the student's code in

[tool.cs-basics.problems.softmax]
points = 1
"""

from __future__ import annotations

import importlib
import sys
import tomllib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import ModuleType

from cs_basics.harness.cases import Case, points_by_case
from cs_basics.harness.fixtures import FixtureStore


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class Problem:
    name: str
    points: float


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
    def problems(self) -> dict[str, Problem]:
        problems = self.table.get("problems") or {}
        if not problems:
            raise ConfigError(f"{self.root / 'pyproject.toml'}: [tool.cs-basics.problems] declares no problem")
        return {name: Problem(name, float(spec["points"])) for name, spec in problems.items()}

    @cached_property
    def store(self) -> FixtureStore:
        return FixtureStore(self.root / self.table.get("fixtures", "fixtures"))

    def _import(self, key: str, default: str) -> ModuleType:
        if str(self.root) not in sys.path:
            sys.path.insert(0, str(self.root))
        return importlib.import_module(self.table.get(key, default))

    @cached_property
    def cases(self) -> list[Case]:
        cases = list(self._import("cases", "tests.cases").CASES)
        ids = [c.id for c in cases]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ConfigError(f"case ids must be unique, repeated: {dupes}")
        return cases

    def adapters(self) -> ModuleType:
        return self._import("adapters", "tests.adapters")

    @cached_property
    def points(self) -> dict[str, float]:
        return points_by_case(self.cases, {p.name: p.points for p in self.problems.values()})
