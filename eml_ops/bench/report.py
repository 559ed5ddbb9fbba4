"""Reports: the run's metadata, the tables (plain text and Markdown) and bench.md."""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

import eml_ops

from .peers import PEERS
from .stats import float32_ratios, speedup_text
from .suite import BASELINE, FLOP_FACTOR, OPS_CANDIDATE, Combined, Config, dtype_name


def cpu_model() -> str:
    """Return the CPU model name from /proc/cpuinfo (or the platform's processor string)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def tuning_line(tuning: dict[str, Any]) -> str:
    """One line on the blocked GEMM's float32 cache blocks: values, where they came from."""
    values = tuning["values"]
    blocks = " x ".join(str(values[name]["value"]) for name in ("mc", "kc", "nc"))
    one_pass = values["one_pass_kc"]["value"]
    # Either rule is absent from a tuning recorded before it existed, and off at 0.
    column_bytes = values.get("column_block_l2_bytes", {}).get("value", 0)
    stream_bytes = values.get("stream_c_bytes", {}).get("value", 0)
    rules = ""
    if column_bytes:
        rules += f", one row block's columns of C and B within {column_bytes >> 10} KiB of L2"
    if stream_bytes:
        rules += f", dL/dW beyond {stream_bytes >> 10} KiB written past the caches"
    overridden = [v["env"] for v in values.values() if v["overridden"]]
    return (
        f"blocked MC x KC x NC {blocks}, one pass up to k = {one_pass}{rules} "
        f"(model of the {tuning['cache_source']} caches; "
        f"overrides: {', '.join(overridden) or 'none'})"
    )


def bf16_policy_text(meta: dict[str, Any]) -> str:
    """Name where bfloat16 ran (policy own, aten or auto) for the header of a run with it."""
    if "bfloat16" not in meta["dtypes"] or "bf16_policy" not in meta:
        return ""
    return f" (bfloat16 policy {meta['bf16_policy']})"


def metadata(config: Config, peaks_1core: dict[str, float]) -> dict[str, Any]:
    """Facts about the run: date, versions, CPU, ISA, peaks and the options.

    ``peaks_1core``: single-core FMA peak (GFLOP/s) per dtype name; the first dtype's is also
    ``fma_peak_gflops_1core``.
    """
    names = [dtype_name(dtype) for dtype in config.dtypes]
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch_version": torch.__version__,
        "eml_ops_version": getattr(eml_ops, "__version__", "unknown"),
        "python_version": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "isa": str(eml_ops._C.get_isa()),
        "bf16_policy": str(eml_ops._C.get_bf16_policy()),
        "tuning": eml_ops._C.tuning(),
        "fma_peak_gflops_1core": peaks_1core[names[0]],
        "fma_peak_gflops_1core_by_dtype": peaks_1core,
        "dtype": ",".join(names),
        "dtypes": names,
        "modes": config.modes,
        "backends": config.backends,
        "threads": config.threads,
        "shapes": [asdict(shape) for shape in config.shapes],
        "repeats": config.repeats,
        "min_time_s": config.min_time,
        "runs": config.runs,
        "baseline": BASELINE,
        "flop_factor": FLOP_FACTOR,
        "skipped": config.skipped,
    }


def python_threads_table(results: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the 2-Python-threads table."""
    header = ["candidate", "1 thread calls/s", "2 threads calls/s", "2-thread scaling",
              "speed-up (2 threads)"]
    body = [
        [r["candidate"], f"{r['calls_per_s_1_thread']:.1f}", f"{r['calls_per_s_2_threads']:.1f}",
         f"{r['scaling']:.2f}x", f"{r['speedup_2_threads']:.2f}"]
        for r in results
    ]
    return header, body


def overhead_table(entries: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the call-overhead table: one row per (mode, shape).

    PyTorch's us per call, then per other candidate its us per call and the difference.
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entry in entries:
        groups.setdefault((entry["mode"], entry["shape"]), []).append(entry)
    names = [entry["candidate"] for entry in next(iter(groups.values()))[1:]]
    header = ["mode", "shape", "PyTorch", "PyTorch us"]
    for name in names:
        header += [f"{name} us", f"{name} diff us"]
    body = []
    for (mode, shape), (base, *others) in groups.items():
        line = [mode, shape, base["candidate"], f"{base['us_per_call']:.2f}"]
        for entry in others:
            line += [f"{entry['us_per_call']:.2f}", f"{entry['diff_us']:+.2f}"]
        body.append(line)
    return header, body


def overhead_title(entries: Sequence[dict[str, Any]]) -> str:
    """Title the call-overhead table: what is timed, and on which backend the op runs."""
    ops_backend = next((e["backend"] for e in entries if e["candidate"] == OPS_CANDIDATE), None)
    return (
        "Call overhead, 1 thread, float32: us per call of F.linear / an nn.Linear training step "
        "(PyTorch), and of eml_ops.linear / an eml_ops.Layer step per backend and "
        f"{OPS_CANDIDATE} (dispatcher path, on {ops_backend}); diff: minus PyTorch's us"
    )


def columns(config: Config) -> list[str]:
    """Name the shape tables' columns after the baseline: the backends, then the peers."""
    return [*config.backends, *(PEERS[key].name for key in config.peers)]


def _cell(value: float, fmt: str) -> str:
    """Format a number, or a dash for a missing one."""
    return "-" if math.isnan(value) else format(value, fmt)


def tables(
    results: Sequence[Combined], config: Config
) -> list[tuple[str, list[str], list[list[str]]]]:
    """One table per (mode, threads): title, header, rows (shape, dtype, GFLOP/s, speed-ups).

    From the runs combined (``results``, :func:`~eml_ops.bench.stats.combine_runs`): geometric
    means over the runs, and with several runs each
    speed-up's ``[min-max]`` across them. A shape's dtypes are rows next to each other. When
    the run has float32 and other dtypes, each backend also gets its throughput relative to
    its own float32 throughput ("/ f32").
    """
    names = [dtype_name(dtype) for dtype in config.dtypes]
    with_ratio = "float32" in names and len(names) > 1
    ratios = float32_ratios(results)
    result = []
    for mode in config.modes:
        for threads in config.threads:
            base = BASELINE[mode]
            header = ["shape", "kind", "dtype", f"{base} GFLOP/s", f"{base} % peak"]
            for name in columns(config):
                header += [f"{name} GFLOP/s", f"{name} speed-up"]
                header += [f"{name} / f32"] if with_ratio else []
            body = []
            for shape, dtype in ((shape, dtype) for shape in config.shapes for dtype in names):
                found = {
                    r.candidate: r
                    for r in results
                    if r.mode == mode and r.threads == threads and r.shape == shape.label
                    and r.dtype == dtype
                }
                if base not in found:
                    continue
                line = [
                    shape.label,
                    shape.kind,
                    dtype,
                    f"{found[base].gflops:.1f}",
                    f"{100 * found[base].fraction_of_peak:.0f}",
                ]
                for name in columns(config):
                    measured = found.get(name)
                    line += [
                        _cell(measured.gflops, ".1f") if measured else "-",
                        speedup_text(
                            measured.speedup, (measured.speedup_min, measured.speedup_max),
                            measured.runs, ".2f",
                        ) if measured else "-",
                    ]  # fmt: skip
                    if with_ratio:
                        ratio = ratios.get((mode, shape.label, threads, dtype, name), math.nan)
                        line.append(_cell(ratio, ".2f"))
                body.append(line)
            title = f"{mode}, {threads} thread{'s' if threads > 1 else ''}"
            result.append((title, header, body))
    return result


def text_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """Format a fixed-width plain-text table."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *body, strict=False)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in body]
    return "\n".join(lines)


def markdown_table(
    header: Sequence[str], body: Sequence[Sequence[str]], text_columns: int = 2
) -> str:
    """Format a Markdown table: the first ``text_columns`` left-aligned, numbers right-aligned."""
    lines = ["| " + " | ".join(header) + " |"]
    aligns = [":---"] * text_columns + ["---:"] * (len(header) - text_columns)
    lines.append("|" + "|".join(aligns) + "|")
    lines += ["| " + " | ".join(line) + " |" for line in body]
    return "\n".join(lines)


def write_markdown(
    path: Path,
    meta: dict[str, Any],
    results: Sequence[Combined],
    config: Config,
    lines: Sequence[str],
    sections: Sequence[str] = (),
) -> None:
    """Write ``bench.md``: the setup, one table per (mode, threads) and the summary.

    ``results``: the runs combined (:func:`~eml_ops.bench.stats.combine_runs`);
    ``sections``: more Markdown (e.g. the model table), before the summary.
    """
    parts = [
        "# eml_ops benchmark",
        "",
        f"{meta['date']}; torch {meta['torch_version']}; {meta['cpu_model']} "
        f"({meta['cpu_count']} cores, ISA {meta['isa']}); {meta['dtype']}"
        f"{bf16_policy_text(meta)}; "
        f"single-core FMA peak {meta['fma_peak_gflops_1core']:.1f} GFLOP/s "
        "(float32's for the 16-bit dtypes, which our GEMM computes in float32); "
        f"{tuning_line(meta['tuning'])}.",
        "",
        f"Median of {config.repeats} interleaved samples of >= {1e3 * config.min_time:g} ms each. "
        "Speed-up = PyTorch time / backend time, measured in the same run (> 1: faster than "
        "PyTorch). Flops: forward 2MNK, train step 6MNK. Shapes are MxKxN (batch x in x out). "
        "/ f32: a backend's throughput in that dtype over its own float32 throughput.",
    ]
    if config.runs > 1:
        parts += [
            "",
            f"{config.runs} runs, each a whole pass over the suite, one after another: a "
            "shape's speed-up and GFLOP/s are the geometric means over the runs (each "
            "speed-up against PyTorch in the same run), [min-max]: the speed-up's range "
            "across the runs. The summary is computed from these geometric means.",
        ]
    for title, header, body in tables(results, config):
        parts += ["", f"## {title}", "", markdown_table(header, body, text_columns=3)]
    if config.skipped:
        parts += ["", f"Skipped: {len(config.skipped)} runs ({config.skipped[0]['reason']})."]
    if meta.get("python_threads"):
        header, body = python_threads_table(meta["python_threads"])
        parts += ["", "## 2 Python threads", "",
                  f"forward {meta['python_threads'][0]['shape']} {meta['dtypes'][0]}, one "
                  "intra-op thread "
                  "(torch.set_num_threads(1)); calls/s of one Python thread and of two calling "
                  "at once; speed-up over F.linear with two threads.", "",
                  markdown_table(header, body)]
    if meta.get("call_overhead"):
        header, body = overhead_table(meta["call_overhead"])
        parts += ["", "## Call overhead", "", overhead_title(meta["call_overhead"]) + ".", "",
                  markdown_table(header, body, text_columns=3)]
    for section in sections:
        parts += ["", section]
    parts += ["", "## Summary", ""] + [f"- {line}" for line in lines]
    path.write_text("\n".join(parts) + "\n")
