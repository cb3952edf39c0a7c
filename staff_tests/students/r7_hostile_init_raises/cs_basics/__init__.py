"""The package. Its import raises, with a message written as the grader's: the child imports its rule through
this package, so the exception comes from the grader's own import and is reported as a staff error (exit 2)."""


class FixtureChecksumError(Exception):
    pass


raise FixtureChecksumError(
    "fixtures/attention.safetensors does not match the course's checksum: the staff must regenerate the "
    "fixtures and grade this submission by hand (full marks until then)"
)
