"""The `cs-basics` command for course staff."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_fixtures(args: argparse.Namespace) -> int:
    from cs_basics.harness.config import Assignment
    from cs_basics.harness.generate import regenerate

    assignment = Assignment.find(args.project)
    regenerate(assignment)
    for store, cases in assignment.stores():
        size = sum(store.path(c.id).stat().st_size for c in cases)
        print(f"wrote {len(cases)} fixtures ({size / 1024:.0f} KiB) and the manifest to {store.root}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cs-basics", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    fixtures = sub.add_parser("fixtures", help="regenerate the stored fixtures from the float64 oracle")
    fixtures.add_argument("--project", type=Path, default=None, help="assignment folder (default: the nearest)")
    fixtures.set_defaults(func=cmd_fixtures)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
