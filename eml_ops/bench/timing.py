"""Timing: calibrated inner repeat counts and round-robin samples.

One (mode, shape, threads, dtype) case becomes rows; also the two-Python-threads throughput
and the call overhead at tiny shapes.
"""

from __future__ import annotations

import gc
import itertools
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

import eml_ops

from . import peers
from .candidates import (
    Candidate,
    forward_candidates,
    max_relative_error,
    mlp_candidates,
    overhead_candidates,
    selected,
    train_candidates,
)
from .suite import (
    FLOP_FACTOR,
    OPS_CANDIDATE,
    OVERHEAD_MODES,
    OVERHEAD_SHAPES,
    Config,
    Row,
    Shape,
    dtype_name,
    skip_reason,
)

# Seconds one sample of the call-overhead table lasts at least, at most: thousands of calls
# of a microsecond or two, plenty for a stable median while the table stays a few seconds.
OVERHEAD_MAX_MIN_TIME = 0.01


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


def first_calls(candidates: Sequence[Candidate]) -> dict[str, Any]:
    """Call each candidate's ``result()`` once, timed: warm-up, compilation, the outputs.

    Each first call runs inside the candidate's ``first_call_context``. A candidate with
    ``may_fail`` whose first call raises is dropped, its error kept under ``failed``.
    Returns the candidates kept, and per name their outputs, first-call seconds and errors
    relative to the first candidate's (the baseline's) outputs.
    """
    kept, outputs, seconds, failed = [], {}, {}, {}
    for cand in candidates:
        start = time.perf_counter()
        try:
            with selected(cand.backend), cand.first_call_context():
                outputs[cand.name] = cand.result()
        except Exception as error:
            if not cand.may_fail:
                raise
            failed[cand.name] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
            continue
        seconds[cand.name] = time.perf_counter() - start
        kept.append(cand)
    want = outputs[candidates[0].name]
    errors = {name: max_relative_error(got, want) for name, got in outputs.items()}
    return {"kept": kept, "first_call_s": seconds, "errors": errors, "failed": failed}


def time_case(candidates: Sequence[Candidate], threads: int, config: Config) -> dict[str, Any]:
    """On ``threads`` intra-op threads: :func:`first_calls`, then :func:`measure` the kept ones.

    The first candidate is the baseline (it may not fail). Returns first_calls' entries and
    the median seconds per call of each kept candidate (``medians``), with its samples and
    inner count (``inner``, ``samples``).
    """
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        first = first_calls(candidates)
        timing = measure(first["kept"], config.repeats, config.min_time)
    finally:
        torch.set_num_threads(previous_threads)
    medians = {name: statistics.median(s) for name, s in timing["samples"].items()}
    return {**first, **timing, "medians": medians}


def case_rows(
    timed: dict[str, Any], *, mode: str, shape: Shape, threads: int, dtype: torch.dtype,
    flops: float, peak_1core: float, run: int, label: str | None = None,
) -> list[Row]:
    """Rows of a :func:`time_case` result: speed-ups over its first candidate, GFLOP/s.

    ``label``: the rows' case name instead of the shape's ``MxKxN`` (a model's).
    """
    base = timed["medians"][timed["kept"][0].name]
    rows = []
    for cand in timed["kept"]:
        median = timed["medians"][cand.name]
        gflops = flops / median / 1e9
        rows.append(
            Row(
                mode=mode,
                shape=label or shape.label,
                m=shape.m,
                k=shape.k,
                n=shape.n,
                kind=shape.kind,
                threads=threads,
                candidate=cand.name,
                inner=timed["inner"][cand.name],
                median_s=median,
                samples_s=timed["samples"][cand.name],
                gflops=gflops,
                speedup=base / median,
                fraction_of_peak=gflops / (peak_1core * threads),
                max_error=timed["errors"][cand.name],
                dtype=dtype_name(dtype),
                run=run,
                first_call_s=timed["first_call_s"][cand.name],
            )
        )
    return rows


def bench_case(
    mode: str, shape: Shape, threads: int, dtype: torch.dtype, config: Config,
    peak_1core: float, run: int = 0,
) -> list[Row]:
    """Measure all candidates on one (mode, shape, threads, dtype); rows with speed-ups.

    ``peak_1core``: the single-core FMA peak the dtype's arithmetic runs at (GFLOP/s);
    ``run``: the index of the pass over the suite, recorded in the rows. With
    ``config.peers``, the peers of :mod:`.peers` compile the baseline's module (forward and
    train); what they report goes to ``config.peer_notes``.
    """
    backends = []
    for name in config.backends:
        reason = skip_reason(name, shape)
        if reason is None:
            backends.append(name)
            continue
        skip = {
            "mode": mode,
            "shape": shape.label,
            "threads": threads,
            "dtype": dtype_name(dtype),
            "candidate": name,
            "reason": reason,
        }
        if skip not in config.skipped:  # once, not once per run
            config.skipped.append(skip)
    make = {"forward": forward_candidates, "train": train_candidates, "mlp": mlp_candidates}[mode]
    candidates = make(shape, backends, dtype, config.seed)
    if config.peers and mode in peers.PEER_MODES:
        candidates += peers.peer_candidates(config.peers, candidates[0], mode == "train")
    timed = time_case(candidates, threads, config)
    where = {"mode": mode, "case": shape.label, "threads": threads, "dtype": dtype_name(dtype)}
    peers.record_notes(config.peer_notes, timed, where, run)
    return case_rows(
        timed, mode=mode, shape=shape, threads=threads, dtype=dtype,
        flops=FLOP_FACTOR[mode] * shape.mnk, peak_1core=peak_1core, run=run,
    )  # fmt: skip


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
    In the run's first dtype.
    """
    backends = [name for name in config.backends if skip_reason(name, shape) is None]
    candidates = forward_candidates(shape, backends, config.dtypes[0], config.seed)
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


def bench_call_overhead(config: Config) -> list[dict[str, Any]]:
    """Microseconds per call at the tiny :data:`OVERHEAD_SHAPES`, 1 thread, float32.

    Per (mode, shape) of :data:`OVERHEAD_MODES` x :data:`OVERHEAD_SHAPES`, the candidates of
    :func:`~eml_ops.bench.candidates.overhead_candidates` (PyTorch first) are timed like the
    suite's (calibrated inner counts, interleaved samples, the median), with samples of at
    most :data:`OVERHEAD_MAX_MIN_TIME` seconds. Each entry has the time per call in us and its
    difference to PyTorch's (``diff_us``, positive: slower than PyTorch).
    """
    min_time = min(config.min_time, OVERHEAD_MAX_MIN_TIME)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    entries = []
    try:
        for mode, shape in itertools.product(OVERHEAD_MODES, OVERHEAD_SHAPES):
            candidates = overhead_candidates(mode, shape, config.backends)
            timing = measure(candidates, config.repeats, min_time)
            medians = {name: statistics.median(s) for name, s in timing["samples"].items()}
            base_us = 1e6 * medians[candidates[0].name]
            entries += [
                {
                    "mode": mode,
                    "shape": shape.label,
                    "threads": 1,
                    "dtype": "float32",
                    "candidate": cand.name,
                    # None: PyTorch's; the dispatcher op runs on the default backend.
                    "backend": eml_ops.get_backend() if cand.name == OPS_CANDIDATE
                    else cand.backend,
                    "inner": timing["inner"][cand.name],
                    "samples_s": timing["samples"][cand.name],
                    "us_per_call": 1e6 * medians[cand.name],
                    "diff_us": 1e6 * medians[cand.name] - base_us,
                }
                for cand in candidates
            ]
    finally:
        torch.set_num_threads(previous_threads)
    return entries
