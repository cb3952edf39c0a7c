"""The channel is a protocol the grader checks (issue 40): nothing the student's process writes is believed for what
it claims. The grader knows the cases it asked for and what the harness sends for each; a line that does not parse,
a number missing or repeated, a token not the group's, a report out of turn, a field or an event the harness never
sends, or a staff error after the first byte of the submission ran is tampering: it costs the problem, and a
submission can never make the grader exit 2 or write a staff error.

Unit tests feed grading/pipeline/protocol.py the lines the child's own code writes (evidence.Channel and
child.Reporter), then each forgery; the graded tests hand the grader submissions that forge on the real channel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cs_basics.harness.grading.pipeline.protocol import Protocol
from cs_basics.harness.grading.sandbox.attempts import Garbled, Lines
from cs_basics.harness.rule.evidence import Channel

from .submissions import ROOT
from .test_from_scratch import ATTENTION, INLINE_WEIGHTS, SOFTMAX, SOFTMAX_FROM_SCRATCH, attention_with, source
from .test_rule_layers import SANDBOXES, graded

GROUPS = [["softmax-a", "softmax-b"], ["attention-a"]]


def channel_lines(writes) -> list[dict]:
    """What a real Channel writes for `writes(channel)`, read back as the grader reads it."""
    read, write = os.pipe()
    writes(Channel(write))
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.close(read)
    return list(Lines(1 << 16, 1 << 20).feed(data))


def report(channel: Channel, **event: object) -> None:
    channel.report(json.dumps(event))


def a_group(channel: Channel, cases: list[str]) -> None:
    """The lines one group's process sends, as child.run_group sends them."""
    report(channel, event="armed")
    channel.charge(cases)
    channel.send("library", function="numpy.thing", where="functional.py:3")
    report(channel, event="ready", isolated=False)
    for case in cases:
        report(channel, event="start", case=case)
        channel.charge([case])
        channel.send("sighting", op="aten._softmax", where="functional.py:9")
        report(channel, event="done", case=case, record={})
    report(channel, event="finished")


def honest_lines() -> list[dict]:
    return channel_lines(lambda c: a_group(c, GROUPS[0])) + channel_lines(lambda c: a_group(c, GROUPS[1]))


def verdicts(lines) -> list[str | None]:
    protocol = Protocol([list(g) for g in GROUPS])
    return [protocol.check(line)[0] for line in lines]


def test_the_lines_the_harness_sends_are_all_accepted():
    lines = honest_lines()
    assert len(lines) == 2 * 4 + 3 * 3 and verdicts(lines) == [None] * len(lines)


def forged(lines: list[dict], at: int, line: dict | Garbled) -> list:
    return [*lines[:at], line, *lines[at:]]


def at_event(lines: list[dict], event: str, case: str | None = None) -> int:
    return next(i for i, line in enumerate(lines) if line.get("event") == event and line.get("case", case) == case)


def forgeries() -> dict[str, tuple[list, str, int]]:
    """name -> (the lines with one forged or changed, what the protocol must say of it, where it is)."""
    lines = honest_lines()
    token, done = lines[0]["t"], at_event(lines, "done", "softmax-a")
    start = at_event(lines, "start", "softmax-a")
    forged_done = {**lines[done], "t": "0" * 16, "n": 1}
    next_group = channel_lines(lambda c: report(c, event="armed"))[0]
    return {
        "garbled": (forged(lines, start, Garbled("a line that is not JSON")), "not JSON", start),
        "done_from_a_new_token": (forged(lines, start + 1, forged_done), "another token", start + 1),
        "done_with_the_next_number": (
            forged(lines, start + 1, {**lines[done], "n": lines[start]["n"] + 1}),
            "was due",
            start + 2,  # its number was right: the harness's own next line is the one out of order
        ),
        "line_missing": ([*lines[: start + 1], *lines[start + 2 :]], "was due", start + 1),
        "line_repeated": (forged(lines, done + 1, lines[done]), "was due", done + 1),
        "done_of_a_case_not_running": (
            forged(lines, start, {"event": "done", "case": "softmax-b", "record": {}, "t": token, "n": start + 1}),
            "not the case running",
            start,
        ),
        "a_verdict_field": (forged(lines, done, {**lines[done], "passed": True}), "never sends", done),
        "an_event_never_sent": (forged(lines, start, {"event": "score", "t": token, "n": 3}), "never sends", start),
        "staff_error_after_armed": (forged(lines, start, {"event": "staff_error", "message": "x"}), "never", start),
        "second_group_armed_early": (forged(lines, start, next_group), "out of turn", start),
    }


@pytest.mark.parametrize("name", list(forgeries()))
def test_each_forgery_breaks_the_protocol_where_it_shows(name):
    lines, said, at = forgeries()[name]
    found = verdicts(lines)
    assert all(v is None for v in found[:at]), found[:at]
    assert found[at] is not None and said in found[at], found[at]


def test_a_staff_error_before_any_process_is_armed_is_the_harness_s_own():
    protocol = Protocol([["softmax-a"]])
    assert protocol.check({"event": "staff_error", "message": "the uid cannot enter /root"}) == (None, True)
    armed = channel_lines(lambda c: report(c, event="armed"))[0]
    assert protocol.check(armed) == (None, True)
    wrong, act = protocol.check({"event": "staff_error", "message": "forged"})
    assert wrong is not None and not act


def test_a_forgery_is_charged_to_the_case_running_or_to_the_group_at_import():
    protocol = Protocol([["softmax-a", "softmax-b"], ["attention-a"]])
    lines = channel_lines(lambda c: a_group(c, ["softmax-a", "softmax-b"]))
    for line in lines[: at_event(lines, "start", "softmax-a") + 1]:
        assert protocol.check(line) == (None, True)
    assert protocol.charged() == ["softmax-a"]
    importing = Protocol([["softmax-a", "softmax-b"]])
    importing.check(lines[0])
    assert importing.charged() == ["softmax-a", "softmax-b"]


def test_lines_that_are_not_json_objects_are_garbled_not_dropped():
    got = list(Lines(64, 1 << 20).feed(b'x{"event": "done"}\n[1]\n' + b"y" * 100 + b'\n{"event": "ready"}\n'))
    assert [type(g).__name__ for g in got] == ["Garbled", "Garbled", "Garbled", "dict"]


@pytest.mark.parametrize("reads", [1, 2, 7], ids=["in-one-read", "in-two-reads", "in-seven-reads"])
def test_a_line_too_long_is_said_to_be_too_long_however_it_was_read(reads):
    """The grader reads the channel as the kernel hands it over: a 100 KiB line whose end comes in the same read as
    the bytes that make it too long (a loaded machine's larger reads) is said to be over 64 KiB, as one read
    piece by piece is, not "not JSON"."""
    data = b"x" * (100 << 10) + b'\n{"event": "ready"}\n'
    lines, size = Lines(1 << 16, 1 << 20), -(-len(data) // reads)
    got = [g for start in range(0, len(data), size) for g in lines.feed(data[start : start + size])]
    assert got == [Garbled("a line over 64 KiB"), {"event": "ready"}]


def test_the_channel_numbers_every_line_whatever_thread_writes_it():
    def many(channel: Channel) -> None:
        import threading

        threads = [threading.Thread(target=lambda: [channel.send("tampering", what="x") for _ in range(200)])]
        threads += [threading.Thread(target=lambda: [report(channel, event="finished") for _ in range(200)])]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    lines = channel_lines(many)
    assert [line["n"] for line in lines] == list(range(1, 401)) and len({line["t"] for line in lines}) == 1


# ---------------------------------------------------------------- forged on the real channel, graded

# the student's own code writes a line to every socket it finds (the channel among them): before the fix a staff
# error ended the grading with exit 2 and showed the text as the grader's own; a done with any count closed a case
FORGE = """
import json as _json
import os as _os


def _forge(line):
    text = line if isinstance(line, str) else _json.dumps(line) + "\\n"
    for name in _os.listdir("/proc/self/fd"):
        try:
            if int(name) > 2 and "socket" in _os.readlink(f"/proc/self/fd/{name}"):
                _os.write(int(name), text.encode())
        except OSError:
            pass


def softmax(x, dim):
    _forge(LINE)
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)
"""
LINES = {
    "staff_error": {"event": "staff_error", "message": "FORGED: the grader is broken, give everyone full marks"},
    "done_of_the_case": {"event": "done", "case": "softmax-dim_0", "record": {}, "evidence": {"t": "x", "n": 0}},
    "stray_bytes": "x",  # no newline: glued to the harness's next line, which then does not parse
}
# the forger reads /proc and writes descriptors (os.listdir, json) at module level: the hold that costs every
# problem is released, as the staff would after reading it, so that the protocol alone decides
RELEASED = (SOFTMAX, ATTENTION)


def forger(line: str) -> str:
    return source(FORGE.replace("LINE", repr(LINES[line])), attention_with(INLINE_WEIGHTS))


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("line", list(LINES))
def test_a_line_forged_on_the_channel_costs_the_problem_and_never_stops_the_grader(assignment, tmp_path, sandbox, line):
    got, first = graded(assignment, tmp_path, forger(line), sandbox, released=RELEASED)
    assert got == pytest.approx({SOFTMAX: 0.0, ATTENTION: 5.0}), first
    assert "sent the grader" in first[SOFTMAX] or "progress channel" in first[SOFTMAX], first[SOFTMAX]
    assert "FORGED" not in json.dumps(first)


def test_the_forging_submission_is_held_by_the_scan_before_any_line_is_written(assignment, tmp_path):
    got, first = graded(assignment, tmp_path, forger("staff_error"))
    assert got == pytest.approx({SOFTMAX: 0.0, ATTENTION: 0.0}), first
    assert all("held for the staff's review" in first[p] for p in RELEASED), first


def test_a_forged_staff_error_never_makes_the_command_exit_2(tmp_path):
    """The whole command, as the staff run it: exit 0 (graded, points lost), the text nowhere as the grader's own."""
    from .test_from_scratch import student

    folder = student(tmp_path, forger("staff_error"))
    results = tmp_path / "results.json"
    command = [sys.executable, "-m", "cs_basics.cli", "grade", "--submission", str(folder), "--results", str(results)]
    release = [arg for problem in RELEASED for arg in ("--release", problem)]
    done = subprocess.run([*command, *release], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "FORGED" not in done.stdout + done.stderr and "FORGED" not in results.read_text()
    assert json.loads(results.read_text())["score"] == pytest.approx(5.0)


def test_the_reference_with_every_line_checked_keeps_full_marks(assignment, tmp_path):
    got, first = graded(assignment, tmp_path, source(SOFTMAX_FROM_SCRATCH, attention_with(INLINE_WEIGHTS)))
    assert got == pytest.approx({SOFTMAX: 1.0, ATTENTION: 5.0}), first


# a twin of the process running the cases, forked at import and never ended: it runs every case again on the same
# channel, its lines the same numbers and tokens as the process's own (found by the battery of issue 44's change)
TWIN = "\nimport os as _os\n\n_os.fork()\n"


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_twin_forked_at_import_that_repeats_every_line_costs_its_problems_and_never_stops_the_grader(
    assignment, tmp_path, sandbox
):
    got, first = graded(
        assignment,
        tmp_path,
        source(SOFTMAX_FROM_SCRATCH, attention_with(INLINE_WEIGHTS)) + TWIN,
        sandbox,
        released=RELEASED,
    )
    assert not any("grading stopped" in message for message in first.values()), first
    assert got == pytest.approx({SOFTMAX: 0.0, ATTENTION: 0.0}), first
    assert all("sent the grader" in first[p] for p in RELEASED), first
