"""Every byte a submission makes is safe for every reader (issue 35).

A submission's exception messages and output may hold lone surrogates (`"\\ud800"`, or `surrogateescape`d bytes),
NUL, escape sequences, bidirectional overrides and bytes that are no UTF-8. Graded, every file the grader writes
is valid UTF-8 that its reader parses, with no NUL and no lone surrogate (PostgreSQL's `jsonb`, where PrairieLearn
keeps the results, refuses both `\\u0000` and a lone `\\ud800`), and the table prints on an ASCII terminal as on a
UTF-8 one. `report`, `merge` and a batch read any results file: a bad one is passed over with a warning naming
it, and the rest is written.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cs_basics.cli import main
from cs_basics.harness.course import batch
from cs_basics.harness.course.regrade import Planned, stored
from cs_basics.harness.course.report import ITEMS, SCORES, read_or_none
from cs_basics.harness.text import json_text, printable, printable_data

from .submissions import ROOT, submission, wrap_attention

HOSTILE = "\ud800 \x00 \x1b[2J \u202e \ufffe end \udcff"
# what a submission raises and prints: lone surrogates (one of them surrogateescape'd bytes), NUL, an escape
# sequence that clears the screen, a right-to-left override; and bytes that are no UTF-8, written raw
RAISES = wrap_attention(
    """
import sys
print("printed \\x00 \\x1b[2J \\u202e end", flush=True)
sys.stdout.buffer.write(b"raw \\xff\\xfe bytes\\n")
sys.stdout.flush()
raise ValueError("\\ud800 \\x00 \\x1b[2J \\u202e end " + bytes([0xFF, 0xFE]).decode("utf-8", "surrogateescape"))
"""
)
FORMATS = {"gradescope": "results.json", "prairielearn": "pl.json", "junit": "junit.xml", "github-classroom": "gh.txt"}


def unsafe(text: str) -> list[str]:
    """What no reader of ours takes: lone surrogates, NUL and the other control characters but newline and tab."""
    return [f"U+{ord(c):04X}" for c in text if 0xD800 <= ord(c) <= 0xDFFF or (ord(c) < 0x20 and c not in "\n\t")]


def strings(value: object):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def assert_safe_json(raw: bytes, what: str) -> dict:
    data = json.loads(raw.decode("utf-8"))  # strict: valid UTF-8
    assert b"\x00" not in raw, what
    for text in strings(data):
        assert not unsafe(text), f"{what}: {unsafe(text)[:3]} in {text[:80]!r}"
    return data


# ---------------------------------------------------------------- the sanitiser


def test_printable_leaves_nothing_a_reader_refuses_and_is_its_own_fixed_point():
    text = printable(HOSTILE + "\r\n\ttab\x7f\x9b")
    assert not unsafe(text) and "\ufffe" not in text
    text.encode("utf-8")  # no surrogate left
    assert text == "\ufffd ^@ ^[[2J \\u202e \ufffd end \ufffd\n\ttab^?\\x9b"
    assert printable(text) == text  # writers may apply it again: nothing changes
    data = {HOSTILE: [HOSTILE, 1.5, None, True, {"k": HOSTILE}]}
    assert printable_data(data) == {
        text.split("\n")[0]: [text.split("\n")[0], 1.5, None, True, {"k": text.split("\n")[0]}]
    }
    raw = json_text(data).encode("ascii")  # JSON escapes the rest
    assert_safe_json(raw, "json_text")
    assert b"\\u0000" not in raw and b"\\ud800" not in raw


# ---------------------------------------------------------------- one hostile submission, graded


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The hostile submission graded by `cs-basics grade` into every format, once with stdout in ASCII and once in
    UTF-8 (PYTHONIOENCODING): {encoding: (the folder of its files, the completed process)}."""
    tmp = tmp_path_factory.mktemp("text-safety")
    folder = submission(tmp, RAISES, name="surrogate")
    (folder / "cs_basics" / "nn" / os.fsdecode(b"\x1b[2J\xff name.txt")).write_text("a file whose name is hostile")
    done = {}
    for encoding in ("ascii", "utf-8"):
        out = tmp / encoding
        out.mkdir()
        formats = [arg for name, file in FORMATS.items() for arg in ("--format", f"{name}={out / file}")]
        command = [Path(sys.executable).with_name("cs-basics"), "grade", "--project", ROOT, "--submission", folder]
        env = {**os.environ, "PYTHONIOENCODING": encoding, "COLUMNS": "120"}
        env.pop("GITHUB_ACTIONS", None)
        ran = subprocess.run([*command, *formats], capture_output=True, env=env, timeout=280, cwd=out)
        done[encoding] = (out, ran)
    return done


def test_a_hostile_submission_is_graded_and_the_table_printed_in_any_encoding(graded, assignment):
    for encoding, (_, ran) in graded.items():
        assert ran.returncode == 0, f"{encoding}: {ran.stderr.decode(errors='replace')[-2000:]}"
        stdout = ran.stdout.decode(encoding)  # strict: only what the terminal's encoding holds
        assert "total" in stdout and "ValueError" in stdout, encoding
        assert "\x1b[2J" not in stdout and "\x00" not in stdout, encoding
    out, _ = graded["utf-8"]
    results = json.loads((out / "results.json").read_text())
    softmax = [t for t in results["tests"] if t["tags"] == ["softmax"]]
    assert all(t["status"] == "passed" for t in softmax)  # the untouched problem keeps its points
    raised = next(t["output"] for t in results["tests"] if "ValueError" in t["output"])
    assert "\ufffd ^@ ^[[2J \\u202e end \ufffd\ufffd" in raised  # each character still shown, made harmless


def test_every_file_the_grader_writes_is_read_by_its_reader(graded):
    for encoding, (out, _) in graded.items():
        assert_safe_json((out / "results.json").read_bytes(), f"{encoding}: results.json")
        pl = assert_safe_json((out / "pl.json").read_bytes(), f"{encoding}: pl.json")
        assert pl["gradable"] is True and 0 <= pl["score"] <= 1
        raw = (out / "junit.xml").read_bytes()
        root = ET.fromstring(raw)  # strict XML 1.0: no NUL, no control character, no surrogate
        for element in root.iter():
            for text in [element.text or "", *element.attrib.values()]:
                assert not unsafe(text), f"{encoding}: junit.xml {element.tag}"
        for line in (out / "gh.txt").read_text().splitlines():
            problem, _, value = line.partition("=")
            assert_safe_json(base64.b64decode(value), f"{encoding}: Classroom's {problem}")


# ---------------------------------------------------------------- the course's tools read any results file


def results_folder(tmp: Path, good: dict) -> tuple[Path, dict[str, str]]:
    """A folder of results: two good ones (one full of escaped surrogates and NULs, which JSON allows), and one
    of each bad kind: {name: why it is bad}."""
    folder = tmp / "results"
    folder.mkdir()
    (folder / "alice.json").write_text(json.dumps(good))
    hostile = json.loads(json.dumps(good))
    hostile["tests"][0]["output"] = hostile["tests"][0]["name"] = "$\\frac{$ " + HOSTILE * 1000  # no formula
    hostile["tests"][1]["output"] = "x" * (8 << 20)  # a huge string, still a results file
    (folder / "bob.json").write_text(json.dumps(hostile))  # ASCII with \ud800 and \u0000 escapes
    bad = {
        "not_json": b'{"score": 1.0, "tests": [',
        "not_utf8": b'{"score": "\xff\xfe", "tests": []}',
        "a_list": b"[1, 2, 3]",
        "score_text": json.dumps({"score": "six", "tests": []}).encode(),
        "test_types": json.dumps({"score": 1, "tests": [{"name": 5, "score": None, "tags": "softmax"}]}).encode(),
        "extra_list": json.dumps({"score": 1, "tests": [], "extra_data": [1]}).encode(),
        "deep": b"[" * 100_000 + b"]" * 100_000,
    }
    for name, raw in bad.items():
        (folder / f"{name}.json").write_bytes(raw)
    return folder, bad


@pytest.fixture(scope="module")
def good(graded):
    return json.loads((graded["utf-8"][0] / "results.json").read_text())


def test_report_passes_over_a_bad_results_file_and_writes_the_rest(tmp_path, good, capsys):
    folder, bad = results_folder(tmp_path, good)
    assert main(["report", str(folder), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    for name in bad:
        assert f"{name}.json" in err, name
    raw = (tmp_path / "out" / ITEMS).read_bytes()
    assert b"\x00" not in raw and not unsafe(raw.decode("utf-8").replace("\r", ""))
    rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8"), newline="")))
    counts = [row["submissions"] for row in rows]  # bob's first case renamed: a case of its own, listed last
    assert counts == ["1"] + ["2"] * (len(good["tests"]) - 1) + ["1"]
    assert (tmp_path / "out" / "pass_rates.png").stat().st_size > 0


def test_merge_marks_a_bad_results_file_in_scores_csv(tmp_path, good, capsys):
    folder, bad = results_folder(tmp_path, good)
    assert main(["merge", str(folder), "--out", str(tmp_path / "merged")]) == 0
    rows = {row["submission"]: row for row in csv.DictReader((tmp_path / "merged" / SCORES).open(encoding="utf-8"))}
    assert set(rows) == {"alice", "bob", *bad}
    assert all("not" in rows[name]["error"] and f"{name}.json" in rows[name]["error"] for name in bad)
    assert rows["alice"]["error"] == "" and float(rows["alice"]["score"]) == good["score"]
    merged = (tmp_path / "merged" / "bob.json").read_bytes()
    assert_safe_json(merged, "bob.json merged")
    capsys.readouterr()


def test_a_batch_reads_a_bad_results_file_as_none_and_writes_a_good_one_over_it(tmp_path, capsys):
    results = tmp_path / "alice.json"
    for raw in (b"[1]", b'{"score": 1, "tests": [], "extra_data": [1]}', b"\xff{", b'{"score": "x", "tests": []}'):
        results.write_bytes(raw)
        assert read_or_none(results) is None and stored(json.loads(raw) if raw[0] != 0xFF else None) == {}
        row = batch.not_graded(Planned(tmp_path / "alice", results, {}, False), "not graded: stopped")
        assert row["error"] == "not graded: stopped" and row["score"] == 0.0
        assert_safe_json(results.read_bytes(), "alice.json")
    assert "alice.json" in capsys.readouterr().err
