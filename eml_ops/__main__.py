"""Command line: ``python -m eml_ops demo``, ``bench``, ``cmake-prefix`` and ``library-path``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Run the demo or the benchmark."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # the benchmark parses its own options
        from .bench import main as bench_main

        return bench_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m eml_ops", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="the course's worked example on every implementation")
    commands.add_parser("bench", help="time every backend against F.linear (see bench --help)")
    commands.add_parser(
        "cmake-prefix", help="print the CMAKE_PREFIX_PATH entry for find_package(eml_ops)"
    )
    commands.add_parser("library-path", help="print the absolute path of libeml_ops.so")
    command = parser.parse_args(argv).command
    if command in ("cmake-prefix", "library-path"):
        import eml_ops

        print(eml_ops.cmake_prefix_path if command == "cmake-prefix" else eml_ops.library_path())
        return 0
    from .demo import main as demo_main

    return demo_main()


if __name__ == "__main__":
    sys.exit(main())
