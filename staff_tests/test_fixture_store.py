import json
import math
import re
import shutil
from dataclasses import replace

import pytest
import torch

from cs_basics.harness.cases import Case
from cs_basics.harness.compare import Tolerance
from cs_basics.harness.diagnosis import Mistake
from cs_basics.harness.fixtures import MANIFEST, FixtureError, FixtureStore
from cs_basics.harness.generate import (
    EXPECTED_ULPS,
    INPUT_ULPS,
    REMAKE,
    oracle_name,
    regenerate_store,
    ulps,
    why_remake,
)
from cs_basics.harness.problem import AdapterCall


@pytest.fixture
def store(tmp_path):
    store = FixtureStore(tmp_path / "fixtures")
    store.write_all(
        {
            "a-one": ({"input.x": torch.arange(3.0), "expected.out": torch.ones(3).double()}, {"seed": "1"}),
            "a-two": ({"input.x": torch.zeros(2), "expected.out": torch.zeros(2).double()}, {"seed": "2"}),
        }
    )
    return store


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_load_splits_inputs_and_expected_and_keeps_metadata(store):
    inputs, expected = store.load("a-one")
    assert torch.equal(inputs["x"], torch.arange(3.0)) and expected["out"].dtype == torch.float64
    assert store.metadata("a-one") == {"seed": "1"}
    assert store.problems(["a-one", "a-two"]) == []


def test_missing_fixture_names_file_and_fix(store):
    store.path("a-one").unlink()
    with pytest.raises(FixtureError, match=r"a-one.safetensors is missing; restore it .*uv run cs-basics fixtures"):
        FixtureStore(store.root).load("a-one")
    assert store.problems(["a-one", "a-two"]) == [
        f"fixture {store.path('a-one')} is missing",
        f"{MANIFEST} lists a-one.safetensors, which is not in {store.root}",
    ]


def test_altered_fixture_is_refused_and_left_as_it_was(store):
    path = store.path("a-two")
    path.write_bytes(path.read_bytes()[:-1] + b"!")
    before = snapshot(store.root)
    with pytest.raises(FixtureError, match="does not match its checksum"):
        FixtureStore(store.root).load("a-two")
    assert store.problems(["a-one", "a-two"]) == [f"fixture {path} does not match its checksum in {MANIFEST}"]
    assert snapshot(store.root) == before


def test_fixture_of_no_case_is_reported(store):
    assert store.problems(["a-one"]) == [f"fixture {store.path('a-two')} is used by no test case"]


def test_missing_manifest_is_reported(store):
    (store.root / MANIFEST).unlink()
    with pytest.raises(FixtureError, match=r"MANIFEST\.json is missing"):
        FixtureStore(store.root).load("a-one")


def test_write_all_removes_stale_files_and_rewrites_manifest(store):
    store.write_all({"a-one": ({"input.x": torch.ones(1)}, {})})
    assert sorted(p.name for p in store.root.iterdir()) == [MANIFEST, "a-one.safetensors"]
    assert list(json.loads((store.root / MANIFEST).read_text())["sha256"]) == ["a-one.safetensors"]


def test_writing_the_same_fixtures_twice_gives_the_same_bytes(store, tmp_path):
    inputs, expected = store.load("a-one")
    meta = {key: str(i) for i, key in enumerate("hgfedcba")}  # 8! orders: one in 40320 to pass by luck
    files = {"a-one": ({"input.x": inputs["x"], "expected.out": expected["out"]}, meta)}
    once, twice = FixtureStore(tmp_path / "once"), FixtureStore(tmp_path / "twice")
    once.write_all(files)
    twice.write_all(files)
    assert snapshot(once.root) == snapshot(twice.root)
    assert once.metadata("a-one") == meta


def test_each_fixture_is_read_once_per_store(store, monkeypatch):
    store.load("a-one")
    shutil.rmtree(store.root)
    assert torch.equal(store.load("a-one")[0]["x"], torch.arange(3.0))  # from the cache


def test_committed_fixtures_are_what_the_oracle_makes(assignment):
    """Every stored fixture is what its case makes on this CPU, within the rounding that differs between CPU
    capabilities (INPUT_ULPS, EXPECTED_ULPS): exactly the question `cs-basics fixtures` asks before it keeps a file."""
    oracle = oracle_name(assignment)
    problems = [
        f"{case.id}: {why}"
        for store, cases in assignment.stores()
        for case in cases
        if (why := why_remake(store, case, oracle)) is not None
    ]
    assert not problems, "\n".join(problems) + f"\n{REMAKE}"


def test_fixtures_stay_small(assignment):
    sizes = {p.name: p.stat().st_size for p in assignment.store.root.glob("*.safetensors")}
    assert max(sizes.values()) < 128 * 1024, sizes


# ---------------------------------------------------------------- held within rounding, kept byte for byte


def toy(seed: int = 7, grad: bool = False) -> Case:
    """A case like the graded ones: float32 inputs and a bool mask from its seed, a float64 oracle."""

    def make(seed: int) -> dict[str, torch.Tensor]:
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(seed)) * 3
        return {"x": x, "mask": x > 0} | ({"grad_out": torch.ones(4, 16)} if grad else {})

    def oracle(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"out": torch.softmax(inputs["x"].double().masked_fill(~inputs["mask"], -1e9), dim=-1)}

    unused = lambda *args: None  # noqa: E731  (the store never calls the student's side)
    return Case("toy", "test_toy", "one", seed, make, oracle, unused, unused, unused)


def ulp_of_largest(t: torch.Tensor) -> float:
    return torch.finfo(t.dtype).eps * 2 ** math.floor(math.log2(t.abs().max().item()))


def nudged(store: FixtureStore, case: Case, key: str, ulps_: float) -> None:
    """Move the stored tensor `key` by `ulps_` ulps of its largest magnitude (at its largest element), as
    another CPU's rounding would, keeping the manifest true to the file."""
    inputs, expected = store.load(case.id)
    tensors = {f"input.{k}": v.clone() for k, v in inputs.items()} | {
        f"expected.{k}": v.clone() for k, v in expected.items()
    }
    t = tensors[key]
    t.view(-1)[t.abs().argmax()] += ulps_ * ulp_of_largest(t)
    store.write_all({case.id: (tensors, store.metadata(case.id))})


def test_ulps_are_units_of_the_largest_magnitude():
    x = torch.tensor([3.0, -1e-3, 0.0], dtype=torch.float64)
    assert ulps(x, x.clone()) == 0.0
    eps = torch.finfo(torch.float64).eps
    assert ulps(x + torch.tensor([0.0, 2 * 2 * eps, 0.0], dtype=torch.float64), x) == 2.0  # 2 ulps of 3.0, not of 1e-3
    assert ulps(x.float().nextafter(torch.tensor(9.0)), x.float()) == pytest.approx(1.0, abs=1e-3)
    mask = torch.tensor([True, False])
    assert ulps(mask, mask.clone()) == 0.0 and ulps(~mask, mask) == math.inf
    assert ulps(torch.tensor([math.nan, 1.0]), torch.tensor([0.0, 1.0])) == math.inf


def test_fixture_within_rounding_is_kept_byte_for_byte(tmp_path):
    store, case = FixtureStore(tmp_path), toy()
    assert regenerate_store(store, [case]).written == {case.id: "new"}
    nudged(store, case, "input.x", INPUT_ULPS / 2)
    nudged(store, case, "expected.out", EXPECTED_ULPS / 2)
    before = snapshot(tmp_path)
    done = regenerate_store(FixtureStore(tmp_path), [case])
    assert (done.kept, done.written, done.removed) == ([case.id], {}, [])
    assert snapshot(tmp_path) == before
    assert "kept 1" in done.report() and case.id in done.report()


@pytest.mark.parametrize(
    ("key", "off", "says"),
    [
        (
            "input.x",
            4 * INPUT_ULPS,
            r"input\.x is 128 float32 ulps \(of its largest magnitude\) from the inputs its seed",
        ),
        (
            "expected.out",
            4 * EXPECTED_ULPS,
            r"expected\.out is 64 float64 ulps .* from what the oracle makes of the stored",
        ),
    ],
)
def test_fixture_beyond_rounding_is_named_and_rewritten(tmp_path, key, off, says):
    store, case = FixtureStore(tmp_path), toy()
    regenerate_store(store, [case])
    made = snapshot(tmp_path)
    nudged(store, case, key, off)
    assert re.search(says, why_remake(FixtureStore(tmp_path), case))
    done = regenerate_store(FixtureStore(tmp_path), [case])
    assert re.search(says, done.written[case.id]) and f"wrote {case.id}: " in done.report()
    assert snapshot(tmp_path) == made  # made again from the seed and the oracle


def test_changed_case_gets_a_new_file_and_stale_files_go(tmp_path):
    store = FixtureStore(tmp_path)
    regenerate_store(store, [toy(), replace(toy(), param="old")])
    reseeded = regenerate_store(FixtureStore(tmp_path), [toy(seed=8)])
    assert re.search(
        r"provenance says seed '7', the case says '8'; input\.mask differs from the inputs its seed makes in \d+ of 64 "
        r"elements; input\.x is .* float32 ulps",
        reseeded.written["toy-one"],
    )
    assert reseeded.removed == ["toy-old.safetensors"]
    assert FixtureStore(tmp_path).metadata("toy-one")["seed"] == "8"
    regrown = regenerate_store(FixtureStore(tmp_path), [toy(seed=8, grad=True)])
    assert "input tensors stored ['mask', 'x'], made ['grad_out', 'mask', 'x']" in regrown.written["toy-one"]


def test_altered_file_is_made_again_not_blessed(tmp_path):
    store, case = FixtureStore(tmp_path), toy()
    regenerate_store(store, [case])
    made = snapshot(tmp_path)
    path = store.path(case.id)
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # the manifest no longer vouches for it
    done = regenerate_store(FixtureStore(tmp_path), [case])
    assert "does not match its checksum" in done.written[case.id]
    assert snapshot(tmp_path) == made


# ---------------------------------------------------------------- staff-only mistakes' outputs beside the answers


def doubled(x, mask):
    return 2 * torch.softmax(x.masked_fill(~mask, -1e9), dim=-1)


def barely_off(x, mask):  # within the float32 tolerance everywhere: no failure of the case can name it
    return torch.softmax(x.masked_fill(~mask, -1e9), dim=-1) * (1 + 1e-9)


def with_mistakes(case: Case, *names: str) -> Case:
    """The toy case with staff-only mistakes ("module:attribute", as hidden/answers.py's are named)."""
    return replace(
        case,
        adapter_call=AdapterCall("run_toy", ("x", "mask")),
        tolerance={torch.float32: (Tolerance(1e-6, 1e-5), Tolerance(1e-5, 1e-4))},
        mistakes=tuple(Mistake(name, "", {"run_toy": f"{__name__}:{name}"}) for name in names),
    )


def test_a_new_staff_only_mistake_keeps_the_stored_inputs_and_expected_values(tmp_path):
    """A mistake moved to the staff's side adds its outputs to the fixture and changes no answer, even where the
    stored ones were made on another CPU; a mistake the case cannot show stores nothing."""
    store, case = FixtureStore(tmp_path), toy()
    regenerate_store(store, [case])
    nudged(store, case, "expected.out", EXPECTED_ULPS / 2)  # as another CPU rounds
    inputs, expected = FixtureStore(tmp_path).load(case.id)
    done = regenerate_store(FixtureStore(tmp_path), [with_mistakes(case, "doubled", "barely_off")])
    assert done.written[case.id].endswith("its inputs and expected values kept as stored"), done.written
    again_inputs, again = FixtureStore(tmp_path).load(case.id)
    assert sorted(again) == ["mistake.doubled.out", "out"]
    assert torch.equal(again["out"], expected["out"])
    assert all(torch.equal(again_inputs[k], v) for k, v in inputs.items())
    assert torch.allclose(again["mistake.doubled.out"], 2 * expected["out"])
