"""How the suite runs: the whole of it in parallel, a piece of it in one process.

`uv run pytest` (the README's command; CI's, through .ci/run) and `uv run pytest staff_tests` run on
pytest-xdist's workers: most of the suite waits on processes it starts (graders, sandboxes, uv, Slurm),
which overlap well even on two cores. A file, a test's id, `-k` or `-m` runs in one process as before:
a student's `uv run pytest -k test_softmax` does not pay for starting workers. `-n N` (or `-n 0`) on the
command line always wins.

Under xdist a module's expensive set-ups (a grading worker per sandbox, the crowded submission, the
adversarial set's batch, the Slurm cluster) are made once: every test that uses a module-scoped fixture
of its module runs on the same worker (an `xdist_group` per module; `--dist loadgroup`). The test that
watches the whole machine runs alone, first (staff_tests/machine.py).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from .machine import Machine

pytest_plugins = ["cs_basics.harness.pytest_plugin"]

# .ci/run compiles the suite's own environment's bytecode once (UV_COMPILE_BYTECODE=1). The environments the
# tests install stand for a student's, a staff member's or a platform's, which choose for themselves (the bundle's
# setup.sh and the cluster recipes pass --compile-bytecode): inherited, the variable made each of those installs
# compile all of torch again (8 of the suite's installs: 612 CPU-s with it, 372 without) and every `uv run` check
# the environment's 8,600 files
os.environ.pop("UV_COMPILE_BYTECODE", None)
# nor do they forbid Python to write its bytecode, as some images and this project's machines do: with
# PYTHONDONTWRITEBYTECODE inherited, every process in an environment a test installed compiled torch again (about
# 0.9 CPU-s each: test_downstream_example took 43 CPU-s with it, 31 without). A student's, a staff member's and the
# platforms' machines write it, and so the tests' processes do (the grading server, `python -I`, always did)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# the options of the staff's own run (`PYTEST_ADDOPTS="-rfEs" uv run pytest`) are not a student's: a pytest the
# tests start in a student's folder reads that folder's settings only (a summary line per failure doubled the
# lines a test counts)
os.environ.pop("PYTEST_ADDOPTS", None)
# numpy's BLAS with one thread in the suite's processes, as the grader gives itself and its servers (sandbox/server.py,
# SINGLE_BLAS_THREAD): about 200 of them import torch, and with it numpy, whose OpenBLAS pool spins a thread a core
# for a while after its import (about 0.1 CPU-s a process here); nothing the tests compare runs in numpy's BLAS
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# twice the cores, at least 4: the graders, sandboxes and Slurm jobs the tests wait on do the work
WORKERS = max(4, 2 * (os.cpu_count() or 1))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    if runs_whole_folders(config):
        config.option.numprocesses = WORKERS
        config.option.dist = "loadgroup"  # our scheduler: pytest_xdist_make_scheduler


def runs_whole_folders(config: pytest.Config) -> bool:
    """The suite or whole folders of it, in a controller that chose no distribution itself."""
    option = config.option
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return False
    if option.numprocesses is not None or option.dist != "no" or option.collectonly or option.usepdb:
        return False
    if option.keyword or option.markexpr:
        return False
    return all(Path(arg).is_dir() for arg in config.args)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "alone: runs while no other test of this run does (it watches the machine)")
    config.addinivalue_line(
        "markers", "waits: spends most of its time waiting, not computing; started first, so others compute meanwhile"
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The workers submissions.run kept, closed as the test process ends (loaded only where a test graded)."""
    kept = sys.modules.get(f"{__package__}.submissions")
    if kept is not None:
        kept.close_shared_workers()


@pytest.fixture(scope="session")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Machine:
    """Under xdist each worker's temporary folder is in one the whole run shares."""
    shared = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else None
    return Machine(shared)


@pytest.fixture(autouse=True)
def machine_share(request: pytest.FixtureRequest, machine: Machine):
    with machine.alone() if request.node.get_closest_marker("alone") else machine.share():
        yield


# ---------------------------------------------------------------- the groups, from the workers to the scheduler
# xdist's own `--dist loadgroup` cannot name a group under pytest 9.2 (it rewrites an attribute pytest no longer
# reads), so the workers, which see the fixtures, write each test's group to a file, and our scheduler reads it.


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    config = node.config
    if not hasattr(config, "cs_basics_groups"):
        config.cs_basics_groups = Path(tempfile.mkdtemp(prefix="cs-basics-suite-")) / "groups.json"
    node.workerinput["cs_basics_groups"] = str(config.cs_basics_groups)


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "cs_basics_groups"):
        shutil.rmtree(config.cs_basics_groups.parent, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.option.dist not in ("load", "loadgroup"):
        return None  # a distribution chosen on the command line
    from xdist.scheduler import LoadScopeScheduling

    class SharedSetUps(LoadScopeScheduling):
        """xdist's scheduler by scope, the scope being the test's group (its own id where it has none), in the
        order the workers collected: a group's tests go to one worker, one after the other."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # the workers wrote it before they reported their collection
                self.groups = json.loads(config.cs_basics_groups.read_text())
            return self.groups.get(nodeid, nodeid)

    config.option.loadscopereorder = False
    return SharedSetUps(config, log)


def group_of(item: pytest.Item) -> str | None:
    """An explicit `xdist_group`, else the module's name where the test uses a module-scoped fixture of its module,
    with that fixture's parameter where it has one: a grading worker per sandbox is a set-up of its own, so the
    bubblewrap tests and the fallback tests of a module run on two workers at once, not one after the other."""
    marked = item.get_closest_marker("xdist_group")
    if marked is not None:
        return str(marked.args[0])
    fixtures = module_fixtures(item)
    if not fixtures:
        return None
    chosen = getattr(item, "callspec", None)
    params = [f"{name}={chosen.params[name]}" for name in sorted(fixtures) if chosen and name in chosen.params]
    return "[".join([item.module.__name__, *params]) + "]" * len(params)


def module_fixtures(item: pytest.Item) -> list[str]:
    """The module-scoped fixtures of the item's own module that the item uses."""
    defined = getattr(item, "_fixtureinfo", None)
    if defined is None:
        return []
    here = item.nodeid.split("::")[0]
    return [
        name
        for name, defs in defined.name2fixturedefs.items()
        if defs and defs[-1].scope == "module" and defs[-1].baseid == here
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = getattr(config, "workerinput", {}).get("cs_basics_groups")
    if path is None:
        return
    groups = {item.nodeid: group for item in items if (group := group_of(item)) is not None}
    sizes = collections.Counter(groups.values())
    # the test that runs alone first (the other workers are still starting), then those that mostly wait (run last,
    # two of them left the machine idle for the run's last 40 s), then the largest groups (their set-ups are the
    # longest), then the rest in the order collected
    items.sort(
        key=lambda item: (
            not item.get_closest_marker("alone"),
            not item.get_closest_marker("waits"),
            -sizes.get(groups.get(item.nodeid), 0),
        )
    )
    written = Path(f"{path}.{os.getpid()}")
    written.write_text(json.dumps(groups))
    written.replace(path)  # every worker writes the same; whole, never half
