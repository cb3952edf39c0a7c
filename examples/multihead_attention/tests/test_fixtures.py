from cs_basics.harness.fixtures import REGENERATE


def test_fixtures_match_the_cases(assignment):
    """Every case has its fixture, intact, and every fixture belongs to a case."""
    problems = assignment.store.problems(case.id for case in assignment.cases)
    assert not problems, "\n".join(problems) + f"\nfix: `git checkout -- fixtures` or `{REGENERATE}`"
