"""Statistics over the rows: runs combined, geometric-mean speed-ups, worst shapes, ratios.

Every statistic starts from :func:`combine_runs`: per (mode, shape, threads, dtype, candidate)
the geometric mean over the runs. Also the summary lines, with the shapes below 1.0x and
warnings for results that differ from PyTorch's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from .suite import BASELINE, DTYPES, ERROR_TOLERANCE, LARGE_SHAPE_FLOPS, Combined, Row


def geomean(values: Iterable[float]) -> float:
    """Return the geometric mean of positive ``values`` (NaN when there are none).

    A single value is returned as it is (not through exp(log(x)), which may move it an ulp).
    """
    values = list(values)
    if len(values) == 1:
        return values[0]
    logs = [math.log(value) for value in values]
    return math.exp(statistics.fmean(logs)) if logs else math.nan


def combine_runs(rows: Sequence[Row]) -> list[Combined]:
    """Per (mode, shape, threads, dtype, candidate): geometric means over the runs' rows.

    Of the speed-ups (each over PyTorch in the same run), GFLOP/s, fraction of peak and time
    per call; with the speed-ups' min and max across runs. In the order of first appearance.
    """
    groups: dict[tuple[str, str, int, str, str], list[Row]] = {}
    for row in rows:
        key = (row.mode, row.shape, row.threads, row.dtype, row.candidate)
        groups.setdefault(key, []).append(row)
    combined = []
    for group in groups.values():
        first = group[0]
        speedups = [r.speedup for r in group]
        combined.append(
            Combined(
                mode=first.mode, shape=first.shape, m=first.m, k=first.k, n=first.n,
                kind=first.kind, threads=first.threads, dtype=first.dtype,
                candidate=first.candidate, runs=len(group),
                median_s=geomean(r.median_s for r in group),
                gflops=geomean(r.gflops for r in group),
                speedup=geomean(speedups), speedup_min=min(speedups), speedup_max=max(speedups),
                fraction_of_peak=geomean(r.fraction_of_peak for r in group),
                max_error=max(r.max_error for r in group),
                first_call_s=first.first_call_s,
            )
        )  # fmt: skip
    return combined


def is_large(result: Row | Combined) -> bool:
    """Whether the shape has at least :data:`LARGE_SHAPE_FLOPS` forward flops."""
    return 2 * result.m * result.k * result.n >= LARGE_SHAPE_FLOPS


def float32_ratios(
    results: Sequence[Combined],
) -> dict[tuple[str, str, int, str, str], float]:
    """Relate each non-float32 result's GFLOP/s to its candidate's float32 GFLOP/s.

    On the same (mode, shape, threads); keyed by (mode, shape, threads, dtype, candidate).
    """
    float32 = {
        (r.mode, r.shape, r.threads, r.candidate): r.gflops
        for r in results
        if r.dtype == "float32"
    }
    ratios = {}
    for r in results:
        base = float32.get((r.mode, r.shape, r.threads, r.candidate))
        if r.dtype != "float32" and base:
            ratios[(r.mode, r.shape, r.threads, r.dtype, r.candidate)] = r.gflops / base
    return ratios


def summarize(results: Sequence[Combined]) -> list[dict[str, Any]]:
    """Per (mode, threads, dtype, backend): geometric-mean speed-up, the worst shape, below 1.0x.

    From the runs combined (``results``, :func:`combine_runs`): over all shapes and over the
    large ones (>= 1 MFLOP); the shapes whose speed-up is below 1.0x, in suite order; and the
    geometric mean of the backend's throughput relative to its own float32 throughput (None
    without float32 rows).
    """
    groups: dict[tuple[str, int, str, str], list[Combined]] = {}
    for r in results:
        if r.candidate != BASELINE[r.mode]:
            groups.setdefault((r.mode, r.threads, r.dtype, r.candidate), []).append(r)
    ratios = float32_ratios(results)
    summary = []
    for (mode, threads, dtype, backend), group in groups.items():
        worst = min(group, key=lambda r: r.speedup)
        large = [r for r in group if is_large(r)]
        worst_large = min(large, key=lambda r: r.speedup) if large else None
        vs_float32 = [
            ratios[key]
            for r in group
            if (key := (mode, r.shape, threads, dtype, backend)) in ratios
        ]
        summary.append(
            {
                "mode": mode,
                "threads": threads,
                "dtype": dtype,
                "backend": backend,
                "runs": max(r.runs for r in group),
                "shapes": len(group),
                "geomean_speedup": geomean(r.speedup for r in group),
                "worst_shape": worst.shape,
                "worst_speedup": worst.speedup,
                "worst_speedup_range": [worst.speedup_min, worst.speedup_max],
                "large_shapes": len(large),
                "geomean_speedup_large": geomean(r.speedup for r in large) if large else None,
                "worst_shape_large": worst_large.shape if worst_large else None,
                "worst_speedup_large": worst_large.speedup if worst_large else None,
                "geomean_vs_float32": geomean(vs_float32) if vs_float32 else None,
                "below_1x": [
                    {"shape": r.shape, "speedup": r.speedup,
                     "speedup_range": [r.speedup_min, r.speedup_max]}
                    for r in group
                    if r.speedup < 1.0
                ],  # fmt: skip
            }
        )
    return summary


def speedup_text(
    speedup: float, speedup_range: Sequence[float], runs: int, fmt: str, unit: str = ""
) -> str:
    """Format a speed-up (then ``unit``), with its ``[min-max]`` across several runs."""
    text = format(speedup, fmt) + unit
    if runs > 1:
        low, high = speedup_range
        text += f" [{low:{fmt}}-{high:{fmt}}]"
    return text


def _prefix(entry: dict[str, Any]) -> str:
    """Return the columns that start an entry's lines: mode, dtype, threads, backend."""
    return (
        f"{entry['mode']:<7} {entry['dtype']:<8} threads={entry['threads']:<2} "
        f"{entry['backend']:<10}"
    )


def summary_line(entry: dict[str, Any]) -> str:
    """One summary entry as a line (with several runs: their count and the worst's range)."""
    runs = entry.get("runs", 1)
    of_runs = f", geomean of {runs} runs" if runs > 1 else ""
    worst = speedup_text(
        entry["worst_speedup"], entry.get("worst_speedup_range", []), runs, ".2f", "x"
    )
    line = (
        f"{_prefix(entry)} geomean speed-up {entry['geomean_speedup']:.2f}x over "
        f"{BASELINE[entry['mode']]} ({entry['shapes']} shapes{of_runs}), worst "
        f"{worst} at {entry['worst_shape']}"
    )
    if entry.get("large_shapes"):
        line += (
            f"; >= 1 MFLOP: {entry['geomean_speedup_large']:.2f}x ({entry['large_shapes']} "
            f"shapes), worst {entry['worst_speedup_large']:.2f}x at {entry['worst_shape_large']}"
        )
    if entry.get("geomean_vs_float32") is not None:
        line += f"; {entry['geomean_vs_float32']:.2f}x its own float32 throughput"
    return line


def below_line(entry: dict[str, Any]) -> str:
    """List the entry's shapes below 1.0x (three decimals: 0.996 must not read as 1.00)."""
    below = entry["below_1x"]
    if not below:
        return f"{_prefix(entry)} every shape at 1.0x or better ({entry['shapes']} shapes)"
    runs = entry.get("runs", 1)
    listed = ", ".join(
        f"{b['shape']} {speedup_text(b['speedup'], b['speedup_range'], runs, '.3f', 'x')}"
        for b in below
    )
    return f"{_prefix(entry)} below 1.0x on {len(below)} of {entry['shapes']} shapes: {listed}"


def computed_wrong(result: Combined) -> bool:
    """Whether ``result`` differs from the baseline beyond its dtype's tolerance.

    Its output or gradients, relative to their largest magnitude (``max_error``, the largest
    over the runs), against :data:`ERROR_TOLERANCE`.
    """
    return not result.max_error <= ERROR_TOLERANCE[DTYPES[result.dtype]]


def summary_lines(results: Sequence[Combined], summary: Sequence[dict[str, Any]]) -> list[str]:
    """Format the summary as lines, the fraction of peak of 1024^3 forward on 1 thread, scaling.

    A line per entry, then per entry the shapes below 1.0x. A warning line is added for each
    result whose output differs from PyTorch's by more than its dtype's
    :data:`ERROR_TOLERANCE` (relative to the largest magnitude of PyTorch's result; the
    largest over the runs). Last, with several thread counts, :func:`scaling_lines`.
    ``results``: the runs combined (:func:`combine_runs`).
    """
    lines = [summary_line(entry) for entry in summary]
    lines += [below_line(entry) for entry in summary]
    lines += [
        f"WARNING: {r.candidate} differs from {BASELINE[r.mode]} by {r.max_error:.1e} (relative) "
        f"on {r.mode} {r.shape} {r.dtype}, {r.threads} thread(s)"
        for r in results
        if computed_wrong(r)
    ]
    for dtype in dict.fromkeys(r.dtype for r in results):
        peak_results = [
            r
            for r in results
            if r.mode == "forward" and r.threads == 1 and r.shape == "1024x1024x1024"
            and r.dtype == dtype
        ]
        if peak_results:
            parts = ", ".join(
                f"{r.candidate} {100 * r.fraction_of_peak:.0f}%" for r in peak_results
            )
            lines.append(
                f"forward 1024x1024x1024 on 1 thread, {dtype}, fraction of FMA peak: {parts}"
            )
    return lines + scaling_lines(results)


def scaling_lines(results: Sequence[Combined]) -> list[str]:
    """Parallel efficiency of each result timed at 1 thread and at more, a line per shape.

    At t threads: GFLOP/s over t times the 1-thread GFLOP/s of the same (mode, dtype, shape,
    candidate); 1.00 is linear scaling.
    """
    one_thread = {
        (r.mode, r.dtype, r.shape, r.candidate): r.gflops for r in results if r.threads == 1
    }
    per_shape: dict[tuple[str, str, str], dict[str, list[str]]] = {}
    for r in results:
        base = one_thread.get((r.mode, r.dtype, r.shape, r.candidate))
        if r.threads > 1 and base:
            efficiency = r.gflops / (r.threads * base)
            candidates = per_shape.setdefault((r.mode, r.dtype, r.shape), {})
            candidates.setdefault(r.candidate, []).append(f"{r.threads}t {efficiency:.2f}")
    return [
        f"parallel efficiency, {mode} {dtype} {shape}: "
        + "; ".join(f"{name} {', '.join(parts)}" for name, parts in candidates.items())
        for (mode, dtype, shape), candidates in per_shape.items()
    ]


def peak_scaling_lines(one_core: float, by_threads: dict[str, float]) -> list[str]:
    """Format the FMA peak of t threads at once over t times one core's (no line for 1 thread).

    Below 1.00, the all-core clock (or neighbours on the same cores) caps parallel efficiency.
    """
    if not by_threads or one_core <= 0:
        return []
    parts = ", ".join(
        f"{t}t {gflops / (int(t) * one_core):.2f}" for t, gflops in by_threads.items()
    )
    return [f"FMA peak of t threads at once over t x 1 core: {parts}"]


def overhead_lines(entries: Sequence[dict[str, Any]]) -> list[str]:
    """One line per (mode, shape) of the call-overhead entries: PyTorch's us, the others' diff."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entry in entries:
        groups.setdefault((entry["mode"], entry["shape"]), []).append(entry)
    lines = []
    for (mode, shape), (base, *others) in groups.items():
        diffs = ", ".join(f"{e['candidate']} {e['diff_us']:+.2f} us" for e in others)
        lines.append(
            f"call overhead, {mode} {shape}, 1 thread: {base['candidate']} "
            f"{base['us_per_call']:.2f} us per call; {diffs}"
        )
    return lines
