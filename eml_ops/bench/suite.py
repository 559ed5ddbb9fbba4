"""What the benchmark measures: modes, baselines, dtypes and the shape suites.

Also the run's settings (:class:`Config`), the record of one measurement (:class:`Row`) and
of one candidate on one shape over all runs (:class:`Combined`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

# The modes run by default.
MODES = ("forward", "train")
# Every mode; "mlp" (on request): a training step of a three-layer MLP, K -> N -> K -> N with
# ReLUs, under torch.autocast("cpu") in the 16-bit dtypes (float32 weights: mixed precision),
# plain in float32 and float64.
ALL_MODES = (*MODES, "mlp")
# The baseline candidate of each mode: PyTorch's own implementation.
BASELINE = {"forward": "F.linear", "train": "nn.Linear", "mlp": "nn.Linear MLP"}
# Flops per call as a multiple of M*N*K: forward 2MNK; a training step adds grad_input and
# grad_weight, 2MNK each (the bias gradient's M*N additions are not counted); the MLP step
# is three of those.
FLOP_FACTOR = {"forward": 2, "train": 6, "mlp": 18}
# Backends with plain loops: run only on shapes up to this many M*N*K (tiny shapes).
SLOW_BACKEND_MAX_MNK = {"reference": 1 << 20}
# The dtypes --dtype takes, by name.
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
# A backend whose results differ from PyTorch's by more than this (relative to the largest
# magnitude) is reported. 16-bit results may differ by an ulp (2^-8, 2^-11 relative) where
# the two round the float32 sum differently, and more in the MLP step, whose gradients pass
# three layers of 16-bit rounding (both are as far from a float64 reference there).
ERROR_TOLERANCE = {
    torch.float32: 1e-3,
    torch.float64: 1e-9,
    torch.bfloat16: 5e-2,
    torch.float16: 2e-2,
}
#: Shapes of at least this many forward flops (2MNK) count in the "large" geometric mean:
#: below, a call's cost is mostly its overhead.
LARGE_SHAPE_FLOPS = 1e6


@dataclass(frozen=True)
class Shape:
    """A problem size: ``x`` is ``[m, k]``, ``W`` is ``[n, k]``, ``y`` is ``[m, n]``."""

    m: int
    k: int
    n: int
    kind: str = "custom"
    modes: tuple[str, ...] = ALL_MODES

    @property
    def label(self) -> str:
        """The shape as ``MxKxN``."""
        return f"{self.m}x{self.k}x{self.n}"

    @property
    def mnk(self) -> int:
        """The product ``M*N*K``."""
        return self.m * self.k * self.n

    @property
    def large(self) -> bool:
        """Whether the forward pass has at least :data:`LARGE_SHAPE_FLOPS` flops."""
        return 2 * self.mnk >= LARGE_SHAPE_FLOPS


def _suite(
    entries: Sequence[tuple[int, int, int, str]], forward_only: Sequence[str] = ()
) -> list[Shape]:
    """Build shapes from ``(m, k, n, kind)`` tuples; labels in ``forward_only`` skip ``train``."""
    return [
        Shape(m, k, n, kind, ("forward",) if f"{m}x{k}x{n}" in forward_only else ALL_MODES)
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
# The call-overhead table: shapes so small that a call's time is nearly all overhead, timed on
# one thread in float32 (forward and training step).
OVERHEAD_SHAPES = (Shape(1, 1, 1, "tiny"), Shape(1, 16, 16, "tiny"))
OVERHEAD_MODES = ("forward", "train")
# The candidate calling the dispatcher op from Python, as scripted and compiled code does.
OPS_CANDIDATE = "torch.ops.eml.linear"


@dataclass
class Row:
    """The measurement of one candidate on one (mode, shape, threads, dtype)."""

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
    dtype: str = "float32"
    # Which pass over the suite measured it (0 to runs - 1; see Config.runs).
    run: int = 0
    # Seconds of the first, untimed call: warm-up, and compilation for compiled candidates.
    first_call_s: float = 0.0


@dataclass
class Combined:
    """One candidate on one (mode, shape, threads, dtype) over every run: geometric means.

    With a single run, the values are that run's row's.
    """

    mode: str
    shape: str
    m: int
    k: int
    n: int
    kind: str
    threads: int
    dtype: str
    candidate: str
    runs: int
    median_s: float
    gflops: float
    speedup: float
    speedup_min: float
    speedup_max: float
    fraction_of_peak: float
    # The largest over the runs.
    max_error: float
    # The first run's first call (compilation of compiled candidates: later runs may find
    # it in the compiler's caches).
    first_call_s: float = 0.0


@dataclass
class Config:
    """The parsed command line."""

    modes: list[str]
    backends: list[str]
    threads: list[int]
    shapes: list[Shape]
    repeats: int
    min_time: float
    dtypes: list[torch.dtype]
    out: Path
    plot: bool
    seed: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    python_threads_shape: Shape = PYTHON_THREADS_SHAPE
    # Whole passes over the suite, one after another (the results are their geometric means).
    runs: int = 1
    # Whether to time the call overhead at tiny shapes (see OVERHEAD_SHAPES).
    overhead: bool = True
    # Peers (keys of peers.PEERS) timed beside the baselines, and the models of the model
    # table (keys of models.MODELS; empty: no model table), full-size or --quick's tiny ones.
    peers: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    quick_models: bool = False
    # What the peers' first calls reported (absent, inactive, failed), filled by the run.
    peer_notes: list[dict[str, Any]] = field(default_factory=list)


def skip_reason(backend: str, shape: Shape) -> str | None:
    """Why ``backend`` is not run on ``shape`` (slow plain loops on a big shape), or None."""
    limit = SLOW_BACKEND_MAX_MNK.get(backend)
    if limit is not None and shape.mnk > limit:
        return f"{backend} runs only on shapes with M*N*K <= {limit}"
    return None


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def cases(config: Config) -> list[tuple[str, Shape, int, torch.dtype]]:
    """All (mode, shape, threads, dtype) to run, in order (a shape's dtypes one after another)."""
    return [
        (mode, shape, threads, dtype)
        for mode in config.modes
        for shape in config.shapes
        if mode in shape.modes
        for threads in config.threads
        for dtype in config.dtypes
    ]
