"""The implementations timed against each other, on shared inputs.

F.linear / an nn.Linear training step (the baselines) and the same work through eml_ops on
each backend; for the call-overhead table also ``torch.ops.eml.linear`` called from Python.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

import eml_ops

from .suite import BASELINE, OPS_CANDIDATE, Shape

# The work of one step on a module: ``run()`` does one call (the timed work), ``result()`` one
# call whose outputs are compared with the baseline's.
Step = tuple[Callable[[], object], Callable[[], list[torch.Tensor]]]


@dataclass
class Candidate:
    """One implementation to time: its name, the backend to select, and its work.

    A baseline that is a module's step also carries the module and how to step another
    (``step(module)``), so that other implementations of the same module (copies converted
    or compiled, :mod:`.peers`) can do the very same work on the same inputs.
    """

    name: str
    backend: str | None
    run: Callable[[], object]
    result: Callable[[], list[torch.Tensor]]
    module: nn.Module | None = None
    step: Callable[[nn.Module], Step] | None = None
    # Entered around the first call, which compiles a compiled candidate.
    first_call_context: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext
    # Whether an exception of the first call (a compiler's) drops the candidate, reported,
    # instead of ending the run.
    may_fail: bool = False
    # What the first call found out about the candidate (e.g. a compiler that did nothing).
    notes: list[str] = field(default_factory=list)


@contextlib.contextmanager
def selected(backend: str | None) -> Iterator[None]:
    """Select ``backend`` for a block (no change for the PyTorch baseline)."""
    if backend is None:
        yield
    else:
        with eml_ops.use_backend(backend):
            yield


def _forward_inputs(
    shape: Shape, dtype: torch.dtype, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random ``x``, ``w``, ``b`` of ``shape`` (``w`` scaled by 1/sqrt(K)); no grad required."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape.m, shape.k, generator=gen, dtype=dtype)
    w = torch.randn(shape.n, shape.k, generator=gen, dtype=dtype) / math.sqrt(shape.k)
    b = torch.randn(shape.n, generator=gen, dtype=dtype)
    return x, w, b


def inference_step(module: nn.Module, x: torch.Tensor) -> Step:
    """One call of ``module(x)`` without grad (the module in eval mode)."""
    module.eval()

    def run() -> torch.Tensor:
        with torch.no_grad():
            return module(x)

    return run, lambda: [run()]


def _linear_module(w: torch.Tensor, b: torch.Tensor) -> nn.Linear:
    """Return an ``nn.Linear`` of copies of ``w`` and ``b``: ``F.linear(x, w, b)`` as a module."""
    module = nn.Linear(w.shape[1], w.shape[0], dtype=w.dtype, device="meta")
    module.weight = nn.Parameter(w.clone())
    module.bias = nn.Parameter(b.clone())
    return module


def forward_candidates(
    shape: Shape, backends: Sequence[str], dtype: torch.dtype, seed: int
) -> list[Candidate]:
    """``F.linear(x, w, b)`` and ``eml_ops.linear(x, w, b)`` per backend, without grad.

    The baseline's module is the ``nn.Linear`` of ``w`` and ``b``, stepped by
    :func:`inference_step` on ``x``.
    """
    x, w, b = _forward_inputs(shape, dtype, seed)

    def make(
        fn: Callable[..., torch.Tensor],
    ) -> tuple[Callable[[], torch.Tensor], Callable[[], list[torch.Tensor]]]:
        def run() -> torch.Tensor:
            with torch.no_grad():
                return fn(x, w, b)

        return run, lambda: [run()]

    baseline = Candidate(
        BASELINE["forward"], None, *make(F.linear), module=_linear_module(w, b),
        step=lambda module: inference_step(module, x),
    )  # fmt: skip
    return [baseline] + [Candidate(name, name, *make(eml_ops.linear)) for name in backends]


def train_step(
    module: nn.Module, x: torch.Tensor, grad: torch.Tensor, autocast: torch.dtype | None = None
) -> Step:
    """One training step on ``module``: zero grads (set to None), forward, backward.

    ``autocast``: the forward runs under ``torch.autocast("cpu", dtype=autocast)``.
    """
    params = list(module.parameters())

    def run() -> torch.Tensor:
        x.grad = None
        for p in params:
            p.grad = None
        with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            y = module(x)
        y.backward(grad)
        return y

    def result() -> list[torch.Tensor]:
        y = run()
        grads = [t.grad for t in (x, *params)]
        return [y.detach()] + [g for g in grads if g is not None]

    return run, result


class OpsLinear(nn.Linear):
    """``nn.Linear`` whose forward calls ``torch.ops.eml.linear``, the dispatcher op.

    That is the path scripted and compiled code takes (``eml_ops.Layer`` in eager mode calls
    ``eml::linear`` from C++ instead, skipping the Python cost of a ``torch.ops`` call).
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Return ``torch.ops.eml.linear(input, weight, bias)``."""
        return torch.ops.eml.linear(input, self.weight, self.bias)


def train_candidates(
    shape: Shape, backends: Sequence[str], dtype: torch.dtype, seed: int, ops: bool = False
) -> list[Candidate]:
    """Build a training step through ``nn.Linear`` and through ``eml_ops.Layer`` per backend.

    All layers start from the same weight and bias (copies); all steps use the same input
    (``requires_grad=True``) and the same output gradient. ``ops``: also a step through
    :class:`OpsLinear` (``torch.ops.eml.linear``, on the default backend), last.
    """
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape.m, shape.k, generator=gen, dtype=dtype).requires_grad_(True)
    grad = torch.randn(shape.m, shape.n, generator=gen, dtype=dtype)
    baseline = nn.Linear(shape.k, shape.n, bias=True, dtype=dtype)
    out = [Candidate(BASELINE["train"], None, *train_step(baseline, x, grad), module=baseline,
                     step=lambda module: train_step(module, x, grad))]
    for name in backends:
        layer = eml_ops.Layer(shape.k, shape.n, bias=True, dtype=dtype)
        layer.load_state_dict(baseline.state_dict())
        out.append(Candidate(name, name, *train_step(layer, x, grad)))
    if ops:
        module = OpsLinear(shape.k, shape.n, bias=True, dtype=dtype)
        module.load_state_dict(baseline.state_dict())
        out.append(Candidate(OPS_CANDIDATE, None, *train_step(module, x, grad)))
    return out


def mlp_candidates(
    shape: Shape, backends: Sequence[str], dtype: torch.dtype, seed: int
) -> list[Candidate]:
    """Build a training step of a K -> N -> K -> N MLP (ReLUs), nn.Linear and eml_ops.

    The eml_ops models are copies converted with ``eml_ops.replace_linear``, one per backend.
    16-bit ``dtype``: float32 weights and input, the forward under autocast in ``dtype``
    (mixed precision); otherwise everything in ``dtype``.
    """
    half = dtype in (torch.bfloat16, torch.float16)
    param_dtype = torch.float32 if half else dtype
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape.m, shape.k, generator=gen, dtype=param_dtype).requires_grad_(True)
    grad = torch.randn(shape.m, shape.n, generator=gen, dtype=dtype)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        baseline = nn.Sequential(
            nn.Linear(shape.k, shape.n), nn.ReLU(), nn.Linear(shape.n, shape.k), nn.ReLU(),
            nn.Linear(shape.k, shape.n),
        ).to(param_dtype)  # fmt: skip
    autocast = dtype if half else None
    out = [Candidate(BASELINE["mlp"], None, *train_step(baseline, x, grad, autocast))]
    for name in backends:
        model = eml_ops.replace_linear(copy.deepcopy(baseline))
        out.append(Candidate(name, name, *train_step(model, x, grad, autocast)))
    return out


def overhead_candidates(mode: str, shape: Shape, backends: Sequence[str]) -> list[Candidate]:
    """Build the call-overhead candidates of ``mode`` on a tiny float32 ``shape``.

    Forward: ``F.linear``, ``eml_ops.linear`` per backend and ``torch.ops.eml.linear``, called
    as they are (the inputs do not require grad, so no graph is recorded; no ``no_grad``
    block, whose cost would be part of every call). Train: the training steps of
    :func:`train_candidates`, plus one through :class:`OpsLinear`. ``torch.ops.eml.linear``
    runs on the default backend.
    """
    if mode == "train":
        return train_candidates(shape, backends, torch.float32, seed=0, ops=True)
    x, w, b = _forward_inputs(shape, torch.float32, seed=0)

    def make(name: str, backend: str | None, fn: Callable[..., torch.Tensor]) -> Candidate:
        def run() -> torch.Tensor:
            return fn(x, w, b)

        return Candidate(name, backend, run, lambda: [run()])

    out = [make(BASELINE["forward"], None, F.linear)]
    out += [make(name, name, eml_ops.linear) for name in backends]
    return [*out, make(OPS_CANDIDATE, None, torch.ops.eml.linear)]


# A tensor of a result whose values are all at most this fraction of the result's largest
# is numerically zero (rounding noise of float32 sums, e.g. the gradient of attention's key
# bias, which the softmax cancels): its errors are measured against that fraction instead.
ZERO_FRACTION = 1e-4


def max_relative_error(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> float:
    """Largest ``|got - want| / max(|want|)`` over matching tensors (inf if shapes differ).

    ``max(|want|)`` is at least :data:`ZERO_FRACTION` of the largest ``|want|`` of them all.
    """
    if len(got) != len(want):
        return math.inf
    if any(g.shape != w.shape for g, w in zip(got, want, strict=True)):
        return math.inf
    magnitudes = [float(w.abs().max()) if w.numel() > 0 else 0.0 for w in want]
    floor = ZERO_FRACTION * max(magnitudes, default=0.0)
    worst = 0.0
    for g, w, magnitude in zip(got, want, magnitudes, strict=True):
        if w.numel() == 0:
            continue
        scale = max(magnitude, floor, torch.finfo(w.dtype).tiny)
        worst = max(worst, float((g.double() - w.double()).abs().max()) / scale)
    return worst
