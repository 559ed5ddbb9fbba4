"""The command line of ``python -m eml_ops bench``.

Options into a :class:`~eml_ops.bench.suite.Config`, the run (peaks, ``--runs`` passes over
every case with a progress bar, the Python-threads and call-overhead tables), and the files
it writes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

import eml_ops

from . import compressed, models, peers, plot, report, stats, timing
from .suite import (
    ALL_MODES,
    DEFAULT_SHAPES,
    DTYPES,
    MODES,
    PYTHON_THREADS_SHAPE,
    QUICK_PYTHON_THREADS_SHAPE,
    QUICK_SHAPES,
    Config,
    Row,
    Shape,
    cases,
    dtype_name,
)

# On request only: inference with compressed weights, a suite of its own.
COMPRESSED_MODE = "compressed"


def parse_shapes(text: str) -> list[Shape]:
    """Parse ``MxKxN,MxKxN,...`` into shapes (both modes each)."""
    shapes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        parts = item.lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"bad shape {item!r}: expected MxKxN, e.g. 128x256x64")
        m, k, n = (int(p) for p in parts)
        shapes.append(Shape(m, k, n))
    if not shapes:
        raise argparse.ArgumentTypeError("no shapes given")
    return shapes


def _int_list(text: str) -> list[int]:
    """Parse ``1,2`` into a list of positive ints without duplicates."""
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        message = f"expected comma-separated integers, got {text!r}"
        raise argparse.ArgumentTypeError(message) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return list(dict.fromkeys(values))


def _name_list(text: str) -> list[str]:
    """Parse ``a,b`` into a list of names without duplicates."""
    return list(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))


def build_parser() -> argparse.ArgumentParser:
    """Build the benchmark's argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m eml_ops bench",
        description="Time every eml_ops backend against torch.nn.functional.linear / nn.Linear.",
    )
    parser.add_argument("--quick", action="store_true", help="a few small shapes, few repeats")
    parser.add_argument(
        "--modes",
        type=_name_list,
        help="forward,train,mlp,models,compressed (default: forward,train, and models with "
        "--peers; mlp: a 3-layer MLP training step, under autocast for the 16-bit dtypes; models: "
        "the model table, inference and training step of whole models; compressed: inference on "
        "a stack of four 4096x4096 layers with int8 / 16-bit weights, see bench/compressed.py)",
    )
    parser.add_argument(
        "--peers",
        type=_name_list,
        nargs="?",
        const=list(peers.PEERS),
        default=[],
        help=f"time, beside nn.Linear, what a CPU user would pick instead, of "
        f"{','.join(peers.PEERS)} (default with no list: all)",
    )
    parser.add_argument(
        "--models",
        type=_name_list,
        help=f"the model table's models, of {','.join(models.MODELS)} (default: all; --quick: "
        "tiny ones of the same kinds)",
    )
    parser.add_argument(
        "--backends",
        type=_name_list,
        help="backends to time (default: all available; 'reference' only on tiny shapes)",
    )
    parser.add_argument(
        "--threads", type=_int_list, help="thread counts, e.g. 1,2 (default: 1 and all cores)"
    )
    parser.add_argument("--repeats", type=int, help="interleaved samples per candidate")
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="whole passes over the suite, one after another; results are their geometric "
        "means, with each speed-up's min-max across runs (default 1)",
    )
    parser.add_argument("--shapes", type=parse_shapes, help="custom shapes MxKxN,... (M=batch)")
    parser.add_argument(
        "--min-time", type=float, help="seconds one sample lasts at least (default 0.02)"
    )
    parser.add_argument(
        "--dtype",
        type=_name_list,
        default=["float32"],
        help=f"dtypes, comma-separated, of {', '.join(DTYPES)} (default float32)",
    )
    parser.add_argument("--out", type=Path, default=Path("results"), help="results folder")
    parser.add_argument("--no-plot", action="store_true", help="do not write bench.png")
    parser.add_argument(
        "--no-overhead",
        action="store_true",
        help="skip the call-overhead table (us per call at 1x1x1 and 1x16x16, 1 thread)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    return parser


def make_config(argv: Sequence[str]) -> Config:
    """Parse ``argv`` and fill in the defaults (``--quick`` changes some).

    Raises:
        SystemExit: bad options, or a backend that is not available (exit code 2).

    """
    parser = build_parser()
    argv = list(argv)
    if argv[:1] == ["--"]:  # ``python -m eml_ops bench -- --quick`` passes the separator on
        argv = argv[1:]
    args = parser.parse_args(argv)
    available = eml_ops.available_backends()
    backends = args.backends if args.backends is not None else available
    unknown = [name for name in backends if name not in available]
    if unknown:
        parser.error(f"backend(s) {unknown} not available; available: {available}")
    default_modes = [*MODES, models.MODE] if args.peers else list(MODES)
    modes = args.modes if args.modes is not None else default_modes
    known_modes = [*ALL_MODES, models.MODE, COMPRESSED_MODE]
    if not modes or any(mode not in known_modes for mode in modes):
        parser.error(f"--modes takes a comma-separated subset of {known_modes}")
    unknown_peers = [name for name in args.peers if name not in peers.PEERS]
    if unknown_peers:
        parser.error(f"unknown peer(s) {unknown_peers}; known: {list(peers.PEERS)}")
    model_keys = args.models if args.models is not None else list(models.MODELS)
    if not model_keys or any(key not in models.MODELS for key in model_keys):
        parser.error(f"--models takes a comma-separated subset of {list(models.MODELS)}")
    cores = os.cpu_count() or 1
    threads = args.threads if args.threads is not None else sorted({1, cores})
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 11)
    min_time = args.min_time if args.min_time is not None else (0.005 if args.quick else 0.02)
    unknown_dtypes = [name for name in args.dtype if name not in DTYPES]
    if not args.dtype or unknown_dtypes:
        parser.error(f"--dtype takes a comma-separated subset of {list(DTYPES)}")
    if repeats < 1 or min_time < 0 or args.runs < 1:
        parser.error("--repeats and --runs must be >= 1 and --min-time >= 0")
    shapes = args.shapes or (QUICK_SHAPES if args.quick else DEFAULT_SHAPES)
    return Config(
        modes=[mode for mode in modes if mode != models.MODE],
        backends=backends,
        threads=threads,
        shapes=shapes,
        repeats=repeats,
        min_time=min_time,
        dtypes=[DTYPES[name] for name in args.dtype],
        out=args.out,
        plot=not args.no_plot,
        seed=args.seed,
        python_threads_shape=QUICK_PYTHON_THREADS_SHAPE if args.quick else PYTHON_THREADS_SHAPE,
        runs=args.runs,
        overhead=not args.no_overhead,
        peers=args.peers,
        models=model_keys if models.MODE in modes else [],
        quick_models=args.quick,
    )


def fma_peaks(dtypes: Sequence[torch.dtype]) -> dict[str, float]:
    """Measure the single-core FMA peak (GFLOP/s) per dtype name.

    float64's for float64, float32's for the others (the 16-bit dtypes compute in float32).
    """
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        peaks: dict[bool, float] = {}
        for use_double in sorted({dtype == torch.float64 for dtype in dtypes}):
            peaks[use_double] = float(
                eml_ops._C.fma_peak_gflops(use_double=use_double, seconds=0.2)
            )
    finally:
        torch.set_num_threads(previous_threads)
    return {dtype_name(dtype): peaks[dtype == torch.float64] for dtype in dtypes}


def concurrent_fma_peaks(thread_counts: Sequence[int], use_double: bool) -> dict[int, float]:
    """Measure the FMA peak (GFLOP/s) of t threads running the peak loop at once, each t > 1.

    Their sum against t times one core's peak shows what the all-core clock takes from
    parallel efficiency, apart from caches and memory (the loop uses registers only).
    """
    import concurrent.futures

    def one_thread(_: int) -> float:
        return float(eml_ops._C.fma_peak_gflops(use_double=use_double, seconds=0.3))

    totals: dict[int, float] = {}
    for threads in sorted({t for t in thread_counts if t > 1}):
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:  # the loop frees the GIL
            totals[threads] = sum(pool.map(one_thread, range(threads)))
    return totals


def run(config: Config) -> tuple[dict[str, Any], list[Row]]:
    """Measure the peaks, then ``config.runs`` passes over every case with a progress bar.

    Then the 2-Python-threads table (mode forward) and the call overhead, once each.
    Returns the metadata and the rows of every run.
    """
    from tqdm import tqdm

    peaks = fma_peaks(config.dtypes)
    rows: list[Row] = []
    # Whole passes one after another, so that a slow drift of the machine averages out.
    todo = [(index, case) for index in range(config.runs) for case in cases(config)]
    with tqdm(todo, desc="bench", unit="case", file=sys.stderr, dynamic_ncols=True) as bar:
        for run_index, (mode, shape, threads, dtype) in bar:
            of_runs = f"run {run_index + 1}/{config.runs} " if config.runs > 1 else ""
            bar.set_postfix_str(f"{of_runs}{mode} {shape.label} t={threads} {dtype_name(dtype)}")
            peak = peaks[dtype_name(dtype)]
            rows += timing.bench_case(mode, shape, threads, dtype, config, peak, run_index)
    meta = report.metadata(config, peaks)
    by_threads = concurrent_fma_peaks(config.threads, use_double=config.dtypes[0] == torch.float64)
    meta["fma_peak_gflops_by_threads"] = {str(t): gflops for t, gflops in by_threads.items()}
    if "forward" in config.modes:
        meta["python_threads"] = timing.bench_python_threads(config.python_threads_shape, config)
    if config.overhead:
        meta["call_overhead"] = timing.bench_call_overhead(config)
    return meta, rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark with command-line options ``argv``; the exit code."""
    config = make_config(sys.argv[1:] if argv is None else argv)
    if COMPRESSED_MODE in config.modes:  # its own suite and table (bench/compressed.py)
        table = compressed.main(config.out, config.threads, repeats=min(config.repeats, 5),
                                min_time=max(config.min_time, 0.05), seed=config.seed)
        print(f"\n{table}")
        config.modes = [mode for mode in config.modes if mode != COMPRESSED_MODE]
        if not config.modes and not config.models:
            return 0
    start = time.perf_counter()
    with peers.fresh_compiler_caches(bool(config.peers)):
        meta, rows = run(config)
        model_rows = models.run_models(config, meta["fma_peak_gflops_1core"]) if config.models \
            else []  # fmt: skip
    meta["peers"] = peers.peer_status(config.peers)
    meta["peer_notes"] = config.peer_notes
    meta["elapsed_s"] = time.perf_counter() - start
    results = stats.combine_runs(rows)  # what every output below reports
    model_results = stats.combine_runs(model_rows)
    summary = stats.summarize(results)
    lines = stats.summary_lines(results, summary)
    lines += stats.peak_scaling_lines(meta["fma_peak_gflops_1core"],
                                      meta["fma_peak_gflops_by_threads"])
    if meta.get("python_threads"):
        scaling = ", ".join(f"{r['candidate']} {r['scaling']:.2f}x" for r in meta["python_threads"])
        lines.append(f"2 Python threads (1 intra-op thread), throughput over 1: {scaling}")
    lines += stats.overhead_lines(meta.get("call_overhead", []))

    config.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "metadata": meta,
        "rows": [asdict(r) for r in rows],
        "combined": [asdict(c) for c in results],
        "summary": summary,
        "model_rows": [asdict(r) for r in model_rows],
        "model_combined": [asdict(c) for c in model_results],
    }
    (config.out / "bench.json").write_text(json.dumps(payload, indent=1) + "\n")
    sections = [models.write_sections(model_results, config, meta)] if config.models else []
    report.write_markdown(config.out / "bench.md", meta, results, config, lines, sections)
    if config.plot and config.modes:
        plot.write_plot(config.out / "bench.png", results, config)

    print(
        f"{meta['cpu_model']}, {meta['cpu_count']} cores, ISA {meta['isa']}, {meta['dtype']}, "
        f"single-core FMA peak {meta['fma_peak_gflops_1core']:.1f} GFLOP/s; "
        f"{report.tuning_line(meta['tuning'])}"
    )
    for title, header, body in report.tables(results, config):
        print(f"\n{title}\n{report.text_table(header, body)}")
    if meta.get("python_threads"):
        header, body = report.python_threads_table(meta["python_threads"])
        print(f"\n2 Python threads, forward {meta['python_threads'][0]['shape']} "
              f"{meta['dtypes'][0]}, 1 intra-op thread\n{report.text_table(header, body)}")
    if meta.get("call_overhead"):
        header, body = report.overhead_table(meta["call_overhead"])
        print(f"\n{report.overhead_title(meta['call_overhead'])}\n"
              f"{report.text_table(header, body)}")
    if config.models:
        models.print_sections(model_results, config, meta)
    elif config.peers:
        print("\n".join(["", *models.peer_lines(meta, config)]))
    print("\nSummary")
    print("\n".join(lines))
    print(f"\n{meta['elapsed_s']:.0f} s; results in {config.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
