"""The students' commands, run as they run them: what they select and what a failure says."""

import os
import re
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_run(*args, cwd=ROOT):
    env = {k: v for k, v in os.environ.items() if k != "CS_BASICS_DEVICE"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def collected(*args):
    """What the command selects among the course's tests (the handout's testpaths; collecting the staff's suite too
    costs a minute and selects nothing of the students')."""
    result = pytest_run("--collect-only", "-q", *args, "tests", "hidden")
    assert result.returncode == 0, result.stdout + result.stderr
    return {line for line in result.stdout.splitlines() if "::" in line}


def test_points_marker_selects_exactly_the_graded_cases(assignment):
    ids = collected("-m", "points")
    expected = {f"{_module(case)}::{case.test}[{case.param}]" for case in assignment.cases}
    assert ids == expected
    totals = {}
    for case in assignment.cases:  # exactly, in the decimals results.json carries
        totals[case.problem] = totals.get(case.problem, 0) + Fraction(str(assignment.points[case.id]))
    assert totals == {"softmax": 1, "scaled_dot_product_attention": 5}


def _module(case):
    if case.hidden:
        return "hidden/test_hidden.py"
    return "tests/test_softmax.py" if case.problem == "softmax" else "tests/test_attention.py"


def test_the_two_student_commands_select_3d_and_4d_cases():
    three_d = collected("-k", "test_scaled_dot_product_attention")
    four_d = collected("-k", "test_4d_scaled_dot_product_attention")
    assert three_d and four_d and not three_d & four_d
    assert all("::test_4d_scaled_dot_product_attention[" in i for i in four_d)
    assert any("::test_scaled_dot_product_attention[mask]" in i for i in three_d)
    assert any("::test_scaled_dot_product_attention_mask[all_false_rows]" in i for i in three_d)


def test_header_names_the_device_chosen_by_the_option():
    result = pytest_run("--collect-only", "--device", "meta", "tests/test_softmax.py")
    assert "cs_basics: device meta (torch " in result.stdout


def test_a_device_that_is_not_there_is_a_usage_error():
    result = pytest_run("--collect-only", "--device", "tpu", "tests/test_softmax.py")
    assert result.returncode == 4 and "unknown device 'tpu'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture
def project_copy(tmp_path):
    for name in ("cs_basics", "tests", "fixtures"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def test_a_wrong_scale_fails_with_a_message_that_says_what_to_fix(project_copy):
    functional = project_copy / "cs_basics" / "nn" / "functional.py"
    source = functional.read_text()
    functional.write_text(source.replace("/ math.sqrt(d_k)", "/ d_k"))
    result = pytest_run("-q", "-k", "test_scaled_dot_product_attention and no_mask", cwd=project_copy)
    assert result.returncode == 1, result.stdout
    out = result.stdout
    assert "scaled_dot_product_attention-no_mask: out: 3072 of 3072 elements differ" in out
    assert "worst absolute error" in out and "worst relative error" in out
    assert "rerun: uv run pytest -k 'test_scaled_dot_product_attention and no_mask'" in out
    assert "  This looks like: the scores are divided by d_k, not by its square root" in out
    assert "(known mistake: scale_by_d_k)" in out


def failure_sections(stdout: str) -> dict[str, list[str]]:
    """Each failure's lines in pytest's report, by its test id: what follows its `____ test[param] ____` header."""
    sections, lines = {}, None
    for line in stdout.splitlines():
        header = re.fullmatch(r"_{3,} (\S+) _{3,}", line)
        if header:
            sections[header[1]] = lines = []
        elif re.match(r"={3,} ", line):
            lines = None
        elif lines is not None:
            lines.append(line)
    return sections


HARNESS_SHOWN = ("case = Case(", "CheckContext(", "pytest_plugin.py", "cases.py:", "run_graded_case = ", "hidden")


def test_a_wrong_value_shows_its_message_first_with_no_frame_or_repr_of_the_harness(project_copy):
    """Scores divided by d_k: the failure's report is the message, the diagnosis and the rerun line, nothing before."""
    functional = project_copy / "cs_basics" / "nn" / "functional.py"
    functional.write_text(functional.read_text().replace("/ math.sqrt(d_k)", "/ d_k"))
    result = pytest_run("-k", "test_scaled_dot_product_attention and no_mask", cwd=project_copy)
    assert result.returncode == 1, result.stdout
    sections = failure_sections(result.stdout)
    assert set(sections) == {
        "test_scaled_dot_product_attention[no_mask]",
        "test_scaled_dot_product_attention[grad_no_mask]",
    }
    for test, lines in sections.items():
        param = test.split("[")[1].rstrip("]")
        assert lines[0].startswith(f"scaled_dot_product_attention-{param}: out: "), lines
        assert lines[1].startswith("  worst absolute error") and lines[2].startswith("  worst relative error"), lines
        assert lines[3].startswith("  This looks like: the scores are divided by d_k"), lines
        assert lines[4] == f"  rerun: uv run pytest -k 'test_scaled_dot_product_attention and {param}'", lines
        assert not any(shown in line for line in lines for shown in HARNESS_SHOWN), lines


def test_a_crash_shows_the_students_frames_then_the_sentences_and_the_rerun_line(project_copy):
    """The thin test's frame (`case = Case(...)`) and the harness's are hidden; the rerun line ends the notes."""
    functional = project_copy / "cs_basics" / "nn" / "functional.py"
    crash = "\n\n_reference = scaled_dot_product_attention\n\n\ndef scaled_dot_product_attention(Q, K, V, mask=None):\n"
    functional.write_text(functional.read_text() + crash + "    keep = ~mask\n    return _reference(Q, K, V, ~keep)\n")
    result = pytest_run("-k", "test_scaled_dot_product_attention and no_mask and not grad", cwd=project_copy)
    assert result.returncode == 1, result.stdout
    (lines,) = failure_sections(result.stdout).values()
    assert not any(shown in line for line in lines for shown in HARNESS_SHOWN), "\n".join(lines)
    assert any(line.startswith("tests/adapters.py:") for line in lines), "\n".join(lines)  # the student's frames
    errors = [line.removeprefix("E       ") for line in lines if line.startswith("E ")]
    assert errors[0] == "TypeError: bad operand type for unary ~: 'NoneType'", errors
    assert errors[1].startswith("This looks like: mask is optional"), errors
    assert errors[-1] == "rerun: uv run pytest -k 'test_scaled_dot_product_attention and no_mask'", errors


def test_a_known_crash_gets_its_sentence_under_the_traceback(project_copy):
    functional = project_copy / "cs_basics" / "nn" / "functional.py"
    crash = "\n\n_reference = scaled_dot_product_attention\n\n\ndef scaled_dot_product_attention(Q, K, V, mask=None):\n"
    functional.write_text(functional.read_text() + crash + "    keep = ~mask\n    return _reference(Q, K, V, ~keep)\n")
    result = pytest_run("-q", "-k", "test_scaled_dot_product_attention and no_mask", cwd=project_copy)
    assert result.returncode == 1, result.stdout
    assert "E       TypeError: bad operand type for unary ~: 'NoneType'\nE       This looks like: mask is optional" in (
        result.stdout
    )
    assert "(known mistake: mask_none)" in result.stdout


def test_an_altered_fixture_fails_naming_the_file_and_the_fix(project_copy):
    fixture = project_copy / "fixtures" / "softmax-last_dim.safetensors"
    fixture.write_bytes(fixture.read_bytes().replace(b"softmax", b"SOFTMAX", 1))
    result = pytest_run("-q", "-k", "test_softmax or test_fixtures", cwd=project_copy)
    assert result.returncode == 1
    assert "softmax-last_dim.safetensors does not match its checksum in MANIFEST.json" in result.stdout
    assert "uv run cs-basics fixtures" in result.stdout


def test_code_placed_in_an_adapter_fails_as_the_grader_would_fail_it():
    """The grader runs the course's tests/adapters.py: a solution written in an adapter is lost there."""
    from types import SimpleNamespace

    from cs_basics.harness.pytest_plugin import thick_adapter

    def run_softmax(in_features, dim):
        """A docstring and one call: the course's adapter."""
        return in_features.softmax(dim)

    def run_scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ K.mT
        return scores.softmax(-1) @ V

    adapters = SimpleNamespace(
        run_softmax=run_softmax, run_scaled_dot_product_attention=run_scaled_dot_product_attention
    )
    assert thick_adapter(adapters, "run_softmax") is None
    message = thick_adapter(adapters, "run_scaled_dot_product_attention")
    assert "run_scaled_dot_product_attention holds more than the one line" in message
    assert "the grader runs the course's own tests/adapters.py" in message
