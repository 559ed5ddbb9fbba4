"""Command line: ``python -m eml_ops`` demo, bench, info, cmake-prefix and library-path."""

from __future__ import annotations

import argparse
import sys


def print_info(isa: str | None, *, as_json: bool) -> int:
    """Print the ISAs and the blocked GEMM's tuning (caches, block sizes, overrides)."""
    import json

    import eml_ops

    if as_json:
        print(json.dumps(eml_ops._C.tuning(isa), indent=1))
        return 0
    print(
        f"ISA: active {eml_ops._C.get_isa()}, detected {eml_ops._C.detected_isa()}, "
        f"supported {', '.join(eml_ops._C.supported_isas())}"
    )
    print(eml_ops._C.tuning_report(isa), end="")
    print(bf16_line())
    return 0


def power_of_two(value: int) -> str:
    """2^N for a power of two, else the number."""
    exponent = value.bit_length() - 1
    return f"2^{exponent}" if value == 1 << exponent else str(value)


def bf16_auto_text() -> str:
    """Which bfloat16 products the policy ``auto`` runs on our GEMM (gemm/run.h's limits)."""
    import bisect

    import eml_ops

    rows, deep_rows = eml_ops._C.bf16_own_max_rows(1), eml_ops._C.bf16_own_max_rows(4096)
    deep = ""
    if deep_rows != rows:  # from which depth on: the first where the limit is deep_rows
        depth = bisect.bisect_left(range(4097), deep_rows, key=eml_ops._C.bf16_own_max_rows)
        deep = f" ({deep_rows} from {depth} in-features on)"
    limits = eml_ops._C.bf16_auto_limits()
    return (f"ours run forwards of up to {rows} rows{deep} or below "
            f"{power_of_two(limits['forward_volume'])} multiply-adds, dL/dX of up to "
            f"{limits['input_gradient_rows']} rows, and backwards up to "
            f"{power_of_two(limits['backward_volume'])}; ATen the rest")


def bf16_line() -> str:
    """Where bfloat16 runs: the policy and, for ``auto``, which products take our GEMM."""
    import eml_ops

    policy = eml_ops._C.get_bf16_policy()
    kernels = ("bfloat16 dot products" if eml_ops._C.bf16_dot_tiles_are_native()
               else "widened to float32")
    aten = ", ATen's AMX tiles" if eml_ops._C.cpu_has_amx_bf16() else ""
    line = f"bfloat16: policy {policy} (EML_OPS_BF16); our kernels {kernels}{aten}"
    return line + f"; {bf16_auto_text()}" if policy == "auto" else line


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
    info = commands.add_parser(
        "info", help="the CPU's caches and ISA, and the GEMM block sizes chosen from them"
    )
    info.add_argument("--json", action="store_true", help="print eml_ops._C.tuning() as JSON")
    info.add_argument("--isa", help="the tuning for this ISA (default: the active one)")
    commands.add_parser(
        "cmake-prefix", help="print the CMAKE_PREFIX_PATH entry for find_package(eml_ops)"
    )
    commands.add_parser("library-path", help="print the absolute path of libeml_ops.so")
    args = parser.parse_args(argv)
    command = args.command
    if command == "info":
        return print_info(args.isa, as_json=args.json)
    if command in ("cmake-prefix", "library-path"):
        import eml_ops

        print(eml_ops.cmake_prefix_path if command == "cmake-prefix" else eml_ops.library_path())
        return 0
    from .demo import main as demo_main

    return demo_main()


if __name__ == "__main__":
    sys.exit(main())
