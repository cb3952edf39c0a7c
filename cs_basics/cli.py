"""The `cs-basics` command for course staff."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_fixtures(args: argparse.Namespace) -> int:
    from cs_basics.harness.config import Assignment
    from cs_basics.harness.generate import regenerate

    assignment = Assignment.find(args.project)
    written = regenerate(assignment)
    size = sum(assignment.store.path(c).stat().st_size for c in written)
    print(f"wrote {len(written)} fixtures ({size / 1024:.0f} KiB) and the manifest to {assignment.store.root}")
    return 0


def cmd_experiments(args: argparse.Namespace) -> int:
    from cs_basics.experiments import run

    run(args.out, seed=args.seed, quick=args.quick, root=args.project)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cs_basics import bench

    config = bench.Config(device=args.device, dtype=args.dtype, batch=args.batch, heads=args.heads)
    config.head_dim, config.seqs, config.repeats, config.memory = args.head_dim, args.seq, args.repeats, args.memory
    result = bench.run(config, args.project)
    Console().print(bench.table(result))
    if args.json:
        bench.write_json(result, args.json)
    if args.plot:
        bench.plot(result, args.plot)
    return 0


def add_study_commands(sub) -> None:
    """`experiments` and `bench`: the course's experiments as figures, and the benchmark."""
    exp = sub.add_parser("experiments", help="the attention experiments as PNG figures and a summary")
    exp.add_argument("--out", type=Path, default=Path("figures"), help="folder for the PNGs (default: figures)")
    exp.add_argument("--seed", type=int, default=0)
    exp.add_argument("--quick", action="store_true", help="few draws: a smoke test, not a result")
    exp.add_argument("--project", type=Path, default=None, help="assignment folder (default: the nearest)")
    exp.set_defaults(func=cmd_experiments)
    b = sub.add_parser("bench", help="time and memory of your attention against torch's fused SDPA")
    b.add_argument("--device", default="cpu")
    b.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16", "float64"])
    b.add_argument("--seq", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192])
    b.add_argument("--batch", type=int, default=4)
    b.add_argument("--heads", type=int, default=8)
    b.add_argument("--head-dim", type=int, default=64)
    b.add_argument("--repeats", type=int, default=5)
    b.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak-memory measurement")
    b.add_argument("--json", type=Path, default=None, help="write the results (with leaderboard entries) here")
    b.add_argument("--plot", type=Path, default=None, help="write a log-log PNG of time and memory here")
    b.add_argument("--project", type=Path, default=None, help="assignment folder (default: the nearest)")
    b.set_defaults(func=cmd_bench)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cs-basics", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    fixtures = sub.add_parser("fixtures", help="regenerate the stored fixtures from the float64 oracle")
    fixtures.add_argument("--project", type=Path, default=None, help="assignment folder (default: the nearest)")
    fixtures.set_defaults(func=cmd_fixtures)
    add_study_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
