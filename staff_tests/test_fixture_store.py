import json
import shutil

import pytest
import torch

from cs_basics.harness.fixtures import MANIFEST, FixtureError, FixtureStore
from cs_basics.harness.generate import fixture_tensors


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
    """Regenerating every case reproduces the stored tensors exactly: no fixture was edited by hand."""
    for case in assignment.cases:
        stored_inputs, stored_expected = assignment.store_for(case).load(case.id)
        fresh = fixture_tensors(case)
        stored = {f"input.{k}": v for k, v in stored_inputs.items()} | {
            f"expected.{k}": v for k, v in stored_expected.items()
        }
        assert fresh.keys() == stored.keys(), case.id
        for key, tensor in fresh.items():
            assert torch.equal(tensor, stored[key]), f"{case.id}: {key} differs; run `uv run cs-basics fixtures`"
        assert assignment.store_for(case).metadata(case.id)["seed"] == str(case.seed)


def test_fixtures_stay_small(assignment):
    sizes = {p.name: p.stat().st_size for p in assignment.store.root.glob("*.safetensors")}
    assert max(sizes.values()) < 128 * 1024, sizes
