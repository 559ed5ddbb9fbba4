"""The speed-up plot, bench.png (matplotlib, Agg: no display needed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from .report import columns
from .suite import BASELINE, Combined, Config, dtype_name


def write_plot(path: Path, results: Sequence[Combined], config: Config) -> None:
    """Write ``bench.png``: speed-up over PyTorch per shape and backend.

    One panel per (mode, dtype) row and threads column, from the runs combined (``results``,
    :func:`~eml_ops.bench.stats.combine_runs`). With several runs, the bars are the geometric
    means over the runs and the error bars their min-max.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(mode, dtype_name(dtype)) for mode in config.modes for dtype in config.dtypes]
    n_rows, n_cols = len(panels), len(config.threads)
    fig, axes = plt.subplots(
        n_rows,
        n_cols,
        figsize=(max(6.0, 0.6 * len(config.shapes) * n_cols), 4.0 * n_rows),
        squeeze=False,
    )
    names = columns(config)
    width = 0.8 / max(1, len(names))
    for i, (mode, dtype) in enumerate(panels):
        for j, threads in enumerate(config.threads):
            ax = axes[i][j]
            here = [
                r
                for r in results
                if r.mode == mode and r.threads == threads and r.dtype == dtype
            ]
            labels = [s.label for s in config.shapes if any(r.shape == s.label for r in here)]
            for b, name in enumerate(names):
                found = {r.shape: r for r in here if r.candidate == name}
                xs = [x + (b - (len(names) - 1) / 2) * width for x in range(len(labels))]
                shown = [found.get(label) for label in labels]
                ys = [r.speedup if r else math.nan for r in shown]
                # Error bars: distances from the bar down to the min and up to the max.
                low = [r.speedup - r.speedup_min if r else 0.0 for r in shown]
                high = [r.speedup_max - r.speedup if r else 0.0 for r in shown]
                errors = [low, high] if config.runs > 1 else None
                ax.bar(xs, ys, width, label=name, yerr=errors, capsize=2)
            ax.axhline(1.0, color="black", linewidth=1)
            ax.set_xticks(range(len(labels)))
            ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=8)
            ax.set_yscale("log")
            ax.set_ylabel(f"speed-up over {BASELINE[mode]}")
            ax.set_title(f"{mode}, {dtype}, {threads} thread{'s' if threads > 1 else ''}")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
