"""junit.xml as the JUnit readers that validate read it: the schemas of Jenkins xUnit and Ant, and GitLab's parser.

`junit_readers.xsd` (beside this file) is our own schema holding what both `junit-10.xsd` (jenkinsci/xunit-plugin)
and Ant's `JUnit.xsd` (windyroad/JUnit-Schema) require, the stricter where they differ; its header names each
constraint's source. The real schemas are not copied in: they were checked by hand against these files (see
docs/platforms.md, "JUnit XML"). GitLab's parser (lib/gitlab/ci/parsers/test/junit.rb) reads the file through
ActiveSupport's `Hash.from_xml`, where an element with text becomes its text and one without becomes the hash
of its attributes (what GitLab then shows as the failure), and where a `type` that names one of ActiveSupport's
types (`integer`, `string`, `yaml`...) is parsed as that type or refused.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from cs_basics.harness.grading.pipeline.grade import Grade
from cs_basics.harness.grading.pipeline.grade import TestResult as CaseResult
from cs_basics.harness.grading.writers.formats import WRITERS

SCHEMA = Path(__file__).with_name("junit_readers.xsd")
HOSTILE = "boom \ud800 \x00 \x1b[2J \u202e \ufffe end\nsecond line"
# ActiveSupport's XmlMini: the `type` attribute values it parses or refuses (PARSING, DISALLOWED_TYPES, arrays)
ACTIVESUPPORT_TYPES = {"symbol", "date", "datetime", "integer", "float", "decimal", "boolean", "string", "array"}
ACTIVESUPPORT_TYPES |= {"base64Binary", "file", "yaml", "hash", "dateTime"}


@pytest.fixture(scope="module")
def schema():
    return xmlschema.XMLSchema(str(SCHEMA))


def every_kind_of_case(assignment) -> Grade:
    """Passed, failed (with a hostile message and none at all), and not run, public and hidden alike."""
    tests = []
    for i, case in enumerate(assignment.cases):
        message = ["passed", HOSTILE, "not run: grading was stopped (SIGTERM)", ""][i % 4]
        tests.append(CaseResult(case, assignment.points[case.id], message == "passed", message, 0.5, printed=HOSTILE))
    assert {t.case.hidden for t in tests if t.output.startswith("not run")} == {True, False}
    return Grade(tests, 1.0, output=HOSTILE, notes=[HOSTILE], held=["softmax"])


def documents(assignment) -> dict[str, str]:
    """Every junit.xml the grader writes, for each `hidden_summary`."""
    junit, docs = WRITERS["junit"], {}
    for summary in ("each", "one_line"):
        course = type(assignment)(assignment.root, dict(assignment.table, hidden_summary=summary))
        docs[f"{summary}: grade"] = junit.write_grade(every_kind_of_case(assignment), course)
        docs[f"{summary}: placeholder"] = junit.write_placeholder(course, "grading did not finish")
        docs[f"{summary}: not gradable"] = junit.write_not_gradable(course, ["no file \ud800"])
    return docs


def gitlab_shows(outcome: ET.Element) -> object:
    """What GitLab stores as the case's `system_output`: Hash.from_xml makes an element with text its text, and
    one without the hash of its attributes."""
    return outcome.text if outcome.text and outcome.text.strip() else dict(outcome.attrib)


def test_every_junit_file_is_valid_against_what_the_readers_require(assignment, schema):
    for what, xml in documents(assignment).items():
        errors = list(schema.iter_errors(xml))
        assert not errors, f"{what}: {errors[0]}"


def test_the_schema_refuses_what_the_readers_refuse(assignment, schema):
    """Each fault of the file before this fix, put back into a valid file, is refused: the check can fail."""
    xml = documents(assignment)["each: grade"]
    faults = {
        "attributes on testsuites": xml.replace("<testsuites>", '<testsuites name="cs-basics" skipped="1">'),
        "properties in a testcase": xml.replace(
            '" time="0.500" />',
            '" time="0.500"><properties><property name="points" value="1" /></properties></testcase>',
            1,
        ),
        "a failure without text": xml.replace(">hidden case: failed</failure>", " />", 1),
        "no system-err": xml.replace("<system-err />", ""),
    }
    for fault, bad in faults.items():
        assert bad != xml, fault
        assert not schema.is_valid(bad), fault


def test_gitlab_shows_text_for_every_failure_and_a_case_not_run_is_skipped(assignment):
    for what, xml in documents(assignment).items():
        root = ET.fromstring(xml)
        assert root.tag == "testsuites" and not root.attrib, what
        for case in root.iter("testcase"):
            outcomes = [e for e in case if e.tag in ("failure", "skipped", "error")]
            assert len(outcomes) <= 1 and not case.findall("properties"), what
            for outcome in outcomes:
                assert isinstance(gitlab_shows(outcome), str), f"{what}: {case.get('name')} shows {outcome.attrib}"
                assert outcome.get("type") not in ACTIVESUPPORT_TYPES, what
    root = ET.fromstring(documents(assignment)["each: grade"])
    hidden = {c.id: c for c in assignment.cases if c.hidden}
    by_name = {case.get("name"): case for case in root.iter("testcase")}
    grade = every_kind_of_case(assignment)
    for t in grade.tests:
        element = by_name[f"{t.case.test}[{t.case.param}]"]
        if t.output.startswith("not run"):  # never ran: skipped, public or hidden
            assert element.find("skipped") is not None and element.find("failure") is None, t.case.id
        elif not t.passed:
            assert element.find("failure") is not None, t.case.id
        if t.case.id in hidden and not t.passed:
            assert gitlab_shows(element[0]) in ("hidden case: failed", "hidden case: not run"), t.case.id


def test_points_stay_where_the_readers_show_them(assignment):
    """No testcase may hold properties: each case's points are the suite's properties and its system-out."""
    grade = every_kind_of_case(assignment)
    root = ET.fromstring(WRITERS["junit"].write_grade(grade, assignment))
    suite = root.find("testsuite")
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    out = suite.find("system-out").text
    for t in grade.tests:
        name = f"{t.case.test}[{t.case.param}]"
        value = f"{round(t.score, 6)!r}/{round(t.max_score, 6)!r}"
        assert properties[f"points {name}"] == value and f"{name}: {value} points" in out, name
    assert float(properties["points"]) == pytest.approx(grade.score)
    assert float(properties["max_points"]) == pytest.approx(grade.max_score)
