"""The rule's evidence, sent to the grader as it happens (issue 36).

The record (record.py) lives in the process the student's code runs in, and that code can change
any Python object it reaches. So in the grader's child each piece of evidence leaves the process the
moment it is seen: a forbidden operator that ran or was refused, a library function off the glue list
that computed for the student's code, a switch of the record, a process started. Each is one JSON line
written to the progress channel, the descriptor the grader reads: nothing done later to the process's
objects (emptying the record's lists, replacing the watch or the reporter) takes a line back. The channel
is a socket pair whose child end is shut for reading: unlike a pipe's, it cannot be opened again through
/proc/self/fd to read the lines back before the grader does.

The writer keeps what it needs in its closure, taken when the channel is made (before the submission
is imported): replacing `os.write`, `json` or the channel's attributes later changes nothing it does.
Every line the process sends, its reports (a case started, done, failed) as well as its evidence, carries
the channel's token and the next number, written whole under one lock: the grader reads them as a
protocol (grading/pipeline/protocol.py) in which a line missing, repeated, out of order or not written by this
writer shows, and costs the problem. A line that cannot be written ends the process at once with
`LOST_STATUS`: the grader holds the problem ("the rule's record was cut off").

In the students' pytest run the student's code runs in pytest's own process, beside anything the
plugin could write to or read from: there the record stays in memory (pytest's verdict is advice; the
grader's is the one that counts). docs/grading.md says what each can defend.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cs_basics.harness.rule.sightings import Record

EVENT = "evidence"  # the progress event of one piece of evidence
LOST_STATUS = 86  # the child's exit status when a line of evidence could not be written
CUT_OFF = "the rule's record was cut off"
FIELD_LIMIT = 1500  # characters of one field of a line (a `where` of six frames is far less)


class Channel:
    """Every line a process of the grader's child sends, numbered; see the module's docstring."""

    def __init__(self, fd: int) -> None:
        write, exit_now, quote, lock = os.write, os._exit, json.encoder.encode_basestring_ascii, threading.Lock()
        token = os.urandom(8).hex()
        sent = [0]
        charged: list[tuple[str, ...]] = [()]  # the cases the evidence is charged to now

        def put(body: str) -> None:
            """`body`, a JSON object's text, as the next line: the caller holds the lock."""
            sent[0] += 1
            line = f'{{"t": "{token}", "n": {sent[0]}, {body[1:]}\n'.encode()
            try:
                while line:
                    line = line[write(fd, line) :]
            except BaseException:
                exit_now(LOST_STATUS)

        def send(kind: str, **fields: str) -> None:
            """One line of evidence, whole under the lock, or the process ends (the grader holds the problem)."""
            body = "".join(f", {quote(k)}: {quote(str.__str__(v)[:FIELD_LIMIT])}" for k, v in fields.items())
            with lock:
                cases = ", ".join(quote(c) for c in charged[0])
                put(f'{{"event": "{EVENT}", "kind": {quote(kind)}, "cases": [{cases}]{body}}}')

        def report(body: str) -> None:
            """One of the process's reports (`body`: a JSON object's text, made by the caller), numbered as the rest."""
            with lock:
                put(body)

        def charge(cases: Iterable[str]) -> None:
            with lock:
                charged[0] = tuple(cases)

        self.send: Callable[..., None] = send
        self.report: Callable[[str], None] = report
        self.charge: Callable[[Iterable[str]], None] = charge


@dataclass
class Received:
    """The grader's side: the evidence lines read from one submission's children, by case."""

    lines: dict[str, list[dict]] = field(default_factory=dict)  # case -> its evidence, in the order read

    def add(self, event: dict, cases: Iterable[str]) -> None:
        """One evidence event, charged to the cases it names among `cases` (those its child was given)."""
        named = event.get("cases")
        given = set(cases)
        for case in named if isinstance(named, list) else []:
            if isinstance(case, str) and case in given:
                self.lines.setdefault(case, []).append(event)

    def evidence(self, case: str) -> list[dict]:
        return list(self.lines.get(case, []))


def merged(record: Record, lines: list[dict], complete: bool = True) -> Record:
    """A case's record as the grader decides from it: what its report said, and every line of evidence that
    reached the grader for the case (a line can only add); `complete` False when lines were lost."""
    from cs_basics.harness.rule.sightings import Computed, Record, Sighting

    whole = Record(list(record.sightings), list(record.tampering), list(record.processes), list(record.library))
    whole.cut_off = list(record.cut_off)
    ops = {s.op for s in whole.sightings}
    functions = {c.function for c in whole.library}
    refused = []
    for line in lines:
        kind = line.get("kind")
        text = {k: str(v) for k, v in line.items() if isinstance(v, str)}
        if kind == "sighting" and text.get("op") and text["op"] not in ops:
            ops.add(text["op"])
            whole.sightings.append(Sighting(text["op"], text.get("where", "")))
        elif kind == "refused" and text.get("op"):
            refused.append(text["op"])
        elif kind == "library" and text.get("function") and text["function"] not in functions:
            functions.add(text["function"])
            whole.library.append(Computed(text["function"], text.get("where", "")))
        elif kind == "tampering" and text.get("what") and text["what"] not in whole.tampering:
            whole.tampering.append(text["what"])
        elif kind == "process" and text.get("what") and text["what"] not in whole.processes:
            whole.processes.append(text["what"])
    for op in refused:  # the kernel's own word, when no sighting with the student's line came for it
        if op not in ops:
            ops.add(op)
            whole.sightings.append(Sighting(op))
    if not complete and CUT_OFF not in whole.cut_off:
        whole.cut_off.append(CUT_OFF)
    return whole


def combined(record: Record, more: Record, counts: Callable[[str], bool] = lambda op: True) -> Record:
    """`record` with what `more` holds that it lacks (sightings only of the operators `counts` accepts), in the
    order the grader merges a case's report and the evidence lines charged to it."""
    lines = [{"kind": "sighting", "op": s.op, "where": s.where} for s in more.sightings if counts(s.op)]
    lines += [{"kind": "library", "function": c.function, "where": c.where} for c in more.library]
    lines += [{"kind": "tampering", "what": t} for t in more.tampering]
    lines += [{"kind": "process", "what": p} for p in more.processes]
    whole = merged(record, lines)
    whole.cut_off += [c for c in more.cut_off if c not in whole.cut_off]
    return whole
