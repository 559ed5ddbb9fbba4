"""Benchmark: every GEMM backend of ``eml::linear`` against PyTorch's own linear layer.

``python -m eml_ops bench [options]`` times, in one run, ``torch.nn.functional.linear``
(mode ``forward``) or a ``torch.nn.Linear`` training step (mode ``train``: forward plus the
gradients of input, weight and bias; gradients are set to None at the start of every step,
inside the timed region, for all candidates alike) and the same work through ``eml_ops`` on
each selected backend (``eml_ops.linear`` / ``eml_ops.Layer``). For every (mode, shape,
threads) the candidates share the same input tensors, are warmed up, get an inner repeat
count calibrated once so that one sample lasts at least ``--min-time`` seconds, and are then
timed round-robin (baseline, backend A, backend B, ...) ``--repeats`` times. The reported
time per call is the median over the samples.

Results go to ``--out`` (default ``results/``): ``bench.json`` (metadata and raw rows),
``bench.md`` (tables and summary) and ``bench.png`` (speed-up plot); the table and the
summary are also printed. Nothing here asserts anything about speed.

With mode ``forward``, a last table times two Python threads calling at once (one intra-op
thread each), as an inference server's thread pool would: the eager path releases the GIL,
so its throughput should scale as ``F.linear``'s does.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import itertools
import json
import math
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import eml_ops

MODES = ("forward", "train")
# The baseline candidate of each mode: PyTorch's own implementation.
BASELINE = {"forward": "F.linear", "train": "nn.Linear"}
# Flops per call as a multiple of M*N*K: forward 2MNK; a training step adds grad_input and
# grad_weight, 2MNK each (the bias gradient's M*N additions are not counted).
FLOP_FACTOR = {"forward": 2, "train": 6}
# Backends with plain loops: run only on shapes up to this many M*N*K (tiny shapes).
SLOW_BACKEND_MAX_MNK = {"reference": 1 << 20}
# A backend whose results differ from PyTorch's by more than this (relative) is reported.
ERROR_TOLERANCE = {torch.float32: 1e-3, torch.float64: 1e-9}


@dataclass(frozen=True)
class Shape:
    """A problem size: ``x`` is ``[m, k]``, ``W`` is ``[n, k]``, ``y`` is ``[m, n]``."""

    m: int
    k: int
    n: int
    kind: str = "custom"
    modes: tuple[str, ...] = MODES

    @property
    def label(self) -> str:
        """The shape as ``MxKxN``."""
        return f"{self.m}x{self.k}x{self.n}"

    @property
    def mnk(self) -> int:
        """The product ``M*N*K``."""
        return self.m * self.k * self.n


def _suite(
    entries: Sequence[tuple[int, int, int, str]], forward_only: Sequence[str] = ()
) -> list[Shape]:
    """Build shapes from ``(m, k, n, kind)`` tuples; labels in ``forward_only`` skip ``train``."""
    return [
        Shape(m, k, n, kind, ("forward",) if f"{m}x{k}x{n}" in forward_only else MODES)
        for m, k, n, kind in entries
    ]


DEFAULT_SHAPES = _suite(
    [
        (1, 16, 16, "tiny"),
        (4, 64, 32, "tiny"),
        (16, 128, 128, "tiny"),
        (64, 128, 128, "small"),
        (128, 256, 256, "small"),
        (256, 256, 256, "square"),
        (512, 512, 512, "square"),
        (1024, 1024, 1024, "square"),
        (2048, 2048, 2048, "square"),
        (33, 77, 65, "odd"),
        (127, 255, 511, "odd"),
        (1000, 999, 1001, "odd"),
        (4096, 64, 64, "tall-skinny"),
        (8192, 128, 32, "tall-skinny"),
        (1, 4096, 4096, "wide"),
        (16, 2048, 2048, "wide"),
    ],
    forward_only=("2048x2048x2048",),
)
QUICK_SHAPES = _suite([(4, 32, 16, "tiny"), (33, 77, 65, "odd"), (64, 128, 96, "small")])
# The shape timed with 2 Python threads (--quick: a small one).
PYTHON_THREADS_SHAPE = Shape(256, 1024, 1024, "square", ("forward",))
QUICK_PYTHON_THREADS_SHAPE = Shape(64, 128, 96, "small", ("forward",))


@dataclass
class Row:
    """The measurement of one candidate on one (mode, shape, threads)."""

    mode: str
    shape: str
    m: int
    k: int
    n: int
    kind: str
    threads: int
    candidate: str
    inner: int
    median_s: float
    samples_s: list[float]
    gflops: float
    speedup: float
    fraction_of_peak: float
    max_error: float


@dataclass
class Config:
    """The parsed command line."""

    modes: list[str]
    backends: list[str]
    threads: list[int]
    shapes: list[Shape]
    repeats: int
    min_time: float
    dtype: torch.dtype
    out: Path
    plot: bool
    seed: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    python_threads_shape: Shape = PYTHON_THREADS_SHAPE


# --------------------------------------------------------------------------- command line


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
    parser.add_argument("--modes", type=_name_list, help="forward,train (default: both)")
    parser.add_argument(
        "--backends",
        type=_name_list,
        help="backends to time (default: all available; 'reference' only on tiny shapes)",
    )
    parser.add_argument(
        "--threads", type=_int_list, help="thread counts, e.g. 1,2 (default: 1 and all cores)"
    )
    parser.add_argument("--repeats", type=int, help="interleaved samples per candidate")
    parser.add_argument("--shapes", type=parse_shapes, help="custom shapes MxKxN,... (M=batch)")
    parser.add_argument(
        "--min-time", type=float, help="seconds one sample lasts at least (default 0.02)"
    )
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--out", type=Path, default=Path("results"), help="results folder")
    parser.add_argument("--no-plot", action="store_true", help="do not write bench.png")
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
    modes = args.modes if args.modes is not None else list(MODES)
    if not modes or any(mode not in MODES for mode in modes):
        parser.error(f"--modes takes a comma-separated subset of {list(MODES)}")
    cores = os.cpu_count() or 1
    threads = args.threads if args.threads is not None else sorted({1, cores})
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 11)
    min_time = args.min_time if args.min_time is not None else (0.005 if args.quick else 0.02)
    if repeats < 1 or min_time < 0:
        parser.error("--repeats must be >= 1 and --min-time >= 0")
    shapes = args.shapes or (QUICK_SHAPES if args.quick else DEFAULT_SHAPES)
    return Config(
        modes=modes,
        backends=backends,
        threads=threads,
        shapes=shapes,
        repeats=repeats,
        min_time=min_time,
        dtype=getattr(torch, args.dtype),
        out=args.out,
        plot=not args.no_plot,
        seed=args.seed,
        python_threads_shape=QUICK_PYTHON_THREADS_SHAPE if args.quick else PYTHON_THREADS_SHAPE,
    )


# --------------------------------------------------------------------------- candidates


# A candidate: ``run()`` does one call (the timed work), ``result()`` one call whose outputs
# are compared with the baseline's.
@dataclass
class Candidate:
    """One implementation to time: its name, the backend to select, and its work."""

    name: str
    backend: str | None
    run: Callable[[], object]
    result: Callable[[], list[torch.Tensor]]


@contextlib.contextmanager
def selected(backend: str | None) -> Iterator[None]:
    """Select ``backend`` for a block (no change for the PyTorch baseline)."""
    if backend is None:
        yield
    else:
        with eml_ops.use_backend(backend):
            yield


def forward_candidates(
    shape: Shape, backends: Sequence[str], dtype: torch.dtype, seed: int
) -> list[Candidate]:
    """``F.linear(x, w, b)`` and ``eml_ops.linear(x, w, b)`` per backend, without grad."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape.m, shape.k, generator=gen, dtype=dtype)
    w = torch.randn(shape.n, shape.k, generator=gen, dtype=dtype) / math.sqrt(shape.k)
    b = torch.randn(shape.n, generator=gen, dtype=dtype)

    def make(
        fn: Callable[..., torch.Tensor],
    ) -> tuple[Callable[[], torch.Tensor], Callable[[], list[torch.Tensor]]]:
        def run() -> torch.Tensor:
            with torch.no_grad():
                return fn(x, w, b)

        return run, lambda: [run()]

    out = [Candidate(BASELINE["forward"], None, *make(F.linear))]
    out += [Candidate(name, name, *make(eml_ops.linear)) for name in backends]
    return out


def _train_step(
    module: nn.Module, x: torch.Tensor, grad: torch.Tensor
) -> tuple[Callable[[], torch.Tensor], Callable[[], list[torch.Tensor]]]:
    """One training step on ``module``: zero grads (set to None), forward, backward."""
    params = list(module.parameters())

    def run() -> torch.Tensor:
        x.grad = None
        for p in params:
            p.grad = None
        y = module(x)
        y.backward(grad)
        return y

    def result() -> list[torch.Tensor]:
        y = run()
        grads = [t.grad for t in (x, *params)]
        return [y.detach()] + [g for g in grads if g is not None]

    return run, result


def train_candidates(
    shape: Shape, backends: Sequence[str], dtype: torch.dtype, seed: int
) -> list[Candidate]:
    """Build a training step through ``nn.Linear`` and through ``eml_ops.Layer`` per backend.

    All layers start from the same weight and bias (copies); all steps use the same input
    (``requires_grad=True``) and the same output gradient.
    """
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape.m, shape.k, generator=gen, dtype=dtype).requires_grad_(True)
    grad = torch.randn(shape.m, shape.n, generator=gen, dtype=dtype)
    baseline = nn.Linear(shape.k, shape.n, bias=True, dtype=dtype)
    out = [Candidate(BASELINE["train"], None, *_train_step(baseline, x, grad))]
    for name in backends:
        layer = eml_ops.Layer(shape.k, shape.n, bias=True, dtype=dtype)
        layer.load_state_dict(baseline.state_dict())
        out.append(Candidate(name, name, *_train_step(layer, x, grad)))
    return out


def max_relative_error(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> float:
    """Largest ``|got - want| / max(|want|)`` over matching tensors (inf if shapes differ)."""
    if len(got) != len(want):
        return math.inf
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        if g.shape != w.shape:
            return math.inf
        if w.numel() == 0:
            continue
        scale = max(float(w.abs().max()), torch.finfo(w.dtype).tiny)
        worst = max(worst, float((g.double() - w.double()).abs().max()) / scale)
    return worst


# --------------------------------------------------------------------------- timing


def time_calls(fn: Callable[[], object], n: int) -> float:
    """Seconds for ``n`` calls of ``fn`` (garbage collection paused, as in timeit)."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        return time.perf_counter() - start
    finally:
        if gc_was_enabled:
            gc.enable()


def calibrate(fn: Callable[[], object], min_time: float) -> int:
    """Warm ``fn`` up, then return the inner repeat count making a sample last >= min_time."""
    time_calls(fn, 2)  # first calls: allocation, lazy initialisation, caches
    n = 1
    while True:
        elapsed = time_calls(fn, n)
        if elapsed >= min_time:
            return n
        # Aim 20% past the target, at least doubling, at most x100 per step.
        growth = min_time * 1.2 / elapsed if elapsed > 0 else 100.0
        n = max(n + 1, int(n * min(max(growth, 2.0), 100.0)))


def measure(candidates: Sequence[Candidate], repeats: int, min_time: float) -> dict[str, Any]:
    """Time the candidates round-robin; per candidate its inner count and per-call samples."""
    inner: dict[str, int] = {}
    for cand in candidates:
        with selected(cand.backend):
            inner[cand.name] = calibrate(cand.run, min_time)
    samples: dict[str, list[float]] = {cand.name: [] for cand in candidates}
    for _ in range(repeats):
        for cand in candidates:
            with selected(cand.backend):
                n = inner[cand.name]
                samples[cand.name].append(time_calls(cand.run, n) / n)
    return {"inner": inner, "samples": samples}


def skip_reason(backend: str, shape: Shape) -> str | None:
    """Why ``backend`` is not run on ``shape`` (slow plain loops on a big shape), or None."""
    limit = SLOW_BACKEND_MAX_MNK.get(backend)
    if limit is not None and shape.mnk > limit:
        return f"{backend} runs only on shapes with M*N*K <= {limit}"
    return None


def bench_case(
    mode: str, shape: Shape, threads: int, config: Config, peak_1core: float
) -> list[Row]:
    """Measure all candidates on one (mode, shape, threads); rows with speed-ups filled in."""
    backends = []
    for name in config.backends:
        reason = skip_reason(name, shape)
        if reason is None:
            backends.append(name)
        else:
            config.skipped.append(
                {
                    "mode": mode,
                    "shape": shape.label,
                    "threads": threads,
                    "candidate": name,
                    "reason": reason,
                }
            )
    make = forward_candidates if mode == "forward" else train_candidates
    candidates = make(shape, backends, config.dtype, config.seed)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        want = candidates[0].result()
        errors = {}
        for cand in candidates:
            with selected(cand.backend):
                errors[cand.name] = max_relative_error(cand.result(), want)
        timing = measure(candidates, config.repeats, config.min_time)
    finally:
        torch.set_num_threads(previous_threads)
    flops = FLOP_FACTOR[mode] * shape.mnk
    medians = {name: statistics.median(s) for name, s in timing["samples"].items()}
    base = medians[candidates[0].name]
    rows = []
    for cand in candidates:
        median = medians[cand.name]
        gflops = flops / median / 1e9
        rows.append(
            Row(
                mode=mode,
                shape=shape.label,
                m=shape.m,
                k=shape.k,
                n=shape.n,
                kind=shape.kind,
                threads=threads,
                candidate=cand.name,
                inner=timing["inner"][cand.name],
                median_s=median,
                samples_s=timing["samples"][cand.name],
                gflops=gflops,
                speedup=base / median,
                fraction_of_peak=gflops / (peak_1core * threads),
                max_error=errors[cand.name],
            )
        )
    return rows


# --------------------------------------------------------------------------- Python threads

def time_in_python_threads(
    fn: Callable[[], object], backend: str | None, calls: int, n_threads: int
) -> float:
    """Wall seconds for ``n_threads`` Python threads, released together, to call ``fn``.

    Each makes ``calls`` calls on ``backend``, which it selects itself (the choice is per thread).
    """
    barrier = threading.Barrier(n_threads + 1)

    def worker() -> None:
        with selected(backend):
            barrier.wait()
            for _ in range(calls):
                fn()

    threads = [threading.Thread(target=worker) for _ in range(n_threads)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


def bench_python_threads(shape: Shape, config: Config) -> list[dict[str, Any]]:
    """Forward throughput (calls/s) of 1 and of 2 Python threads per candidate, interleaved.

    With torch.set_num_threads(1), the two Python threads are all the parallelism there is.
    """
    backends = [name for name in config.backends if skip_reason(name, shape) is None]
    candidates = forward_candidates(shape, backends, config.dtype, config.seed)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        inner = {}
        for cand in candidates:
            with selected(cand.backend):
                inner[cand.name] = calibrate(cand.run, config.min_time)
        rates: dict[tuple[str, int], list[float]] = {}
        for _ in range(config.repeats):
            for cand, n_threads in itertools.product(candidates, (1, 2)):
                n = inner[cand.name]
                seconds = time_in_python_threads(cand.run, cand.backend, n, n_threads)
                rates.setdefault((cand.name, n_threads), []).append(n * n_threads / seconds)
    finally:
        torch.set_num_threads(previous_threads)
    median = {key: statistics.median(values) for key, values in rates.items()}
    base = candidates[0].name
    return [
        {
            "candidate": cand.name,
            "shape": shape.label,
            "calls_per_s_1_thread": median[(cand.name, 1)],
            "calls_per_s_2_threads": median[(cand.name, 2)],
            "scaling": median[(cand.name, 2)] / median[(cand.name, 1)],
            "speedup_2_threads": median[(cand.name, 2)] / median[(base, 2)],
        }
        for cand in candidates
    ]


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


# --------------------------------------------------------------------------- reporting


def cpu_model() -> str:
    """Return the CPU model name from /proc/cpuinfo (or the platform's processor string)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def metadata(config: Config, peak_1core: float) -> dict[str, Any]:
    """Facts about the run: date, versions, CPU, ISA, peak and the options."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch_version": torch.__version__,
        "eml_ops_version": getattr(eml_ops, "__version__", "unknown"),
        "python_version": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "isa": str(eml_ops._C.get_isa()),
        "fma_peak_gflops_1core": peak_1core,
        "dtype": str(config.dtype).removeprefix("torch."),
        "modes": config.modes,
        "backends": config.backends,
        "threads": config.threads,
        "shapes": [asdict(shape) for shape in config.shapes],
        "repeats": config.repeats,
        "min_time_s": config.min_time,
        "baseline": BASELINE,
        "flop_factor": FLOP_FACTOR,
        "skipped": config.skipped,
    }


def summarize(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per (mode, threads, backend): geometric-mean speed-up and the worst shape."""
    groups: dict[tuple[str, int, str], list[Row]] = {}
    for row in rows:
        if row.candidate != BASELINE[row.mode]:
            groups.setdefault((row.mode, row.threads, row.candidate), []).append(row)
    summary = []
    for (mode, threads, backend), group in groups.items():
        worst = min(group, key=lambda r: r.speedup)
        geomean = math.exp(statistics.fmean(math.log(r.speedup) for r in group))
        summary.append(
            {
                "mode": mode,
                "threads": threads,
                "backend": backend,
                "shapes": len(group),
                "geomean_speedup": geomean,
                "worst_shape": worst.shape,
                "worst_speedup": worst.speedup,
            }
        )
    return summary


def summary_lines(
    rows: Sequence[Row], summary: Sequence[dict[str, Any]], tolerance: float = 1e-3
) -> list[str]:
    """Format the summary as lines, plus the fraction of peak of 1024^3 forward on 1 thread.

    A warning line is added for each row whose result differs from PyTorch's by more than
    ``tolerance`` (relative to the largest magnitude of PyTorch's result).
    """
    lines = [
        f"{s['mode']:<7} threads={s['threads']:<2} {s['backend']:<10} geomean speed-up "
        f"{s['geomean_speedup']:.2f}x over {BASELINE[s['mode']]} ({s['shapes']} shapes), "
        f"worst {s['worst_speedup']:.2f}x at {s['worst_shape']}"
        for s in summary
    ]
    lines += [
        f"WARNING: {r.candidate} differs from {BASELINE[r.mode]} by {r.max_error:.1e} (relative) "
        f"on {r.mode} {r.shape}, {r.threads} thread(s)"
        for r in rows
        if not r.max_error <= tolerance
    ]
    peak_rows = [
        r for r in rows if r.mode == "forward" and r.threads == 1 and r.shape == "1024x1024x1024"
    ]
    if peak_rows:
        parts = ", ".join(f"{r.candidate} {100 * r.fraction_of_peak:.0f}%" for r in peak_rows)
        lines.append(f"forward 1024x1024x1024 on 1 thread, fraction of FMA peak: {parts}")
    return lines


def _cell(value: float, fmt: str) -> str:
    """Format a number, or a dash for a missing one."""
    return "-" if math.isnan(value) else format(value, fmt)


def tables(rows: Sequence[Row], config: Config) -> list[tuple[str, list[str], list[list[str]]]]:
    """One table per (mode, threads): title, header, rows (shape, GFLOP/s and speed-ups)."""
    result = []
    for mode in config.modes:
        for threads in config.threads:
            base = BASELINE[mode]
            header = ["shape", "kind", f"{base} GFLOP/s", f"{base} % peak"]
            for name in config.backends:
                header += [f"{name} GFLOP/s", f"{name} speed-up"]
            body = []
            for shape in config.shapes:
                found = {
                    r.candidate: r
                    for r in rows
                    if r.mode == mode and r.threads == threads and r.shape == shape.label
                }
                if base not in found:
                    continue
                line = [
                    shape.label,
                    shape.kind,
                    f"{found[base].gflops:.1f}",
                    f"{100 * found[base].fraction_of_peak:.0f}",
                ]
                for name in config.backends:
                    row = found.get(name)
                    line += [
                        _cell(row.gflops if row else math.nan, ".1f"),
                        _cell(row.speedup if row else math.nan, ".2f"),
                    ]
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


def markdown_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """Format a Markdown table (numbers right-aligned)."""
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join([":---", ":---"] + ["---:"] * (len(header) - 2)) + "|")
    lines += ["| " + " | ".join(line) + " |" for line in body]
    return "\n".join(lines)


def write_markdown(
    path: Path, meta: dict[str, Any], rows: Sequence[Row], config: Config, lines: Sequence[str]
) -> None:
    """Write ``bench.md``: the setup, one table per (mode, threads) and the summary."""
    parts = [
        "# eml_ops benchmark",
        "",
        f"{meta['date']}; torch {meta['torch_version']}; {meta['cpu_model']} "
        f"({meta['cpu_count']} cores, ISA {meta['isa']}); {meta['dtype']}; "
        f"single-core FMA peak {meta['fma_peak_gflops_1core']:.1f} GFLOP/s.",
        "",
        f"Median of {config.repeats} interleaved samples of >= {1e3 * config.min_time:g} ms each. "
        "Speed-up = PyTorch time / backend time, measured in the same run (> 1: faster than "
        "PyTorch). Flops: forward 2MNK, train step 6MNK. Shapes are MxKxN (batch x in x out).",
    ]
    for title, header, body in tables(rows, config):
        parts += ["", f"## {title}", "", markdown_table(header, body)]
    if config.skipped:
        parts += ["", f"Skipped: {len(config.skipped)} runs ({config.skipped[0]['reason']})."]
    if meta.get("python_threads"):
        header, body = python_threads_table(meta["python_threads"])
        parts += ["", "## 2 Python threads", "",
                  f"forward {meta['python_threads'][0]['shape']}, one intra-op thread "
                  "(torch.set_num_threads(1)); calls/s of one Python thread and of two calling "
                  "at once; speed-up over F.linear with two threads.", "",
                  markdown_table(header, body)]
    parts += ["", "## Summary", ""] + [f"- {line}" for line in lines]
    path.write_text("\n".join(parts) + "\n")


def write_plot(path: Path, rows: Sequence[Row], config: Config) -> None:
    """Write ``bench.png``: speed-up over PyTorch per shape and backend, per (mode, threads)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_rows, n_cols = len(config.modes), len(config.threads)
    fig, axes = plt.subplots(
        n_rows,
        n_cols,
        figsize=(max(6.0, 0.6 * len(config.shapes) * n_cols), 4.0 * n_rows),
        squeeze=False,
    )
    width = 0.8 / max(1, len(config.backends))
    for i, mode in enumerate(config.modes):
        for j, threads in enumerate(config.threads):
            ax = axes[i][j]
            labels = [
                s.label
                for s in config.shapes
                if any(r.mode == mode and r.threads == threads and r.shape == s.label for r in rows)
            ]
            for b, name in enumerate(config.backends):
                speed = {
                    r.shape: r.speedup
                    for r in rows
                    if r.mode == mode and r.threads == threads and r.candidate == name
                }
                xs = [x + (b - (len(config.backends) - 1) / 2) * width for x in range(len(labels))]
                ys = [speed.get(label, math.nan) for label in labels]
                ax.bar(xs, ys, width, label=name)
            ax.axhline(1.0, color="black", linewidth=1)
            ax.set_xticks(range(len(labels)))
            ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=8)
            ax.set_yscale("log")
            ax.set_ylabel(f"speed-up over {BASELINE[mode]}")
            ax.set_title(f"{mode}, {threads} thread{'s' if threads > 1 else ''}")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --------------------------------------------------------------------------- main


def cases(config: Config) -> list[tuple[str, Shape, int]]:
    """All (mode, shape, threads) to run, in order."""
    return [
        (mode, shape, threads)
        for mode in config.modes
        for shape in config.shapes
        if mode in shape.modes
        for threads in config.threads
    ]


def run(config: Config) -> tuple[dict[str, Any], list[Row], list[dict[str, Any]]]:
    """Measure the peak, then every case with a progress bar; metadata, rows and summary."""
    from tqdm import tqdm

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        peak_1core = float(
            eml_ops._C.fma_peak_gflops(use_double=config.dtype == torch.float64, seconds=0.2)
        )
    finally:
        torch.set_num_threads(previous_threads)
    rows: list[Row] = []
    todo = cases(config)
    with tqdm(todo, desc="bench", unit="case", file=sys.stderr, dynamic_ncols=True) as bar:
        for mode, shape, threads in bar:
            bar.set_postfix_str(f"{mode} {shape.label} t={threads}")
            rows += bench_case(mode, shape, threads, config, peak_1core)
    meta = metadata(config, peak_1core)
    if "forward" in config.modes:
        meta["python_threads"] = bench_python_threads(config.python_threads_shape, config)
    return meta, rows, summarize(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark with command-line options ``argv``; the exit code."""
    config = make_config(sys.argv[1:] if argv is None else argv)
    start = time.perf_counter()
    meta, rows, summary = run(config)
    meta["elapsed_s"] = time.perf_counter() - start
    lines = summary_lines(rows, summary, ERROR_TOLERANCE[config.dtype])
    if meta.get("python_threads"):
        scaling = ", ".join(f"{r['candidate']} {r['scaling']:.2f}x" for r in meta["python_threads"])
        lines.append(f"2 Python threads (1 intra-op thread), throughput over 1: {scaling}")

    config.out.mkdir(parents=True, exist_ok=True)
    payload = {"metadata": meta, "rows": [asdict(r) for r in rows], "summary": summary}
    (config.out / "bench.json").write_text(json.dumps(payload, indent=1) + "\n")
    write_markdown(config.out / "bench.md", meta, rows, config, lines)
    if config.plot:
        write_plot(config.out / "bench.png", rows, config)

    print(
        f"{meta['cpu_model']}, {meta['cpu_count']} cores, ISA {meta['isa']}, {meta['dtype']}, "
        f"single-core FMA peak {meta['fma_peak_gflops_1core']:.1f} GFLOP/s"
    )
    for title, header, body in tables(rows, config):
        print(f"\n{title}\n{text_table(header, body)}")
    if meta.get("python_threads"):
        header, body = python_threads_table(meta["python_threads"])
        print(f"\n2 Python threads, forward {meta['python_threads'][0]['shape']}, "
              f"1 intra-op thread\n{text_table(header, body)}")
    print("\nSummary")
    print("\n".join(lines))
    print(f"\n{meta['elapsed_s']:.0f} s; results in {config.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
