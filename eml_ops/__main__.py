"""Command line: ``python -m eml_ops demo`` and ``python -m eml_ops bench``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Run the demo or the benchmark."""
    parser = argparse.ArgumentParser(prog="python -m eml_ops", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="the course's worked example on every implementation")
    bench = commands.add_parser("bench", help="time every backend against F.linear")
    bench.add_argument("rest", nargs=argparse.REMAINDER, help="options of the benchmark")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import main as demo_main

        return demo_main()
    from .bench import main as bench_main

    return bench_main(args.rest)


if __name__ == "__main__":
    sys.exit(main())
