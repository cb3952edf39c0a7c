"""Grades as JUnit XML, the report CodeGrade, GitLab, Jenkins and most CI read.

The layout is Jenkins' and Ant's, as pytest's `--junitxml` writes it: `testsuites` > `testsuite` >
one `testcase` per graded case (`classname` the problem, `name` the case, `time` its seconds), with
a `failure` holding the message pytest and Gradescope give, or `skipped` for a case that was not run
(a stop, a problem stuck twice: a message starting `not run`; the total time limit's are failures),
and the points as `properties` (`points`, `max_points`; the suite's add up).
A JUnit reader shows every test to whoever reads the report, with no per-test visibility, so hidden
cases are written as PrairieLearn shows them (`hidden_summary`: each with its name, points and
pass/fail, or one line for all), never with what they printed or raised.

XML 1.0 cannot hold most control characters, so a submission's text passes through `printable`
(as `cat -v` shows them) before it is written.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from cs_basics.harness.cases import Case
from cs_basics.harness.config import Assignment
from cs_basics.harness.grading.grade import Grade
from cs_basics.harness.grading.prairielearn import MESSAGE_BYTES, OUTPUT_BYTES, hidden_summary, summary_until_graded
from cs_basics.harness.grading.results import cut_to_bytes, not_gradable_why, printable, test_name

NOT_RUN = "not run"  # how the grader's message for a case it never ran begins
NOT_XML = re.compile("[\ufffe\uffff\ud800-\udfff]")  # code points XML 1.0 refuses besides the controls


def xml_text(text: str, limit: int = MESSAGE_BYTES) -> str:
    return NOT_XML.sub("\ufffd", printable(cut_to_bytes(text, limit)))


def _properties(parent: ET.Element, **values: float) -> None:
    props = ET.SubElement(parent, "properties")
    for name, value in values.items():
        ET.SubElement(props, "property", name=name, value=repr(round(value, 6)))  # results.json's digits


def _case(suite: ET.Element, case: Case, points: float, most: float, passed: bool, message: str, seconds: float):
    seconds = 0.0 if case.hidden else seconds  # a hidden case's time is what it computed (it may sleep an input)
    element = ET.SubElement(suite, "testcase", classname=case.problem, name=test_name(case), time=f"{seconds:.3f}")
    _properties(element, points=points, max_points=most)
    if passed:
        return
    if case.hidden:
        ET.SubElement(element, "failure", message="hidden case: failed")
    elif message.startswith(NOT_RUN):
        ET.SubElement(element, "skipped", message=xml_text(message.splitlines()[0], 4096))
    else:
        failure = ET.SubElement(element, "failure", message=xml_text(message.splitlines()[0] if message else "", 4096))
        failure.text = xml_text(message)


def _document(rows: list[tuple[Case, float, float, bool, str, float]], summary: str, printed: str, held=()):
    """rows: (case, points, max_points, passed, message, seconds). The suite's time is the public cases'
    alone: the whole grading's would tell how long the hidden cases took."""
    root = ET.Element("testsuites", name="cs-basics")
    suite = ET.SubElement(root, "testsuite", name="cs-basics grade")
    _properties(suite, points=sum(r[1] for r in rows), max_points=sum(r[2] for r in rows))
    if held:  # problems held for the staff's review (Gradescope's extra_data holds them)
        ET.SubElement(suite.find("properties"), "property", name="held", value=",".join(held))
    hidden = [r for r in rows if r[0].hidden]
    for row in rows:
        if not row[0].hidden or summary == "each":
            _case(suite, *row)
    if hidden and summary == "one_line":
        element = ET.SubElement(suite, "testcase", classname="hidden", name="hidden cases", time="0.000")
        _properties(element, points=sum(r[1] for r in hidden), max_points=sum(r[2] for r in hidden))
        passed = sum(1 for r in hidden if r[3])
        if passed < len(hidden):
            ET.SubElement(element, "failure", message=f"{passed} of {len(hidden)} hidden cases passed")
    if printed.strip():
        ET.SubElement(suite, "system-out").text = xml_text(printed, OUTPUT_BYTES)
    cases = suite.findall("testcase")
    counts = {
        "tests": len(cases),
        "failures": sum(1 for c in cases if c.find("failure") is not None),
        "errors": 0,
        "skipped": sum(1 for c in cases if c.find("skipped") is not None),
    }
    seconds = sum(r[5] for r in rows if not r[0].hidden)
    for element in (root, suite):
        element.attrib.update({k: str(v) for k, v in counts.items()}, time=f"{seconds:.3f}")
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
