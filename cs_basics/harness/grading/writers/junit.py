"""Grades as JUnit XML, the report CodeGrade, GitLab, Jenkins and most CI read.

The layout is the one both schemas CI readers validate with accept: Jenkins xUnit's `junit-10.xsd`
(jenkinsci/xunit-plugin) and Ant's `JUnit.xsd` (windyroad/JUnit-Schema). So: `testsuites` with no
attributes (Ant allows none) > one `testsuite` with every attribute Ant requires (`name`, `package`, `id`,
`timestamp`, `hostname`, `tests`, `failures`, `errors`, `time`; `skipped`) holding, in Ant's order,
`properties` (the points: the suite's total `points` and `max_points`, and one `points <case>` = `points/most`
per case shown; neither schema allows `properties` inside a `testcase`), one `testcase` per graded case
(`classname` the problem, `name` the case, `time` its seconds), then `system-out` (each case's points as a
line, and what the code printed before the first hidden case) and `system-err` (empty; Ant requires both).
A failed case has one `failure` (`message` its first line, `type`, the whole message as its text: GitLab
shows the text alone, and a failure without one as the hash of its attributes); a case that was not run (a
stop, a problem stuck twice, an earlier failure that ended the process: a message starting `not run`) is
`skipped`, with text too; the total time limit's are failures.
A JUnit reader shows every test to whoever reads the report, with no per-test visibility, so hidden
cases are written as PrairieLearn shows them (`hidden_summary`: each with its name, points and
pass/fail, or one line for all), never with what they printed or raised.

XML 1.0 cannot hold most control characters, lone surrogates or U+FFFE/U+FFFF, so every text passes
through `printable` (as `cat -v` shows them) before it is written.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

from cs_basics.harness.cases import Case
from cs_basics.harness.config import Assignment
from cs_basics.harness.grading.pipeline.grade import Grade
from cs_basics.harness.grading.pipeline.runs import hidden_refused, stopped_for_time
from cs_basics.harness.grading.writers.prairielearn import (
    MESSAGE_BYTES,
    OUTPUT_BYTES,
    hidden_summary,
    hidden_verdict,
    over_time_note,
    summary_until_graded,
)
from cs_basics.harness.grading.writers.results import cut_to_bytes, not_gradable_why, printed_section, test_name
from cs_basics.harness.text import printable

NOT_RUN = "not run"  # how the grader's message for a case it never ran begins
HOSTNAME = "localhost"  # Ant's `hostname` is required; the grading machine's own name is nobody's business
NOT_RUN_HIDDEN = "hidden case: not run"


def xml_text(text: str, limit: int = MESSAGE_BYTES) -> str:
    return printable(cut_to_bytes(printable(text), limit))


def points(value: float) -> str:
    return repr(round(value, 6))  # results.json's digits


def _property(suite: ET.Element, name: str, value: str) -> None:
    ET.SubElement(suite.find("properties"), "property", name=name, value=value)


def _result(element: ET.Element, kind: str, message: str, text: str, **attributes: str) -> None:
    """A `failure` or `skipped` whose text is never empty: GitLab shows the text alone."""
    result = ET.SubElement(element, kind, message=xml_text(message, 4096), **attributes)
    result.text = xml_text(text or message)


def _case(suite: ET.Element, case: Case, got: float, most: float, passed: bool, message: str, seconds: float):
    seconds = 0.0 if case.hidden else seconds  # a hidden case's time is what it computed (it may sleep an input)
    name = test_name(case)
    element = ET.SubElement(suite, "testcase", classname=case.problem, name=name, time=f"{seconds:.3f}")
    _property(suite, f"points {name}", f"{points(got)}/{points(most)}")
    if passed:
        return
    if case.hidden:  # nothing of what it printed or raised: only whether it ran (and ran out of time)
        if message.startswith(NOT_RUN):
            said = stopped_for_time(message) or hidden_refused(message)
            verdict = hidden_verdict(False, message) if said else NOT_RUN_HIDDEN
            _result(element, "skipped", verdict, verdict)
        else:
            verdict = hidden_verdict(False, message)
            _result(element, "failure", verdict, verdict, type="hidden")
    elif message.startswith(NOT_RUN):
        _result(element, "skipped", message.splitlines()[0], message)
    else:
        first = message.splitlines()[0] if message.strip() else "failed"
        _result(element, "failure", first, message, type="failed")


def _hidden_line(suite: ET.Element, hidden: list[tuple]) -> None:
    """`hidden_summary = "one_line"`: one testcase for every hidden case."""
    element = ET.SubElement(suite, "testcase", classname="hidden", name="hidden cases", time="0.000")
    got, most = sum(r[1] for r in hidden), sum(r[2] for r in hidden)
    _property(suite, "points hidden cases", f"{points(got)}/{points(most)}")
    passed = sum(1 for r in hidden if r[3])
    not_run = sum(1 for r in hidden if not r[3] and r[4].startswith(NOT_RUN))
    over = [stopped for r in hidden if not r[3] and (stopped := stopped_for_time(r[4]))]
    line = f"{passed} of {len(hidden)} hidden cases passed" + over_time_note(over)
    if passed + not_run < len(hidden):
        _result(element, "failure", line, line, type="hidden")
    elif not_run:
        _result(element, "skipped", f"{line}; {not_run} not run", f"{line}; {not_run} not run")


def _document(rows: list[tuple[Case, float, float, bool, str, float]], summary: str, printed: str, held=()):
    """rows: (case, points, max_points, passed, message, seconds). The suite's time is the public cases'
    alone: the whole grading's would tell how long the hidden cases took."""
    root = ET.Element("testsuites")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())  # Ant's pattern: no zone, no fraction (UTC)
    suite = ET.SubElement(root, "testsuite", name="cs-basics grade", package="cs-basics", id="0", timestamp=stamp)
    suite.set("hostname", HOSTNAME)
    ET.SubElement(suite, "properties")
    _property(suite, "points", points(sum(r[1] for r in rows)))
    _property(suite, "max_points", points(sum(r[2] for r in rows)))
    if held:  # problems held for the staff's review (Gradescope's extra_data holds them)
        _property(suite, "held", xml_text(",".join(held)))
    hidden = [r for r in rows if r[0].hidden]
    for row in rows:
        if not row[0].hidden or summary == "each":
            _case(suite, *row)
    if hidden and summary == "one_line":
        _hidden_line(suite, hidden)
    shown = [p for p in suite.find("properties") if p.get("name").startswith("points ")]
    lines = [f"{p.get('name').removeprefix('points ')}: {p.get('value')} points" for p in shown]
    out = "\n".join(["Points per case:", *lines, "", printed_section(xml_text(printed, OUTPUT_BYTES))]).strip()
    ET.SubElement(suite, "system-out").text = out + "\n"
    ET.SubElement(suite, "system-err")
    cases = suite.findall("testcase")
    counts = {
        "tests": len(cases),
        "failures": sum(1 for c in cases if c.find("failure") is not None),
        "errors": 0,
        "skipped": sum(1 for c in cases if c.find("skipped") is not None),
    }
    seconds = sum(r[5] for r in rows if not r[0].hidden)
    suite.attrib.update({k: str(v) for k, v in counts.items()}, time=f"{seconds:.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def junit_xml(grade: Grade, assignment: Assignment) -> str:
    rows = [(t.case, t.score, t.max_score, t.passed, t.output, t.seconds) for t in grade.tests]
    return _document(rows, hidden_summary(assignment), grade.output, grade.held)


def placeholder_xml(assignment: Assignment, why: str) -> str:
    summary = summary_until_graded(assignment)
    rows = [(case, 0.0, assignment.points[case.id], False, why, 0.0) for case in assignment.cases]
    return _document(rows, summary, "")


def not_gradable_xml(assignment: Assignment, errors: list[str]) -> str:
    return placeholder_xml(assignment, not_gradable_why(errors))
