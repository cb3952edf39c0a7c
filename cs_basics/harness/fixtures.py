"""The fixture store: safetensors files of inputs and expected values, with a checksum manifest.

Each graded case owns one file, `<dir>/<case id>.safetensors`, holding tensors named
`input.<name>` and `expected.<name>` plus string metadata (seed, command, torch version).
`MANIFEST.json` beside them records each file's SHA-256, so a missing, altered or
unknown file is caught before its values are trusted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch
from safetensors.torch import load, save

MANIFEST = "MANIFEST.json"
PROVENANCE = "provenance"  # the metadata key holding seed, command, torch version… as JSON
REGENERATE = "uv run cs-basics fixtures"


class FixtureError(Exception):
    """A fixture file is missing, altered, or not known to the manifest."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class FixtureStore:
    """Read (once per process) and write the fixture files under one folder."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._cache: dict[str, tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]] = {}
        self._inputs_file: dict[str, bytes] = {}
        self._manifest: dict[str, str] | None = None

    def path(self, case_id: str) -> Path:
        return self.root / f"{case_id}.safetensors"

    def manifest(self) -> dict[str, str]:
        if self._manifest is None:
            path = self.root / MANIFEST
            if not path.is_file():
                raise FixtureError(f"{path} is missing; {self._fix()}")
            self._manifest = json.loads(path.read_text())["sha256"]
        return self._manifest

    def load(self, case_id: str) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """(inputs, expected) for a case, checked against the manifest."""
        if case_id not in self._cache:
            path = self.path(case_id)
            if not path.is_file():
                raise FixtureError(f"fixture {path} is missing; {self._fix()}")
            data = path.read_bytes()
            want = self.manifest().get(path.name)
            if want is None:
                raise FixtureError(f"fixture {path} is not in {self.root / MANIFEST}; {self._fix()}")
            if sha256(data) != want:
                raise FixtureError(f"fixture {path} does not match its checksum in {MANIFEST}; {self._fix()}")
            tensors = load(data)
            inputs = {k.removeprefix("input."): v for k, v in tensors.items() if k.startswith("input.")}
            expected = {k.removeprefix("expected."): v for k, v in tensors.items() if k.startswith("expected.")}
            self._cache[case_id] = (inputs, expected)
        return self._cache[case_id]

    def inputs_file(self, case_id: str) -> bytes:
        """A case's inputs alone, as a safetensors file (what the grader hands to the code it grades), serialized
        once per process: a batch writes the same inputs for every submission."""
        if case_id not in self._inputs_file:
            self._inputs_file[case_id] = save(self.load(case_id)[0])
        return self._inputs_file[case_id]

    def metadata(self, case_id: str) -> dict[str, str]:
        from safetensors import safe_open

        with safe_open(self.path(case_id), framework="pt") as f:
            return json.loads((f.metadata() or {}).get(PROVENANCE, "{}"))

    def problems(self, case_ids: Iterable[str]) -> list[str]:
        """Every way the folder disagrees with the cases that should own its files."""
        wanted = {f"{c}.safetensors" for c in case_ids}
        try:
            manifest = self.manifest()
        except FixtureError as err:
            return [str(err)]
        present = {p.name for p in self.root.glob("*.safetensors")}
        found = []
        for name in sorted(wanted - present):
            found.append(f"fixture {self.root / name} is missing")
        for name in sorted(present - wanted):
            found.append(f"fixture {self.root / name} is used by no test case")
        for name in sorted(set(manifest) - present):
            found.append(f"{MANIFEST} lists {name}, which is not in {self.root}")
        for name in sorted(present & wanted):
            if sha256((self.root / name).read_bytes()) != manifest.get(name):
                found.append(f"fixture {self.root / name} does not match its checksum in {MANIFEST}")
        return found

    def write_all(self, files: Mapping[str, tuple[Mapping[str, torch.Tensor], Mapping[str, str]]]) -> None:
        """Replace the folder's fixtures with `files` (case id -> (tensors, metadata)) and the manifest."""
        self.write_blobs({case_id: encode(tensors, meta) for case_id, (tensors, meta) in files.items()})

    def write_blobs(self, blobs: Mapping[str, bytes]) -> list[str]:
        """Make the folder hold exactly `blobs` (case id -> file bytes) and their manifest; return the
        names of the files removed. A file or manifest that already holds its bytes is not touched."""
        self.root.mkdir(parents=True, exist_ok=True)
        files = {f"{case_id}.safetensors": blob for case_id, blob in blobs.items()}
        removed = sorted(p.name for p in self.root.glob("*.safetensors") if p.name not in files)
        for name in removed:
            (self.root / name).unlink()
        manifest = {"sha256": {name: sha256(blob) for name, blob in sorted(files.items())}}
        files[MANIFEST] = (json.dumps(manifest, indent=2) + "\n").encode()
        for name, blob in files.items():
            path = self.root / name
            if not (path.is_file() and path.read_bytes() == blob):
                _write_atomic(path, blob)
        self._cache.clear()
        self._manifest = None
        return removed

    def _fix(self) -> str:
        return f"restore it with `git checkout -- {self.root}` or regenerate with `{REGENERATE}`"


def encode(tensors: Mapping[str, torch.Tensor], meta: Mapping[str, str]) -> bytes:
    """A fixture file's bytes: the tensors and their provenance, the same bytes for the same input."""
    return save(
        {k: v.contiguous() for k, v in tensors.items()},
        # one key: safetensors writes several in random order, and the bytes would change every time
        metadata={PROVENANCE: json.dumps(dict(meta), sort_keys=True)},
    )


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
