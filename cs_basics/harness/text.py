"""Text a submission made, made safe for every reader: one sanitiser for every file and every terminal.

What a submission prints, raises and names reaches JSON files (Gradescope's, PrairieLearn's, Classroom's),
XML (JUnit), CSVs and terminals. Each reader refuses something Python's `str` may hold:
- a lone surrogate (`"\\ud800"`, or the `\\udcff` of `surrogateescape`d bytes) is no UTF-8: `json.dumps`
  writes it as a `\\ud800` escape that PostgreSQL's `jsonb` (PrairieLearn's database) refuses, and a
  terminal's encoder raises UnicodeEncodeError;
- NUL: `jsonb` refuses `\\u0000`, XML 1.0 refuses it, C strings end at it;
- the other control characters: XML 1.0 refuses most, and a terminal obeys escape sequences (an
  exception message must not clear the staff's screen); the bidirectional overrides reorder a line;
- U+FFFE and U+FFFF: XML 1.0 refuses them.
`printable` fixes all of these at once, the same way everywhere: controls made visible as `cat -v` shows
them, surrogates and the two noncharacters replaced by U+FFFD. Its result is valid UTF-8 that every
format above accepts, and printable again is the same text (writers may apply it defensively).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys

# control characters (C0 but newline and tab, DEL, C1) and the bidirectional overrides that reorder a line
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
NOT_TEXT = re.compile("[\ud800-\udfff\ufffe\uffff]")  # no UTF-8 (surrogates), or refused by XML 1.0
REPLACEMENT = "\ufffd"


def printable(text: object) -> str:
    """`text` with every control character made visible, as `cat -v` does (ESC as `^[`, NUL as `^@`, DEL as
    `^?`; C1 and the bidirectional overrides as `\\x9b`, `\\u202e`), newlines and tabs kept (a Windows line
    end `\\r\\n` as a newline), lone surrogates as U+FFFD: what a submission brought, fit for any file,
    terminal or log."""
    text = str(text).replace("\r\n", "\n")
    return NOT_TEXT.sub(REPLACEMENT, CONTROLS.sub(_visible, text))


def _visible(match: re.Match) -> str:
    code = ord(match[0])
    if code < 0x20 or code == 0x7F:
        return "^" + chr(code ^ 0x40)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable_data(value: object) -> object:
    """A JSON value with every string in it (keys too) `printable`; numbers, booleans and None as they are."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(key): printable_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [printable_data(item) for item in value]
    return value


def json_text(data: object, indent: int | None = 2) -> str:
    """`data` as JSON every reader takes: ASCII only (escapes for the rest), no NUL, no lone surrogate, no control
    character but the newlines and tabs inside strings (escaped)."""
    return json.dumps(printable_data(data), indent=indent)


def safe_terminal(*streams: io.TextIOBase) -> None:
    """Make `streams` (stdout and stderr by default) write a character their encoding lacks as an escape
    (`\\xe9`) instead of raising UnicodeEncodeError: a table printed to an ASCII stdout (`PYTHONIOENCODING=ascii`,
    a C locale, a CI log) must not end the grading that wrote it."""
    for stream in streams or (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", "strict") not in ("backslashreplace", "replace"):
            with contextlib.suppress(ValueError, OSError):  # a closed or detached stream: nothing to print there
                reconfigure(errors="backslashreplace")
