"""Graded code may import and name only what the course allows (issue 40): a list of what is allowed, not of what
is held. Each route round 7's battery found off the old list is held here by the scan, naming it and its line;
the honest names students use pass; a course extends the list, or takes a name back out, in [tool.cs-basics].
"""

from __future__ import annotations

import pytest

from cs_basics.harness.rule.allowed import ALLOWED, Allowed
from cs_basics.harness.rule.fromscratch import FromScratch

from .test_from_scratch import ATTENTION, INLINE_WEIGHTS, SOFTMAX, SOFTMAX_FROM_SCRATCH, attention_with, source
from .test_rule_layers import held_in

HONEST_NAMES = [
    "torch.nn.functional.pad", "torch.Tensor.select", "torch.finfo", "torch.float32", "torch.nn.Module",
    "torch.nn.modules.module.Module", "torch.autograd.Function", "torch.utils.checkpoint.checkpoint",
    "torch.cuda.is_available", "torch.backends.mps.is_available", "numpy.vectorize", "numpy.tril",
    "numpy.random.default_rng", "einops.rearrange", "einops.layers.torch.Rearrange", "einx.dot", "jaxtyping.Float",
    "math.sqrt", "functools.partial", "itertools.product", "collections.abc.Callable", "dataclasses.dataclass",
    "typing.Optional", "__future__.annotations", "logging.getLogger", "warnings.warn", "os.environ.get",
    "os.path.join", "sys.stdout.write", "sys.path.insert", "concurrent.futures.ThreadPoolExecutor",
    "multiprocessing.dummy.Pool", "threading.Thread", "torch.nn.functional.math.sqrt",
]  # fmt: skip
# name -> what the reason must say: a module of its own the list lacks, a module reached as an attribute, a
# private name, a name taken back out
HELD_NAMES = {
    "_operator.attrgetter": "module _operator",
    "_pickle.loads": "module _pickle",
    "posix.system": "module posix",
    "pkgutil.resolve_name": "module pkgutil",
    "pydoc.locate": "module pydoc",
    "unittest.mock.patch": "module unittest.mock",
    "logging.config.dictConfig": "module logging.config",
    "string.Formatter": "module string",
    "torch.library.impl": "module torch.library",
    "numpy.ctypeslib.load_library": "module numpy.ctypeslib",
    "torch.utils.cpp_extension.load_inline": "module torch.utils",
    "torch.os.system": "module os",
    "torch.nn.functional.importlib": "module importlib",
    "multiprocessing.dummy.sys": "module sys",
    "os.path.os": "module os",
    "sys.modules": "module sys",
    "einx._src.backend": "private",
    "operator.attrgetter": "does not allow",
    "typing.get_type_hints": "does not allow",
    "torch.compile": "does not allow",
    "threading.settrace": "does not allow",
}


@pytest.mark.parametrize("name", HONEST_NAMES)
def test_the_names_honest_code_uses_are_allowed(name):
    assert Allowed().why_held(name) is None


@pytest.mark.parametrize("name", list(HELD_NAMES))
def test_every_other_name_is_held_saying_why(name):
    why = Allowed().why_held(name)
    assert why is not None and HELD_NAMES[name] in why, why


def test_import_of_a_module_whose_names_are_judged_one_by_one():
    allowed = Allowed()
    assert allowed.allows_import("os") and allowed.allows_import("sys") and allowed.allows_import("numpy")
    assert not allowed.allows_import("subprocess") and not allowed.allows_import("importlib")
    assert allowed.why_held("os") is not None  # `import os` is allowed; the module itself, as a value, is not


# each route of round 7's battery off the old list (staff_tests/students/r7_hostile_*), as a line of a softmax
ROUTES = {
    "c_twin": ("import _operator", "_operator.attrgetter('softmax')(torch)(x, dim)", "import _operator"),
    "resolver": ("import pkgutil", "pkgutil.resolve_name('torch:softmax')(x, dim)", "pkgutil.resolve_name"),
    "pydoc": ("import pydoc", "pydoc.locate('torch.softmax')(x, dim)", "pydoc.locate"),
    "mock": ("from unittest import mock", "mock.patch('torch.exp', torch.exp)", "from unittest import mock"),
    "format_field": ("", "'{0.__globals__}'.format(softmax)", "the format field '0.__globals__'"),
    "format_template": ("", "name = 'x'\n    name.format(softmax)", "name.format()"),
    "jaxtyping_code": ("import jaxtyping", "jaxtyping.Float[torch.Tensor, '__import__(\"os\")']", "the dimensions"),
    "string_annotation": ("", "y: '__import__(\"sys\").modules' = 1", "the annotation"),
    "star_import": ("from os import *", "", "from os import *"),
    "package_path": ("", "__path__ = []", "__path__"),
}


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_route_off_the_list_is_held_with_its_line(tmp_path, assignment, route):
    header, line, what = ROUTES[route]
    softmax = f"{header}\n\n\ndef softmax(x, dim):\n    {line}\n" + SOFTMAX_FROM_SCRATCH.split("\n", 2)[2]
    found = held_in(tmp_path, assignment, softmax + attention_with(INLINE_WEIGHTS))
    assert any(f.startswith(what) for f in found[SOFTMAX]), found[SOFTMAX]


def test_honest_format_and_annotations_are_not_held(tmp_path, assignment):
    softmax = (
        "from jaxtyping import Float\n\n\n"
        "def softmax(x: Float[torch.Tensor, '*batch d+1'], dim: 'int') -> 'torch.Tensor':\n"
        "    label = '{} {:.3f} {0.shape}'.format(x, 1.0)\n" + SOFTMAX_FROM_SCRATCH.split("\n", 2)[2]
    )
    found = held_in(tmp_path, assignment, softmax + attention_with(INLINE_WEIGHTS))
    assert found == {SOFTMAX: [], ATTENTION: []}, found


def test_a_module_that_is_not_installed_fails_its_import_and_is_not_held(tmp_path, assignment):
    """`import numpyy` (a typo, a library the grader lacks) fails as Python's import does, ModuleNotFoundError in the
    student's pytest run and in the grader: the student's bug, told as such, not a hold for the staff. A module of
    the student's imported by a bare name (`import helpers` after a sys.path set-up) is no missing one: its
    code is read, and what it names off the list still holds."""
    header = "import numpyy\nfrom numpyy.linalg import norm\nimport helpers\n\n\n"
    functional = header + SOFTMAX_FROM_SCRATCH + attention_with(INLINE_WEIGHTS)
    found = held_in(tmp_path, assignment, functional)
    assert found == {SOFTMAX: [], ATTENTION: []}, found
    found = held_in(tmp_path / "helpers", assignment, functional, helpers="import ctypes\n")
    assert all("import helpers" in f for f in (found[SOFTMAX], found[ATTENTION])), found


def test_a_course_extends_the_list_and_takes_names_back_out(tmp_path, assignment):
    from .test_from_scratch import student

    functional = source(
        "import string\n\n\ndef softmax(x, dim):\n    string.ascii_letters\n    return math.sqrt(x)\n",
        attention_with(INLINE_WEIGHTS),
    )
    folder = student(tmp_path, functional)
    held = FromScratch(assignment, folder).held
    assert [c.what for c in held[SOFTMAX]][:1] == ["import string"]
    course = type(assignment)(assignment.root, dict(assignment.table, allowed=["string", "!math.sqrt"]))
    found = [c.what for c in FromScratch(course, folder).held[SOFTMAX]]
    assert found == ["math.sqrt"], found


def test_the_default_list_is_the_documented_one():
    """docs/grading.md names the default's modules; each is on the list (the test fails when one goes)."""
    for module in ("torch", "numpy", "einops", "einx", "jaxtyping", "math", "typing", "dataclasses", "functools"):
        assert module in ALLOWED
    for module in ("itertools", "collections", "os.environ"):
        assert module in ALLOWED
