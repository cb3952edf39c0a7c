"""What a child may say on its progress channel, and when: the grader's check of every line.

The child's process runs the student's code, which can write anything on the channel the grader
reads (a thread finds the descriptor; code at import runs beside the harness). So no line is believed
for what it claims: the grader knows which cases it asked the child for, in which order
(`cases_by_rule`), and what the harness's own code sends for each (child.py, rule/evidence.py):

    per group of cases, one process:  armed, [evidence...], ready | import_error,
                                      then per case: start, [evidence...], done | error;  then finished

Every line of a group's process carries its channel's token and the next number (evidence.Channel): the
token is the group's from its first line ("armed", number 1), and each number follows the one before.
A line that does not parse, a number missing, repeated or out of order, a token that is not the group's,
a report out of turn (a case done that is not running, a case closed twice), a field or an event the
harness never sends (a verdict, a score), or a staff error after any process of the job said it was armed
(from then on the student's code has run) is **tampering**: it costs the problem of the case running then,
or the problems of the group (`Protocol.charged`). A line that is not the group's process's own (garbled, of
another token, of a kind or with fields the harness never sends) is not acted on; one of its own that came out
of order is, as far as it can be (its number taken up, a case it starts started), so that one forged or lost
line costs its own problem and not every case after it. A staff error before the first "armed" is the
harness's own (no byte of the submission has run): grading stops for the staff.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cs_basics.harness.grading.sandbox.attempts import Garbled

# each event the harness sends, with the fields it carries besides "event", "t" and "n"
FIELDS = {
    "armed": set(),
    "ready": {"isolated"},
    "import_error": {"message"},
    "start": {"case"},
    "done": {"case", "record"},
    "error": {"case", "message", "traceback", "record"},
    "evidence": {"kind", "cases", "op", "where", "function", "what"},
    "finished": set(),
}
EVIDENCE_KINDS = {"sighting", "refused", "library", "tampering", "process"}
STAFF_ERROR = "staff_error"  # sent raw (no token) by the harness when it fails before any student code ran


@dataclass
class Protocol:
    """One attempt's lines, checked in order. `groups`: the cases the child was given, by group, in its order."""

    groups: list[list[str]]
    group: int = -1  # the group whose process speaks now
    token: str | None = None  # its channel's token
    number: int = 0  # the number of its last line
    imported: bool = False  # it said it is ready (or could not import)
    current: str | None = None  # the case it said it started, until it reports it
    closed: set[str] = field(default_factory=set)  # the cases reported done or failed
    armed: bool = False  # some process of the job said it is armed: the student's code may have run since
    blamed: list[str] = field(default_factory=list)  # who pays for the last line checked, if it was wrong

    def check(self, event: dict | Garbled) -> tuple[str | None, bool]:
        """(what is wrong with the line, None when the harness could have sent it now; whether to act on it). Who
        pays for a wrong one is `blamed`, as the state stood before the line."""
        self.blamed = self.charged()
        return self._check(event)

    def _check(self, event: dict | Garbled) -> tuple[str | None, bool]:
        if isinstance(event, Garbled):
            return f"wrote {event.why} to the grader's progress channel", False
        kind = event.get("event")
        if kind == STAFF_ERROR and not self.armed and set(event) <= {"event", "message", "t", "n"}:
            return None, True  # the harness's own failure, before any byte of the submission ran
        if kind not in FIELDS:
            return f"sent the grader a line the harness never sends ({describe(kind)})", False
        extra = set(event) - FIELDS[kind] - {"event", "t", "n"}
        if extra:
            return (
                f"sent the grader a {kind} line with fields the harness never sends ({', '.join(sorted(extra))})",
                False,
            )
        if kind == "armed":
            wrong = self.arm(event)
            return wrong and f"sent the grader {wrong}", wrong is None
        token = event.get("t")
        if not isinstance(token, str) or type(event.get("n")) is not int:
            return "sent the grader a line without the channel's token and number", False
        if token != self.token:
            return "sent the grader a line that is not from the process running the cases (another token)", False
        numbered, in_turn = self.numbered(event["n"]), self.in_turn(kind, event)  # the state follows either way
        wrong = numbered or in_turn
        return wrong and f"sent the grader {wrong}", True

    def arm(self, event: dict) -> str | None:
        """The first line of the next group's process: its token is the group's from now on."""
        token, number = event.get("t"), event.get("n")
        if not isinstance(token, str) or number != 1 or self.group + 1 >= len(self.groups) or not self.finished():
            return "an 'armed' line out of turn (a second one, or one before the group before it finished)"
        self.group, self.token, self.number, self.imported, self.armed = self.group + 1, token, 1, False, True
        return None

    def numbered(self, number: int) -> str | None:
        """The group's next number, else what is wrong; the count goes on from `number` either way."""
        expected, self.number = self.number + 1, max(self.number, number)
        return None if number == expected else f"line {number} of its channel where line {expected} was due"

    def in_turn(self, kind: str, event: dict) -> str | None:
        """Whether the group's process could send `kind` now; the state follows its own lines all the same."""
        case = event.get("case")
        if kind == "evidence":
            return self.well_formed_evidence(event)
        if kind in ("ready", "import_error"):
            wrong = f"a second '{kind}' line" if self.imported else None
            self.imported = True
            return wrong
        if not self.imported:
            return f"a '{kind}' line before the submission was imported"
        cases = self.groups[self.group]
        if kind == "start":
            upcoming = [c for c in cases if c not in self.closed]
            wrong = None if self.current is None and upcoming and case == upcoming[0] else "a start out of turn"
            if case in upcoming:
                if self.current is not None:  # its report never came: the grader fails it
                    self.closed.add(self.current)
                self.current = case
            return wrong and f"{wrong} ({describe(case)})"
        if kind in ("done", "error"):
            if case is None or case != self.current:
                return f"a report of {describe(case)}, which is not the case running"
            self.closed.add(case)
            self.current = None
            return None
        if self.current is not None or any(c not in self.closed for c in cases):  # finished
            return "a 'finished' line before every case of its group was reported"
        return None

    def well_formed_evidence(self, event: dict) -> str | None:
        cases = event.get("cases")
        if event.get("kind") not in EVIDENCE_KINDS or not isinstance(cases, list):
            return "a line of evidence the harness never sends"
        texts = [v for k, v in event.items() if k not in ("event", "t", "n", "cases")]
        if not all(isinstance(v, str) for v in [*texts, *cases]):
            return "a line of evidence the harness never sends"
        return None

    def finished(self) -> bool:
        """Whether the group before the next one (if any) has reported every case (a new process may start)."""
        return self.group < 0 or all(c in self.closed for c in self.groups[self.group])

    def group_cases(self) -> list[str]:
        return self.groups[self.group] if self.group >= 0 else []

    def charged(self) -> list[str]:
        """Who pays for a line that broke the protocol: the case running (a line lost or forged then was its code's
        doing, whatever the next line names); else the cases of the group speaking (its code ran at import, or a
        thread of it between cases), or of the attempt's first group."""
        if self.current is not None:
            return [self.current]
        return list(self.groups[max(self.group, 0)]) if self.groups else []


def describe(value: object) -> str:
    """A value the child sent, as a short text (it may be anything JSON holds)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
