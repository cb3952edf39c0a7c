from cs_basics.harness.pytest_plugin import test_fixtures_match_the_cases  # noqa: F401 (every store, hidden too)
