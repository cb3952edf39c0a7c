"""A folder of grades into an LMS's gradebook: one assignment column of Canvas's or Moodle's own CSV export.

The staff export the gradebook, `cs-basics gradebook` fills one column of that file with the folder's
grades, and the staff import the file it writes. Only the column's cells for students who have a grade
change; every other byte of the export (its encoding, byte order mark, line endings, quoting, the other
columns and rows) is written back as it was read, so the LMS's import sees no other change.

The two layouts, as the LMSes' own code reads them:

- Canvas (its `GradebookExporter` writes the export and `GradebookImporter` reads it back): a header of
  `Student`, `ID`, `SIS User ID`, `SIS Login ID`, `Section` (some optional), custom columns, then one column
  per assignment named `Title (assignment id)`, then computed totals (`Current Score`, ...); possibly a row
  whose cells say `Manual Posting` (assignments whose grades are posted by hand), then the row starting
  `Points Possible`, then one row per student, whose cells may say `EX` (excused) or `N/A` (not assigned to
  them). Comma- or semicolon-separated (with decimal commas), UTF-8, a byte order mark in some exports. A
  column whose header is not an assignment of the course becomes a new assignment on import.
- Moodle (its "Import grades: CSV file"): a header, then one row per student; on import the staff map one
  column to the user field that identifies students (email address, ID number or username) and the other
  columns to grade items. A cell holds the grade on the item's scale (0 to its maximum grade); `-` or empty
  means no grade. A column the gradebook has no item for is refused (Moodle's docs: add the item first).

What a cell gets: our score as a share of the course's maximum, times the column's points (Canvas: its
Points Possible; Moodle: `points_possible`, by default the course's maximum, which the grade item's
maximum grade must equal), with two decimals (Canvas's own precision), and the decimal mark the file uses.
A grade that is not final keeps the cell as it was and is listed: a problem held for the staff's review,
a grading that did not complete, two submissions for one student, or (Canvas) an excused or unassigned cell.
"""

from __future__ import annotations

import bisect
import csv
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cs_basics.harness.config import Assignment
from cs_basics.harness.course.regrade import stored
from cs_basics.harness.course.report import ReportError, inert, read_one, results_paths, total, unfinished
from cs_basics.harness.grading.writers.results import test_name, write_atomic

LMSES = ("canvas", "moodle")
DEFAULT_KEY = {"canvas": "SIS Login ID", "moodle": "Email address"}
SUBMITTER_FIELDS = ("email", "sid", "name")  # what Gradescope's submission_metadata.yml says of each submitter
DELIMITERS = ",;\t"
UTF8_BOM = b"\xef\xbb\xbf"

# Canvas's importer (GradebookImporter): the student columns it reads, the computed columns it drops (an
# unanchored match: a new column named "Final Score 2" would be dropped too), the row it skips
CANVAS_STUDENT_COLUMNS = {"Student", "LastName", "FirstName", "ID", "SIS User ID", "SIS Login ID", "Section"}
CANVAS_STUDENT_COLUMNS |= {"Integration ID", "Root Account"}
CANVAS_COMPUTED = re.compile(
    "Current Score|Current Points|Current Grade|Final Score|Final Points|Final Grade|Override Score|"
    "Override Grade|Override Status"
)
CANVAS_POSTING_ROW = re.compile(r"^\s*(Muted|Manual Posting.*)?\s*$", re.IGNORECASE)
CANVAS_KEPT = {"EX": "excused in Canvas", "N/A": "the assignment is not assigned to them in Canvas"}
CANVAS_TEST_STUDENT = {"Student, Test", "Test Student"}  # Canvas's Student View user, no one's grade
NUMBER = re.compile(r"^-?\d+([.,])\d+$")


class GradebookError(ValueError):
    """A file that is missing or not what it should be: nothing is written."""


@dataclass(frozen=True)
class Cell:
    start: int  # its span in the text, quotes included
    end: int
    value: str
    quoted: bool


@dataclass
class CsvRecord:
    """One record of the LMS's CSV export: its first line, its cells, where it ends in the text."""

    line: int
    cells: list[Cell]
    end: int  # where its last cell ends (its line break, if any, follows)

    def value(self, index: int) -> str:
        return self.cells[index].value if index < len(self.cells) else ""

    @property
    def blank(self) -> bool:
        return len(self.cells) == 1 and not self.cells[0].value and not self.cells[0].quoted


def records(text: str, delimiter: str, where: str, limit: int | None = None) -> list[CsvRecord]:
    """The CSV records of `text` (RFC 4180, and what spreadsheets write: CRLF, LF or CR line breaks, quoted
    cells holding delimiters, quotes and line breaks), each cell with its exact span."""
    breaks = [m.start() for m in re.finditer("\n", text)]
    stop = re.compile(f"[{re.escape(delimiter)}\r\n]")
    found: list[CsvRecord] = []
    i, n = 0, len(text)
    while i < n and (limit is None or len(found) < limit):
        line, cells = bisect.bisect_left(breaks, i) + 1, []
        while True:
            start, quoted = i, i < n and text[i] == '"'
            if quoted:
                parts, j = [], i + 1
                while True:
                    k = text.find('"', j)
                    if k < 0:
                        raise GradebookError(f'{where} line {line}: a quoted cell never ends (a missing `"`)')
                    parts.append(text[j:k])
                    if text.startswith('"', k + 1):
                        parts.append('"')
                        j = k + 2
                        continue
                    i = k + 1
                    break
                value = "".join(parts)
            else:
                value = ""
            m = stop.search(text, i)
            j = m.start() if m else n
            value += text[i:j]  # text after a closing quote is kept, as Python's csv does
            i = j
            cells.append(Cell(start, i, value, quoted))
            if i < n and text[i] == delimiter:
                i += 1
                continue
            break
        found.append(CsvRecord(line, cells, i))
        i += 2 if text.startswith("\r\n", i) else 1
    return found


@dataclass
class Sheet:
    path: Path
    encoding: str
    bom: bytes
    text: str
    delimiter: str
    records: list[CsvRecord]

    @property
    def header(self) -> list[str]:
        return [c.value.strip() for c in self.records[0].cells]

    def column(self, name: str) -> int | None:
        named = [i for i, h in enumerate(self.header) if h == name]
        if len(named) > 1:
            raise GradebookError(f"{self.path}: two columns are named {name!r}")
        return named[0] if named else None

    def encode(self, edits: Iterable[tuple[int, int, str]]) -> bytes:
        """The file's bytes with each (start, end) span of the text replaced, all else as it was read."""
        pieces, at = [], 0
        for start, end, text in sorted(edits):
            pieces += [self.text[at:start], text]
            at = end
        pieces.append(self.text[at:])
        return self.bom + "".join(pieces).encode(self.encoding)


def read_bytes(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise GradebookError(f"{what} {path}: no such file") from None
    except OSError as err:
        raise GradebookError(f"{what} {path}: cannot be read ({err.strerror})") from None


def read_sheet(path: Path, encoding: str = "utf-8") -> Sheet:
    raw = read_bytes(path, "--roster")
    bom = UTF8_BOM if raw.startswith(UTF8_BOM) and encoding.replace("_", "-").lower() in ("utf-8", "utf8") else b""
    try:
        text = raw[len(bom) :].decode(encoding)
    except UnicodeDecodeError as err:
        raise GradebookError(
            f"--roster {path}: not {encoding} text (byte {err.start + len(bom)}): export it again as UTF-8, "
            "or name its encoding with --encoding"
        ) from None
    except LookupError:
        raise GradebookError(f"--encoding {encoding}: no such encoding") from None
    if not text.strip():
        raise GradebookError(f"--roster {path}: the file is empty, not a gradebook export")
    # the delimiter that splits the header into the most cells: Canvas writes `;` where decimals are commas
    delimiter = max(DELIMITERS, key=lambda d: len(records(text, d, str(path), limit=1)[0].cells))
    return Sheet(Path(path), encoding, bom, text, delimiter, records(text, delimiter, str(path)))


def quote(value: str, delimiter: str, always: bool = False) -> str:
    """A cell as CSV writes it: quoted when it must be (or was)."""
    if always or any(c in value for c in (delimiter, '"', "\r", "\n")) or value != value.strip():
        return '"' + value.replace('"', '""') + '"'
    return value


def decimal_mark(cells: Iterable[str]) -> str:
    """`,` when the file's decimal numbers all use a decimal comma (Canvas in such locales), else `.`."""
    marks = {m[1] for cell in cells if (m := NUMBER.match(cell.strip()))}
    return "," if marks == {","} else "."


def points_text(points: float, mark: str) -> str:
    return f"{points:.2f}".replace(".", mark)


def number(text: str) -> float | None:
    try:
        value = float(text.strip().replace(",", "."))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_points(text: str) -> float | None:
    points = number(text)
    return points if points is not None and points > 0 else None


# ---------------------------------------------------------------- whose results are these


def course_cases(assignment: Assignment) -> dict[str, float]:
    """Each graded case's results name and points: what results of this course hold."""
    return {test_name(case): assignment.points[case.id] for case in assignment.cases}


def check_course(cases: Mapping[str, float], path: Path, data: Mapping) -> None:
    """Results of this course: the same cases (hidden ones included) with the same points."""
    got = {t.get("name"): t.get("max_score") for t in data.get("tests", [])}
    unknown, missing = sorted(set(got) - set(cases), key=str), sorted(set(cases) - set(got))
    if unknown or missing:
        which = f"{unknown[0]} is not one of its cases" if unknown else f"it has no {missing[0]}"
        more = len(unknown) + len(missing) - 1
        raise GradebookError(
            f"{path}: not results of this course ({which}{f', and {more} more differences' if more else ''}):"
            " results from another course, or graded before its cases changed? Grade them again with this course"
        )
    for name, points in cases.items():
        if not isinstance(got[name], int | float) or not math.isclose(got[name], points, abs_tol=1e-6):
            raise GradebookError(
                f"{path}: {name} is worth {got[name]!r} points there and {points:g} in this course: grade it again"
            )


def load_results(assignment: Assignment, folder: Path) -> dict[str, dict]:
    try:
        paths = results_paths(folder)
        results = {name: read_one(path) for name, path in paths.items()}
    except ReportError as err:
        raise GradebookError(f"RESULTS_DIR: {err}") from None
    cases = course_cases(assignment)
    for name, data in results.items():
        check_course(cases, paths[name], data)
    return results


def gradescope_identifiers(path: Path, submitter_field: str) -> dict[str, list[str]]:
    """Submission folder -> its submitters' `submitter_field`, from the `submission_metadata.yml` of
    Gradescope's "Download submissions" export (Ruby symbol keys: `submission_123: {:submitters: [{:name:,
    :sid:, :email:}]}`; a group submission lists several)."""
    import yaml

    class Loader(yaml.SafeLoader):
        """Ruby objects (`!ruby/object:...`) read as plain data: only the submitters are used."""

    Loader.add_multi_constructor("!", lambda loader, _tag, node: plain(loader, node))
    try:
        data = yaml.load(read_bytes(path, "--gradescope-metadata"), Loader=Loader)
    except yaml.YAMLError as err:
        raise GradebookError(f"--gradescope-metadata {path}: not YAML ({err})") from None
    if not isinstance(data, dict):
        raise GradebookError(f"--gradescope-metadata {path}: not Gradescope's submission_metadata.yml")
    found = {}
    for folder, entry in data.items():
        submitters = entry.get(":submitters") if isinstance(entry, dict) else None
        if not isinstance(submitters, list):
            raise GradebookError(f"--gradescope-metadata {path}: {folder} has no `:submitters:` list")
        values = [s.get(f":{submitter_field}") for s in submitters if isinstance(s, dict)]
        found[str(folder)] = [str(v).strip() for v in values if v is not None and str(v).strip()]
    return found


def plain(loader, node):
    import yaml

    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_scalar(node)


def mapping_identifiers(path: Path) -> dict[str, list[str]]:
    """Submission name -> roster identifiers, from a CSV whose header names two columns: the submission
    (its folder's name), then the identifier; several rows for one submission are a group's."""
    try:
        text = read_bytes(path, "--mapping").decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise GradebookError(f"--mapping {path}: not UTF-8 text (byte {err.start})") from None
    rows = [row for row in csv.reader(text.splitlines()) if any(cell.strip() for cell in row)]
    if not rows or len(rows[0]) < 2:
        raise GradebookError(f"--mapping {path}: a CSV with a header and two columns (submission, identifier)")
    found: dict[str, list[str]] = {}
    for number, row in enumerate(rows[1:], start=2):
        if len(row) < 2 or not row[0].strip() or not row[1].strip():
            raise GradebookError(f"--mapping {path} row {number}: needs a submission and an identifier")
        found.setdefault(row[0].strip(), []).append(row[1].strip())
    return found


# ---------------------------------------------------------------- the gradebook


@dataclass
class Filled:
    """What filling the column did, for the staff to read."""

    out: Path
    column: str
    points_possible: float
    data: bytes = b""
    written: int = 0
    changed: int = 0
    added_column: bool = False
    unmatched: dict[str, str] = field(default_factory=dict)  # submission -> why no student got its grade
    without_grade: list[str] = field(default_factory=list)  # students no results file is for
    kept: dict[str, str] = field(default_factory=dict)  # student -> why their cell was left as it was
    passed_over: list[str] = field(default_factory=list)  # rows that are no student's (Canvas's test student)

    @property
    def complete(self) -> bool:
        return not (self.unmatched or self.without_grade or self.kept)

    def report(self) -> tuple[list[str], list[str]]:
        """Lines for stdout (what was written) and for stderr (what the staff must look at)."""
        added = " (a new column: Canvas creates the assignment on import)" if self.added_column else ""
        grades = f"{self.written} grade{'' if self.written == 1 else 's'}"
        done = [
            f"wrote {self.out}: {grades} in {self.column!r}{added}, out of {self.points_possible:g} points;"
            f" {self.changed} differ from the export's"
        ]
        if self.passed_over:
            done.append(f"passed over (no student's row): {', '.join(self.passed_over)}")
        todo = []
        for title, items in (
            ("cells left as they were", [f"{who}: {why}" for who, why in self.kept.items()]),
            ("submissions no student got", [f"{name}: {why}" for name, why in self.unmatched.items()]),
            ("students without a grade", self.without_grade),
        ):
            if items:
                todo.append(f"{len(items)} {title}:")
                todo += [f"  {item}" for item in items]
        return done, todo


def normal(key: str) -> str:
    return key.strip().casefold()


def find_column(sheet: Sheet, name: str) -> int | None:
    """The column named `name`, or titled so: Canvas's `Title (id)`, Moodle's `Assignment: Title (Real)`."""
    exact = sheet.column(name.strip())
    if exact is not None:
        return exact
    titled = re.compile(re.escape(name.strip()) + r" \([^()]*\)")
    found = [i for i, h in enumerate(sheet.header) if titled.fullmatch(h) and not h.endswith("(Feedback)")]
    if len(found) > 1:
        names = ", ".join(repr(sheet.header[i]) for i in found)
        raise GradebookError(f"--column {name!r}: {sheet.path} has several such columns ({names}): name one in full")
    return found[0] if found else None


def refuse_column(lms: str, sheet: Sheet, header: str, key: str) -> None:
    """A column no grade may go into: the students' own, or one the LMS computes or reads as text."""
    why = ""
    if header == key or (lms == "canvas" and header in CANVAS_STUDENT_COLUMNS):
        why = "it identifies students"
    elif lms == "canvas" and CANVAS_COMPUTED.search(header):
        why = "Canvas computes it (its importer drops every column whose name holds such a total's)"
    elif lms == "moodle" and (header.endswith("(Feedback)") or header.lower().startswith("course total")):
        why = "Moodle reads it as feedback text or computes it"
    if why:
        raise GradebookError(f"--column {header!r}: no grade goes into {sheet.path}'s column {header!r}: {why}")


def canvas_rows(sheet: Sheet) -> tuple[CsvRecord | None, list[CsvRecord]]:
    """The Points Possible row and the rows Canvas's importer skips (the Manual Posting row, blank lines)."""
    header = sheet.header
    if not (len(header) > 3 and "Student" in header[0] and "ID" in header[1]) and not (
        len(header) > 4 and header[:2] == ["LastName", "FirstName"]
    ):
        raise GradebookError(
            f"--roster {sheet.path}: not a Canvas gradebook export (its first row must start with `Student`, `ID`,"
            " as Canvas's importer requires)"
        )
    points, skipped = None, []
    for record in sheet.records[1:]:
        if record.blank:
            skipped.append(record)
        elif "Points Possible" in record.value(0):
            points = points or record
            skipped.append(record)
        elif all(CANVAS_POSTING_ROW.match(c.value) for c in record.cells):
            skipped.append(record)
    return points, skipped


def identifiers_of(
    results: Mapping[str, dict], gradescope_metadata: Path | None, mapping: Path | None, submitter_field: str
) -> tuple[dict[str, list[str]], str]:
    """Submission name -> the roster identifiers of its students, and why a submission may have none."""
    if mapping is not None:
        return mapping_identifiers(mapping), f"not in --mapping {mapping}"
    if gradescope_metadata is not None:
        found = gradescope_identifiers(gradescope_metadata, submitter_field)
        return found, f"not in --gradescope-metadata {gradescope_metadata}, or no :{submitter_field}: for it"
    return {name: [name] for name in results}, ""


@dataclass
class Layout:
    """Where things are in the export."""

    key: int  # the column identifying students
    target: int | None  # the column to fill; None: a new one, after the last
    header: str
    points_row: CsvRecord | None  # Canvas's Points Possible
    skipped: list[CsvRecord]  # rows that are no student's: Canvas's Points Possible and Manual Posting rows
    students: list[CsvRecord]


def layout(sheet: Sheet, lms: str, key: str, column: str, add_column: bool) -> Layout:
    points_row, skipped = canvas_rows(sheet) if lms == "canvas" else (None, [])
    key_index = sheet.column(key)
    if key_index is None:
        columns = ", ".join(repr(h) for h in sheet.header)
        raise GradebookError(
            f"--roster {sheet.path}: no column {key!r} to identify students by (--key; it has {columns})"
        )
    target = find_column(sheet, column)
    header = column.strip() if target is None else sheet.header[target]
    refuse_column(lms, sheet, header, key)
    if target is None and not (lms == "canvas" and add_column):
        assignments = [h for i, h in enumerate(sheet.header) if i != key_index and re.search(r"\(.*\)$", h)]
        add = (
            "; --add-column adds it (Canvas creates an assignment for a new column on import)"
            if lms == "canvas"
            else " (Moodle refuses a column it has no grade item for: add the item in Moodle and export again)"
        )
        listed = ", ".join(assignments) or "none"
        raise GradebookError(f"--column {column!r}: {sheet.path} has no such column (its assignments: {listed}){add}")
    if lms == "canvas" and points_row is None:
        raise GradebookError(f"--roster {sheet.path}: no `Points Possible` row, which every Canvas export has")
    width, special = len(sheet.header), {id(r) for r in skipped}
    for record in sheet.records[1:]:  # a cell of the column in each row: a new one goes after the last
        ragged = len(record.cells) != width if target is None else len(record.cells) <= target
        if not record.blank and ragged and (target is None or id(record) not in special):
            raise GradebookError(
                f"--roster {sheet.path} line {record.line}: {len(record.cells)} cells, the header {width}"
            )
    students = [r for r in sheet.records[1:] if id(r) not in special and not r.blank]
    return Layout(key_index, target, header, points_row, skipped, students)


def points_of(found: Layout, lms: str, points_possible: float | None, course_max: float) -> float:
    """What full marks are in the column: Canvas's Points Possible, else as given, else the course's maximum."""
    if found.target is None or lms != "canvas":
        return points_possible or course_max
    written = found.points_row.value(found.target)
    if "read only" in written:
        raise GradebookError(f"--column {found.header!r}: Canvas marks it read only (its Points Possible cell)")
    scale = parse_points(written)
    if scale is None:
        raise GradebookError(f"--roster: the Points Possible row has no points for {found.header!r}")
    if points_possible is not None and not math.isclose(points_possible, scale):
        raise GradebookError(
            f"--points-possible {points_possible:g}: {found.header!r} is worth {scale:g} in the export"
        )
    return scale


def canvas_name(sheet: Sheet, record: CsvRecord) -> str:
    """The student's name as Canvas sorts it: `Student`, or `LastName, FirstName` where the export splits it."""
    if sheet.header[:2] == ["LastName", "FirstName"]:
        return f"{record.value(0).strip()}, {record.value(1).strip()}"
    return record.value(0).strip()


def roster_index(sheet: Sheet, found: Layout, lms: str, key: str, filled: Filled) -> dict[str, CsvRecord]:
    """Each student's row by their identifier (case aside); rows that are no one's are passed over."""
    by_key: dict[str, CsvRecord] = {}
    for record in found.students:
        who = record.value(found.key)
        if lms == "canvas" and canvas_name(sheet, record) in CANVAS_TEST_STUDENT:
            filled.passed_over.append(f"Canvas's test student (line {record.line})")
        elif not who.strip():
            filled.passed_over.append(f"line {record.line} (no {key})")
        elif normal(who) in by_key:
            first = by_key[normal(who)].line
            raise GradebookError(f"--roster {sheet.path}: lines {first} and {record.line} have the same {key} {who!r}")
        else:
            by_key[normal(who)] = record
    return by_key


def why_not(name: str, data: Mapping, not_done: Mapping[str, str], lms: str, cell: Cell | None) -> str:
    """Why a student's one submission does not go into their cell: empty when it does."""
    held = stored(data).get("held")
    if name in not_done:
        return f"{name} has no completed grade ({not_done[name]})"
    if held:
        return f"{name} is held for the staff's review ({' '.join(held)}): read it, grade it with --release"
    kept = CANVAS_KEPT.get(cell.value.strip().upper()) if lms == "canvas" and cell is not None else None
    return f"{name}: {kept}; set it in Canvas if they should have a grade" if kept else ""


def fill(
    assignment: Assignment,
    results_dir: Path,
    lms: str,
    roster: Path,
    column: str,
    out: Path,
    key: str | None = None,
    gradescope_metadata: Path | None = None,
    mapping: Path | None = None,
    submitter_field: str = "email",
    add_column: bool = False,
    points_possible: float | None = None,
    encoding: str = "utf-8",
) -> Filled:
    """Fill `column` of the export `roster` with the grades in `results_dir` and write it to `out` at once
    (a new file renamed over it); raise GradebookError, writing nothing, where an input is not right."""
    if lms not in LMSES:
        raise GradebookError(f"--lms {lms}: one of {', '.join(LMSES)}")
    if submitter_field not in SUBMITTER_FIELDS:
        raise GradebookError(f"--submitter-field {submitter_field}: one of {', '.join(SUBMITTER_FIELDS)}")
    if Path(out).resolve() == Path(roster).resolve():
        raise GradebookError(f"--out {out} is the export itself: write a new file and keep the LMS's export")
    if points_possible is not None and not (math.isfinite(points_possible) and points_possible > 0):
        raise GradebookError(f"--points-possible {points_possible}: must be a number above 0")
    results = load_results(assignment, results_dir)
    course_max = sum(course_cases(assignment).values())  # each results file's, as load_results checked
    identifiers, unknown = identifiers_of(results, gradescope_metadata, mapping, submitter_field)
    sheet = read_sheet(roster, encoding)
    key = key or DEFAULT_KEY[lms]
    found = layout(sheet, lms, key, column, add_column)
    scale = points_of(found, lms, points_possible, course_max)
    filled = Filled(Path(out), found.header, scale, added_column=found.target is None)
    by_key = roster_index(sheet, found, lms, key, filled)

    graded: dict[int, list[str]] = {}
    for name in results:
        filled.unmatched.update({name: unknown} if not identifiers.get(name) else {})
        for ident in identifiers.get(name, []):
            record = by_key.get(normal(ident))
            if record is None:
                filled.unmatched[name] = f"{ident!r} is not in the roster's {key!r} column"
            else:
                graded.setdefault(id(record), []).append(name)

    not_done = unfinished(results, list(results))
    mark = decimal_mark(c.value for r in sheet.records[1:] for c in r.cells)
    d = sheet.delimiter
    edits = []
    if found.target is None:  # the new column: header, Points Possible, and a cell in every other row
        edits.append((sheet.records[0].end, sheet.records[0].end, d + quote(inert(found.header), d)))
        for record in found.skipped:
            if not record.blank:
                cell_text = points_text(scale, mark) if record is found.points_row else ""
                edits.append((record.end, record.end, d + quote(cell_text, d)))
    for record in found.students:
        who, names = record.value(found.key).strip(), graded.get(id(record), [])
        cell = record.cells[found.target] if found.target is not None else None
        why = f"{len(names)} submissions are theirs ({', '.join(names)})" if len(names) > 1 else ""
        if len(names) == 1:
            why = why_not(names[0], results[names[0]], not_done, lms, cell)
        if who and normal(who) in by_key and not names:
            filled.without_grade.append(f"{who} (line {record.line})")
        elif why:
            filled.kept[f"{who} (line {record.line})"] = why
        value = (
            points_text(scale * total(results[names[0]]) / course_max, mark) if len(names) == 1 and not why else None
        )
        if value is None:
            edits += [(record.end, record.end, d)] if cell is None else []
            continue
        filled.written += 1
        filled.changed += cell is None or number(cell.value) != number(value)
        if cell is None:
            edits.append((record.end, record.end, d + quote(value, d)))
        else:
            edits.append((cell.start, cell.end, quote(value, d, always=cell.quoted)))
    filled.data = sheet.encode(edits)
    try:
        write_atomic(out, filled.data)
    except OSError as err:
        raise GradebookError(f"--out {out}: cannot be written ({err.strerror})") from None
    return filled
