"""`cs-basics gradebook`: a results folder into one column of Canvas's or Moodle's gradebook export.

The exports are built here as the LMSes' own code lays them out (Canvas: lib/gradebook_exporter.rb, read back
by app/models/gradebook_importer.rb; Moodle: grade/export's column names, read by grade/import/csv), cell by
cell as raw CSV text, so that the expected output is the same text with only the filled column's cells
changed: every other byte (byte order mark, line endings, quoting, names with quotes, commas, line breaks
and non-ASCII letters) must come back as it was.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from cs_basics.cli import main
from cs_basics.harness.course.gradebook import quote, records
from cs_basics.harness.course.regrade import stamp
from cs_basics.harness.grading.writers.results import placeholder

from .submissions import ROOT

BOM = b"\xef\xbb\xbf"
READ_ONLY = ["(read only)"] * 6
TOTALS = ["Current Points", "Final Points", "Current Score", "Unposted Current Score", "Final Score"]
TOTALS += ["Unposted Final Score"]


def results(assignment, share: float, held: tuple[str, ...] = (), error: str = "", fingerprint: bool = True) -> dict:
    """A results file as a batch writes it: the grader's own entry for every case (its placeholder's), each at
    `share` of its points, stamped as the batch stamps."""
    data = placeholder(assignment, "")
    for test in data["tests"]:
        test.update(score=test["max_score"] * share, status="passed" if share == 1 else "failed")
    data["score"] = sum(t["score"] for t in data["tests"])
    if held:
        data["extra_data"] = {"cs_basics": {"held": list(held)}}
    return stamp(data, {"fingerprint": "f", "parts": {}} if fingerprint and not error else None, error)


def write_results_folder(folder: Path, grades: dict[str, dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in grades.items():
        (folder / f"{name}.json").write_text(json.dumps(data))
    (folder / "scores.csv").write_text("submission,score\r\n")  # what a batch also leaves there: not results
    return folder


def gradebook(*args: object) -> int:
    return main(["gradebook", *map(str, args), "--project", str(ROOT)])


# ---------------------------------------------------------------- Canvas


def canvas_lines(sep: str, attention: dict[str, str]) -> list[str]:
    """Canvas's export: header, the Manual Posting row, Points Possible, students; `attention` gives the raw
    text of each student's cell in `Attention (7001)`, by SIS Login ID."""
    dec = "," if sep == ";" else "."
    points = [f"10{dec}00", f"5{dec}00"]

    def row(name: str, uid: str, login: str, section: str, quiz: str) -> str:
        return sep.join([name, uid, f"S{uid}", login, section, attention[login], quiz, *[f"0{dec}00"] * 6])

    return [
        sep.join(
            ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Attention (7001)", "Quiz 1 (7002)", *TOTALS]
        ),
        sep.join(["", "", "", "", "", "Manual Posting", "", *[""] * 6]),
        sep.join(["    Points Possible", "", "", "", "", *points, *READ_ONLY]),
        row('"O\'Brien, Zoë"', "101", "zoe", '"Lab A, Mon"', f"4{dec}00"),
        row('"Doe, ""JJ"" Jane"', "102", "jj", '"Lab\nB"', ""),  # a quote and a line break within cells
        row('"=""=HYPERLINK(""x"")"""', "103", "mallory", "A", ""),  # Canvas quotes a name starting with =
        row('"Held, Hal"', "104", "hal", "A", ""),
        row('"Unfinished, Una"', "105", "una", "A", ""),
        row('"Excused, Exa"', "106", "exa", "A", ""),
        row('"Nograde, Nog"', "107", "nog", "A", ""),
        row('"Student, Test"', "108", "testuser", "A", ""),
    ]


CANVAS_BEFORE = {"zoe": '"3.00"', "jj": "", "mallory": "", "hal": "4.00", "una": "", "exa": "EX", "nog": ""}
CANVAS_BEFORE["testuser"] = "N/A"


def canvas_bytes(sep: str, newline: str, bom: bool, attention: dict[str, str]) -> bytes:
    if sep == ";":
        attention = {k: v.replace(".", ",") for k, v in attention.items()}
    return (BOM if bom else b"") + (newline.join(canvas_lines(sep, attention)) + newline).encode()


@pytest.fixture
def course_results(assignment, tmp_path):
    """One results folder for the Canvas class: full, half, a quarter, held, unfinished, excused, a stranger."""
    return write_results_folder(
        tmp_path / "results",
        {
            "zoe": results(assignment, 1.0),
            "jj": results(assignment, 0.5),
            "mallory": results(assignment, 0.25),
            "hal": results(assignment, 1.0, held=("scaled_dot_product_attention",)),
            "una": results(assignment, 0.0, error="not graded: grading was stopped"),
            "exa": results(assignment, 1.0),
            "ghost": results(assignment, 1.0),
        },
    )


@pytest.mark.parametrize(
    "sep, newline, bom",
    [(",", "\n", False), (",", "\r\n", True), (";", "\r\n", True)],
    ids=["comma-LF", "comma-CRLF-BOM", "semicolon-decimal-comma-CRLF-BOM"],
)
def test_canvas_fills_one_column_and_keeps_every_other_byte(course_results, tmp_path, capsys, sep, newline, bom):
    roster, out = tmp_path / "export.csv", tmp_path / "import.csv"
    before = canvas_bytes(sep, newline, bom, CANVAS_BEFORE)
    roster.write_bytes(before)
    status = gradebook(course_results, "--lms", "canvas", "--roster", roster, "--column", "Attention", "--out", out)
    said = capsys.readouterr()
    # points scaled to the column's Points Possible (10; the course's maximum is 6), two decimals as Canvas
    # writes them; a quoted cell stays quoted; held, unfinished and excused cells stay as they were
    after = CANVAS_BEFORE | {"zoe": '"10.00"', "jj": "5.00", "mallory": "2.50"}
    assert out.read_bytes() == canvas_bytes(sep, newline, bom, after)
    assert roster.read_bytes() == before
    assert status == 1, said
    assert "3 grades in 'Attention (7001)'" in said.out
    for who in ("hal", "una", "exa", "nog", "ghost"):
        assert who in said.err
    assert "held for the staff's review (scaled_dot_product_attention)" in said.err
    assert "grading was stopped" in said.err
    assert "excused in Canvas" in said.err
    assert "ghost: 'ghost' is not in the roster's 'SIS Login ID' column" in said.err
    assert "testuser" not in said.err  # Canvas's test student is no one's grade
    text = out.read_bytes().removeprefix(BOM).decode()
    rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=sep))
    assert rows[3][0] == "O'Brien, Zoë" and rows[4][4] == "Lab\nB" and rows[5][0] == '="=HYPERLINK("x")"'


def test_canvas_adds_a_new_column_only_when_asked(assignment, tmp_path, capsys):
    folder = write_results_folder(tmp_path / "results", {"zoe": results(assignment, 1.0)})
    lines = [
        "Student,ID,SIS User ID,SIS Login ID,Section,Quiz 1 (7002)",
        "    Points Possible,,,,,5.00",
        '"O\'Brien, Zoë",101,S101,zoe,A,4.00',
        '"Doe, Jane",102,S102,jj,A,',
    ]
    roster, out = tmp_path / "export.csv", tmp_path / "import.csv"
    roster.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")
    args = [folder, "--lms", "canvas", "--roster", roster, "--column", "=Attention", "--out", out]
    assert gradebook(*args) == 2
    assert "--add-column adds it" in capsys.readouterr().err
    assert not out.exists()
    assert gradebook(*args, "--add-column") == 1  # jj has no grade
    # the new column goes last, in every row: its name kept inert in a spreadsheet, the Points Possible the
    # course's maximum, jj's cell empty
    expected = [lines[0] + ",'=Attention", lines[1] + ",6.00", lines[2] + ",6.00", lines[3] + ","]
    assert out.read_bytes().decode() == "\r\n".join(expected) + "\r\n"
    assert "jj (line 4)" in capsys.readouterr().err


def test_canvas_export_with_split_names_passes_over_its_test_student(assignment, tmp_path, capsys):
    """Canvas may export `LastName`, `FirstName` instead of `Student`; its Student View user is no one's grade."""
    folder = write_results_folder(tmp_path / "results", {"zoe": results(assignment, 0.5)})
    lines = [
        "LastName,FirstName,ID,SIS User ID,SIS Login ID,Section,Attention (7001)",
        "    Points Possible,,,,,,6.00",
        "O'Brien,Zoë,101,S101,zoe,A,",
        "Student,Test,999,,tstudent,A,",
    ]
    roster, out = tmp_path / "export.csv", tmp_path / "import.csv"
    roster.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert gradebook(folder, "--lms", "canvas", "--roster", roster, "--column", "Attention", "--out", out) == 0
    assert out.read_text(encoding="utf-8") == "\n".join([*lines[:2], lines[2] + "3.00", lines[3]]) + "\n"
    assert "Canvas's test student (line 4)" in capsys.readouterr().out


# ---------------------------------------------------------------- Moodle


MOODLE_HEADER = '"First name","Last name","ID number",Institution,Department,"Email address"'
MOODLE_HEADER += ',"Assignment: Attention (Real)","Assignment: Attention (Feedback)","Course total (Real)"'
MOODLE_HEADER += ',"Last downloaded from this course"'


def moodle_text(cells: dict[str, str]) -> str:
    rows = [
        ("Zoë", "O'Brien", "s1", "Zoe@Uni.edu"),  # emails matched whatever their case
        ('"Jane ""JJ"""', "Doe", "s2", "jj@uni.edu"),
        ("=1+1", "Formula", "s3", "eve@uni.edu"),
    ]
    lines = [MOODLE_HEADER]
    for first, last, number, email in rows:
        feedback = '"Good, mostly"'
        lines.append(f"{first},{last},{number},Uni,CS,{email},{cells[email]},{feedback},42.00,1732500000")
    return "\n".join(lines) + "\n"


def test_moodle_fills_the_grade_item_on_its_scale(assignment, tmp_path, capsys):
    folder = write_results_folder(
        tmp_path / "results",
        {
            "zoe@uni.edu": results(assignment, 1.0),
            "jj@uni.edu": results(assignment, 0.5),
            "eve@uni.edu": results(assignment, 0.0),
        },
    )
    roster, out = tmp_path / "grades.csv", tmp_path / "import.csv"
    before = {"Zoe@Uni.edu": "-", "jj@uni.edu": "1.00", "eve@uni.edu": "-"}
    roster.write_text(moodle_text(before), encoding="utf-8")
    args = [folder, "--lms", "moodle", "--roster", roster, "--column", "Assignment: Attention", "--out", out]
    assert gradebook(*args) == 0, capsys.readouterr()
    # the course's maximum (6) is the item's maximum grade by default; not the Feedback column
    assert out.read_text(encoding="utf-8") == moodle_text(
        {"Zoe@Uni.edu": "6.00", "jj@uni.edu": "3.00", "eve@uni.edu": "0.00"}
    )
    assert "3 grades in 'Assignment: Attention (Real)'" in capsys.readouterr().out
    assert gradebook(*args, "--points-possible", "100") == 0
    assert out.read_text(encoding="utf-8") == moodle_text(
        {"Zoe@Uni.edu": "100.00", "jj@uni.edu": "50.00", "eve@uni.edu": "0.00"}
    )


# ---------------------------------------------------------------- whose submission is whose


GRADESCOPE_METADATA = """\
submission_409:
  :submitters:
  - :name: Zoë O'Brien
    :sid: '101'
    :email: zoe@uni.edu
  :created_at: 2026-11-20 17:34:00.861687000 Z
  :score: 6.0
  :status: processed
submission_410:
  :submitters:
  - :name: Jane Doe
    :sid: '102'
    :email: jj@uni.edu
  - :name: Eve Formula
    :sid: 103
    :email: eve@uni.edu
  :created_at: 2026-11-21 09:00:00.000000000 Z
  :score: 3.0
submission_411:
  :submitters: []
"""


def test_gradescope_export_metadata_names_each_folders_submitters(assignment, tmp_path, capsys):
    """Gradescope's "Download submissions" export: folders `submission_<id>` and submission_metadata.yml (Ruby
    symbol keys); a group submission's grade goes to each of its submitters."""
    folder = write_results_folder(
        tmp_path / "results",
        {
            "submission_409": results(assignment, 1.0),
            "submission_410": results(assignment, 0.5),
            "submission_411": results(assignment, 1.0),
        },
    )
    metadata = tmp_path / "submission_metadata.yml"
    metadata.write_text(GRADESCOPE_METADATA, encoding="utf-8")
    roster, out = tmp_path / "grades.csv", tmp_path / "import.csv"
    roster.write_text(moodle_text({"Zoe@Uni.edu": "-", "jj@uni.edu": "-", "eve@uni.edu": "-"}), encoding="utf-8")
    common = ["--roster", roster, "--column", "Assignment: Attention (Real)", "--out", out]
    assert gradebook(folder, "--lms", "moodle", *common, "--gradescope-metadata", metadata) == 1
    assert out.read_text(encoding="utf-8") == moodle_text(
        {"Zoe@Uni.edu": "6.00", "jj@uni.edu": "3.00", "eve@uni.edu": "3.00"}
    )
    assert "submission_411: not in --gradescope-metadata" in capsys.readouterr().err
    # by student ID instead (the roster's ID number column; Gradescope may write a number unquoted)
    by_sid = ["--gradescope-metadata", metadata, "--submitter-field", "sid", "--key", "ID number"]
    other = moodle_text({"Zoe@Uni.edu": "-", "jj@uni.edu": "-", "eve@uni.edu": "-"})
    other = other.replace(",s1,", ",101,").replace(",s2,", ",102,").replace(",s3,", ",103,")
    roster.write_text(other, encoding="utf-8")
    assert gradebook(folder, "--lms", "moodle", *common, *by_sid) == 1
    assert out.read_text(encoding="utf-8") == other.replace(",-,", ",6.00,", 1).replace(",-,", ",3.00,")


def test_a_mapping_file_names_each_submissions_student_and_two_submissions_for_one_are_not_chosen_between(
    assignment, tmp_path, capsys
):
    folder = write_results_folder(
        tmp_path / "results",
        {"team-a": results(assignment, 1.0), "late-zoe": results(assignment, 0.5), "team-b": results(assignment, 0.25)},
    )
    mapping = tmp_path / "who.csv"
    mapping.write_text(
        "submission,email\nteam-a,zoe@uni.edu\nlate-zoe,ZOE@uni.edu\nteam-b,jj@uni.edu\nteam-b,eve@uni.edu\n"
    )
    roster, out = tmp_path / "grades.csv", tmp_path / "import.csv"
    roster.write_text(moodle_text({"Zoe@Uni.edu": "1.00", "jj@uni.edu": "-", "eve@uni.edu": "-"}), encoding="utf-8")
    args = [folder, "--lms", "moodle", "--roster", roster, "--column", "Assignment: Attention", "--out", out]
    assert gradebook(*args, "--mapping", mapping) == 1
    assert out.read_text(encoding="utf-8") == moodle_text(
        {"Zoe@Uni.edu": "1.00", "jj@uni.edu": "1.50", "eve@uni.edu": "1.50"}
    )
    assert "2 submissions are theirs (late-zoe, team-a)" in capsys.readouterr().err


# ---------------------------------------------------------------- bad input: an error, nothing written


SMALL_CANVAS = "Student,ID,SIS Login ID,Section,Attention (7001)\n    Points Possible,,,,10.00\n"


def another_course(assignment) -> dict:
    data = results(assignment, 1.0)
    data["tests"][0]["name"] = "test_convolution[stride_2]"
    return data


@pytest.mark.parametrize(
    "change, says",
    [
        (
            lambda a, r, e: (r / "zoe.json").write_text(json.dumps(another_course(a))),
            "zoe.json: not results of this course (test_convolution[stride_2]",
        ),
        (
            lambda a, r, e: e.write_text("Student,ID,Section,Attention (7001)\n    Points Possible,,,10\n"),
            "no column 'SIS Login ID' to identify students",
        ),
        (lambda a, r, e: e.unlink(), "export.csv: no such file"),
        (lambda a, r, e: [p.unlink() for p in r.iterdir()] and r.rmdir(), "is not a folder of results files"),
        (lambda a, r, e: e.write_text("Name,Email\nZoe,zoe\n"), "not a Canvas gradebook export"),
        (
            lambda a, r, e: e.write_bytes(b"Student,ID,SIS Login ID,Section\n\xff\xfe,1,zoe,A\n"),
            "not utf-8 text (byte 32)",
        ),
        (
            lambda a, r, e: e.write_text('Student,ID,SIS Login ID,Section,Attention (7001)\n"Zoe,1,zoe,A,\n'),
            "line 2: a quoted cell never ends",
        ),
        (
            lambda a, r, e: e.write_text(f"{SMALL_CANVAS}A,1,zoe,S,\nB,2,ZOE,S,\n"),
            "lines 3 and 4 have the same SIS Login ID 'ZOE'",
        ),
        (lambda a, r, e: e.write_text(f"{SMALL_CANVAS}A,1,zoe,S\n"), "line 3: 4 cells, the header 5"),
    ],
    ids=[
        *("another-course", "no-key-column", "no-roster", "no-results", "not-canvas", "not-utf8", "open-quote"),
        *("same-student-twice", "short-row"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(assignment, tmp_path, capsys, change, says):
    folder = write_results_folder(tmp_path / "results", {"zoe": results(assignment, 1.0)})
    roster, out = tmp_path / "export.csv", tmp_path / "import.csv"
    roster.write_bytes(canvas_bytes(",", "\n", False, CANVAS_BEFORE))
    out.write_text("an earlier import, kept whole\n")
    change(assignment, folder, roster)
    assert gradebook(folder, "--lms", "canvas", "--roster", roster, "--column", "Attention (7001)", "--out", out) == 2
    assert says in capsys.readouterr().err
    assert out.read_text() == "an earlier import, kept whole\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no half-written temporary file


@pytest.mark.parametrize(
    "column, extra, says",
    [
        ("Current Score", [], "Canvas computes it"),
        ("SIS Login ID", [], "it identifies students"),
        ("Homework 9", [], "has no such column (its assignments: Attention (7001), Quiz 1 (7002))"),
        ("Attention", ["--points-possible", "6"], "--points-possible 6: 'Attention (7001)' is worth 10 in the export"),
        ("Attention", ["--out", "SAME"], "is the export itself"),
    ],
)
def test_a_column_no_grade_may_go_into_is_refused(assignment, tmp_path, capsys, column, extra, says):
    folder = write_results_folder(tmp_path / "results", {"zoe": results(assignment, 1.0)})
    roster, out = tmp_path / "export.csv", tmp_path / "import.csv"
    roster.write_bytes(canvas_bytes(",", "\n", False, CANVAS_BEFORE))
    extra = [str(roster) if x == "SAME" else x for x in extra]
    args = [folder, "--lms", "canvas", "--roster", roster, "--column", column, "--out", out, *extra]
    if "--out" in extra:
        args = [folder, "--lms", "canvas", "--roster", roster, "--column", column, *extra]
    assert gradebook(*args) == 2
    assert says in capsys.readouterr().err
    assert not out.exists()
    assert roster.read_bytes() == canvas_bytes(",", "\n", False, CANVAS_BEFORE)


def test_moodle_refuses_a_column_it_has_no_grade_item_for(assignment, tmp_path, capsys):
    folder = write_results_folder(tmp_path / "results", {"zoe@uni.edu": results(assignment, 1.0)})
    roster, out = tmp_path / "grades.csv", tmp_path / "import.csv"
    roster.write_text(moodle_text({"Zoe@Uni.edu": "-", "jj@uni.edu": "-", "eve@uni.edu": "-"}), encoding="utf-8")
    for column, says in [
        ("Assignment: Homework 9", "add the item in Moodle and export again"),
        ("Assignment: Attention (Feedback)", "Moodle reads it as feedback text"),
    ]:
        args = [folder, "--lms", "moodle", "--roster", roster, "--column", column, "--out", out, "--add-column"]
        assert gradebook(*args) == 2
        assert says in capsys.readouterr().err
        assert not out.exists()


@pytest.mark.parametrize(
    "text",
    [
        'a,"b\r\nc",d\r\n,,\r\n"",x""y,"q""q"\r\n',
        "a;b\rc;d\r",  # old Mac line breaks
        '"only, one"',  # no line break at the end
        'h1,h2\n"multi\nline\nname",2\n\nlast,""\n',  # a blank line
    ],
)
def test_the_export_is_read_cell_for_cell_as_pythons_csv_reads_it(text):
    delimiter = ";" if ";" in text else ","
    ours = [[c.value for c in r.cells] for r in records(text, delimiter, "test.csv") if not r.blank]
    theirs = [row for row in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter) if row]
    assert ours == theirs
    # and each cell's span is exactly its text in the file
    for record in records(text, delimiter, "test.csv"):
        for cell in record.cells:
            raw = text[cell.start : cell.end]
            assert raw == (quote(cell.value, delimiter, always=True) if cell.quoted else cell.value)


@pytest.mark.parametrize("where", ["a-folder", "under-a-file"])
def test_an_out_that_cannot_be_written_is_named_and_leaves_no_temporary_file(assignment, tmp_path, capsys, where):
    folder = write_results_folder(tmp_path / "results", {"zoe": results(assignment, 1.0)})
    roster = tmp_path / "export.csv"
    roster.write_bytes(canvas_bytes(",", "\n", False, CANVAS_BEFORE))
    (tmp_path / "taken").mkdir()
    (tmp_path / "plain").write_text("kept")
    out = tmp_path / "taken" if where == "a-folder" else tmp_path / "plain" / "import.csv"
    assert gradebook(folder, "--lms", "canvas", "--roster", roster, "--column", "Attention (7001)", "--out", out) == 2
    err = capsys.readouterr().err
    assert f"--out {out}: cannot be written" in err and "Traceback" not in err
    assert [p.name for p in tmp_path.rglob(".*")] == []  # no half-written temporary file
    assert (tmp_path / "plain").read_text() == "kept" and list((tmp_path / "taken").iterdir()) == []
