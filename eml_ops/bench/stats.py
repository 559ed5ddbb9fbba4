"""Statistics over the rows: geometric-mean speed-ups, worst shapes, ratios to float32.

Also the summary lines, with warnings for results that differ from PyTorch's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from .suite import BASELINE, DTYPES, ERROR_TOLERANCE, LARGE_SHAPE_FLOPS, Row


def geomean(values: Iterable[float]) -> float:
    """Return the geometric mean of positive ``values`` (NaN when there are none)."""
    logs = [math.log(value) for value in values]
    return math.exp(statistics.fmean(logs)) if logs else math.nan


def is_large(row: Row) -> bool:
    """Whether the row's shape has at least :data:`LARGE_SHAPE_FLOPS` forward flops."""
    return 2 * row.m * row.k * row.n >= LARGE_SHAPE_FLOPS


def float32_ratios(rows: Sequence[Row]) -> dict[tuple[str, str, int, str, str], float]:
    """Relate each non-float32 row's GFLOP/s to its candidate's float32 GFLOP/s.

    On the same (mode, shape, threads); keyed by (mode, shape, threads, dtype, candidate).
    """
    float32 = {
        (r.mode, r.shape, r.threads, r.candidate): r.gflops for r in rows if r.dtype == "float32"
    }
    ratios = {}
    for r in rows:
        base = float32.get((r.mode, r.shape, r.threads, r.candidate))
        if r.dtype != "float32" and base:
            ratios[(r.mode, r.shape, r.threads, r.dtype, r.candidate)] = r.gflops / base
    return ratios


def summarize(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per (mode, threads, dtype, backend): geometric-mean speed-up and the worst shape.

    Over all shapes and over the large ones (>= 1 MFLOP); and the geometric mean of the
    backend's throughput relative to its own float32 throughput (None without float32 rows).
    """
    groups: dict[tuple[str, int, str, str], list[Row]] = {}
    for row in rows:
        if row.candidate != BASELINE[row.mode]:
            groups.setdefault((row.mode, row.threads, row.dtype, row.candidate), []).append(row)
    ratios = float32_ratios(rows)
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
                "shapes": len(group),
                "geomean_speedup": geomean(r.speedup for r in group),
                "worst_shape": worst.shape,
                "worst_speedup": worst.speedup,
                "large_shapes": len(large),
                "geomean_speedup_large": geomean(r.speedup for r in large) if large else None,
                "worst_shape_large": worst_large.shape if worst_large else None,
                "worst_speedup_large": worst_large.speedup if worst_large else None,
                "geomean_vs_float32": geomean(vs_float32) if vs_float32 else None,
            }
        )
    return summary


def summary_line(entry: dict[str, Any]) -> str:
    """One summary entry as a line."""
    line = (
        f"{entry['mode']:<7} {entry['dtype']:<8} threads={entry['threads']:<2} "
        f"{entry['backend']:<10} geomean speed-up {entry['geomean_speedup']:.2f}x over "
        f"{BASELINE[entry['mode']]} ({entry['shapes']} shapes), worst "
        f"{entry['worst_speedup']:.2f}x at {entry['worst_shape']}"
    )
    if entry.get("large_shapes"):
        line += (
            f"; >= 1 MFLOP: {entry['geomean_speedup_large']:.2f}x ({entry['large_shapes']} "
            f"shapes), worst {entry['worst_speedup_large']:.2f}x at {entry['worst_shape_large']}"
        )
    if entry.get("geomean_vs_float32") is not None:
        line += f"; {entry['geomean_vs_float32']:.2f}x its own float32 throughput"
    return line


def summary_lines(rows: Sequence[Row], summary: Sequence[dict[str, Any]]) -> list[str]:
    """Format the summary as lines, plus the fraction of peak of 1024^3 forward on 1 thread.

    A warning line is added for each row whose result differs from PyTorch's by more than its
    dtype's :data:`ERROR_TOLERANCE` (relative to the largest magnitude of PyTorch's result).
    """
    lines = [summary_line(entry) for entry in summary]
    lines += [
        f"WARNING: {r.candidate} differs from {BASELINE[r.mode]} by {r.max_error:.1e} (relative) "
        f"on {r.mode} {r.shape} {r.dtype}, {r.threads} thread(s)"
        for r in rows
        if not r.max_error <= ERROR_TOLERANCE[DTYPES[r.dtype]]
    ]
    for dtype in dict.fromkeys(r.dtype for r in rows):
        peak_rows = [
            r
            for r in rows
            if r.mode == "forward" and r.threads == 1 and r.shape == "1024x1024x1024"
            and r.dtype == dtype
        ]
        if peak_rows:
            parts = ", ".join(f"{r.candidate} {100 * r.fraction_of_peak:.0f}%" for r in peak_rows)
            lines.append(
                f"forward 1024x1024x1024 on 1 thread, {dtype}, fraction of FMA peak: {parts}"
            )
    return lines
