"""Peers: what a CPU user would run instead of ``nn.Linear``, timed beside it in the same run.

Each peer is ``torch.compile`` of a copy of the baseline's module (:class:`Peer`):

* ``inductor``: torch.compile's default, Inductor (its GEMMs stay ATen's);
* ``freezing``: Inductor with ``freezing`` (weights become constants: folded, prepacked for
  oneDNN); inference only;
* ``max-autotune``: Inductor max-autotune choosing, per GEMM, between ATen and Inductor's C++
  GEMM template (``max_autotune_gemm_backends="CPP,ATEN"``). The template takes constant
  weights only (Inductor's ``use_cpp_gemm_template`` wants a module buffer), so this peer
  freezes too: inference only;
* ``zentorch``: AMD's plugin and compile backend (``torch.compile(backend="zentorch")``). It
  rewrites the graph only on CPUs with AVX-512 and logs a warning otherwise; that warning,
  caught during its compilation, marks it "inactive" in the report;
* ``eml-compile``: not a peer but eml_ops itself under torch.compile (Inductor): the module
  converted by :func:`eml_ops.replace_linear`, then compiled;
* ``eml-frozen``: eml_ops with frozen weights (:func:`eml_ops.freeze`: each weight packed
  once, as Inductor's freezing and zentorch do), in eager mode; inference only;
* ``eml-frozen-compile``: the same, then torch.compile (Inductor); inference only.

A peer whose package is missing is *absent*: listed as such, never timed or imitated. The first
call of a compiled candidate compiles it (outside the timed samples; its seconds are reported);
a compiler that raises drops its candidate for that case, reported as failed. The compiler
caches are fresh for the run (:func:`fresh_compiler_caches`), so that the first run's compile
times are those of a cold start.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import importlib.util
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

import eml_ops

from .candidates import Candidate

# The modes of the shape suite whose baselines the peers compile.
PEER_MODES = ("forward", "train")
# What zentorch logs, in its graph pass, on a CPU without AVX-512 (then it changes nothing).
ZENTORCH_INACTIVE_TEXT = "only available on CPUs with AVX-512"
# ZenDNN's weight cache, by ZENDNNL_MATMUL_WEIGHT_CACHE (read once per process), as measured
# with zentorch 2.13.0.2 on Zen 4 (docs/explanation/performance.md, Models on Zen 4).
ZENTORCH_WEIGHT_CACHE = {
    None: "in place (ZENDNNL_MATMUL_WEIGHT_CACHE unset): it reorders weights in their own "
          "buffers, which makes its training step wrong",
    "1": "out of place (ZENDNNL_MATMUL_WEIGHT_CACHE=1): gradients right, but after an "
         "optimizer step the output still comes from the old weights",
    "0": "off (ZENDNNL_MATMUL_WEIGHT_CACHE=0): weights reordered on every call, training "
         "step right",
}


def zentorch_weight_cache(value: str | None) -> str:
    """Describe ZenDNN's weight cache with ZENDNNL_MATMUL_WEIGHT_CACHE set to ``value``."""
    known = ZENTORCH_WEIGHT_CACHE.get(value)
    return known or f"ZENDNNL_MATMUL_WEIGHT_CACHE={value}, a setting not measured here"


@dataclass(frozen=True)
class Peer:
    """One way to compile a module: its option name, column name and torch.compile settings."""

    key: str
    name: str
    description: str
    # Inductor options (torch.compile's ``options``; None with another backend).
    options: dict[str, Any] | None = field(default_factory=dict)
    backend: str = "inductor"
    # Weights frozen into constants: no training step.
    inference_only: bool = False
    # The package the peer needs (absent when it cannot be imported).
    package: str | None = None
    # eml_ops itself (replace_linear first), not a peer of it: not in "best peer".
    is_eml: bool = False
    # eml_ops with frozen weights (eml_ops.freeze instead of replace_linear).
    frozen: bool = False
    # Run through torch.compile (else in eager mode, as converted).
    compiled: bool = True
    # Its compiled code caches reordered weights by their address: its copies are kept
    # (KEPT_FOR_WEIGHT_CACHES) so that no later model's weight lands on a cached address.
    caches_weights_by_address: bool = False


PEERS: dict[str, Peer] = {
    peer.key: peer
    for peer in (
        Peer("inductor", "Inductor", "torch.compile (Inductor, defaults)"),
        Peer("freezing", "Inductor+freezing", "torch.compile, Inductor freezing=True",
             {"freezing": True}, inference_only=True),
        Peer("max-autotune", "max-autotune CPP",
             "torch.compile, Inductor max_autotune with max_autotune_gemm_backends=CPP,ATEN "
             "and freezing (the C++ GEMM template takes constant weights only)",
             {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"},
             inference_only=True),
        Peer("zentorch", "zentorch",
             "torch.compile(backend='zentorch'), AMD ZenDNN plugin; its weight cache "
             + zentorch_weight_cache(os.environ.get("ZENDNNL_MATMUL_WEIGHT_CACHE")),
             None, backend="zentorch", package="zentorch", caches_weights_by_address=True),
        Peer("eml-compile", "eml+Inductor",
             "eml_ops.replace_linear, then torch.compile (Inductor, defaults)", is_eml=True),
        Peer("eml-frozen", "eml frozen",
             "eml_ops.freeze (each weight packed once), eager; inference only", None,
             inference_only=True, is_eml=True, frozen=True, compiled=False),
        Peer("eml-frozen-compile", "eml frozen+Inductor",
             "eml_ops.freeze, then torch.compile (Inductor, defaults); inference only",
             inference_only=True, is_eml=True, frozen=True),
    )
}  # fmt: skip


def absent_reason(peer: Peer) -> str | None:
    """Why ``peer`` cannot run here (its package missing or failing to import), or None."""
    if peer.package is None:
        return None
    if importlib.util.find_spec(peer.package) is None:
        return f"{peer.package} is not installed"
    try:
        importlib.import_module(peer.package)  # zentorch registers its backend on import
    except Exception as error:  # an ABI mismatch raises ImportError, OSError, RuntimeError...
        return f"import {peer.package} failed: {type(error).__name__}: {error}"
    return None


def peer_status(keys: Sequence[str]) -> list[dict[str, Any]]:
    """Per peer: name, what it is, ``absent`` or ``available`` (with why absent), version."""
    statuses = []
    for key in keys:
        peer = PEERS[key]
        reason = absent_reason(peer)
        version = torch.__version__
        if peer.package is not None and reason is None:
            version = getattr(importlib.import_module(peer.package), "__version__", "unknown")
        statuses.append({
            "peer": key, "name": peer.name, "description": peer.description,
            "status": "absent" if reason else "available", "reason": reason,
            "version": None if reason else version, "inference_only": peer.inference_only,
            "is_eml": peer.is_eml,
        })  # fmt: skip
    return statuses


@contextlib.contextmanager
def fresh_compiler_caches(enabled: bool) -> Iterator[None]:
    """Inductor's on-disk and in-memory caches fresh (a temporary folder) for a block.

    So the first run's compile times are a cold start; later runs of the same process may
    find their code there (the key includes the thread count, which Inductor's C++ bakes in).
    """
    if not enabled:
        yield
        return
    from torch._inductor.utils import fresh_cache

    with fresh_cache():
        yield


class _LogCatcher(logging.Handler):
    """Keep the messages of the records a logger passes (WARNING and above)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _graph_breaks() -> int:
    """Dynamo's graph breaks so far in this process."""
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


@contextlib.contextmanager
def _compiling(peer: Peer, notes: list[str]) -> Iterator[None]:
    """Around a compiled candidate's first call: what its compilation reports, into ``notes``.

    zentorch's backend sets Inductor's global ``joint_custom_post_pass`` to its own pass:
    restored afterwards, so that the other candidates compile with plain Inductor. Its
    warnings are caught: the one about AVX-512 makes it ``inactive``, else it is ``active``.
    Graph breaks, if any, are noted.
    """
    from torch._inductor import config as inductor_config

    post_pass = inductor_config.joint_custom_post_pass
    catcher = _LogCatcher()
    logger = logging.getLogger(peer.package or "torch._inductor")
    if peer.package is not None:
        logger.addHandler(catcher)
    breaks_before = _graph_breaks()
    try:
        yield
    finally:
        inductor_config.joint_custom_post_pass = post_pass
        if peer.package is not None:
            logger.removeHandler(catcher)
    breaks = _graph_breaks() - breaks_before
    if breaks:
        notes.append(f"{breaks} graph break(s)")
    if peer.package is not None:
        said = [m for m in catcher.messages if ZENTORCH_INACTIVE_TEXT in m]
        notes.append(f"inactive: {said[0]}" if said else "active")


# The copies compiled by peers that cache weights by address, alive to the end of the process:
# ZenDNN's default weight cache (in place) keeps a reordered weight per address, so a freed
# weight's address reused by a later case's weight (the next model, the next run) read the
# stale cache: zentorch's inference of the FFN came out wrong (1.6 relative) in a second run.
KEPT_FOR_WEIGHT_CACHES: list[torch.nn.Module] = []


def _compile(peer: Peer, module: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile`` a copy of ``module`` the peer's way (converted first for eml)."""
    module = copy.deepcopy(module)
    if peer.caches_weights_by_address:
        KEPT_FOR_WEIGHT_CACHES.append(module)
    if peer.is_eml:
        module = eml_ops.freeze(module) if peer.frozen else eml_ops.replace_linear(module)
    if not peer.compiled:
        return module
    return torch.compile(module, backend=peer.backend, options=peer.options)


def peer_candidates(keys: Sequence[str], baseline: Candidate, training: bool) -> list[Candidate]:
    """Build the available peers of ``keys`` as candidates doing ``baseline``'s work.

    Each compiles a copy of ``baseline.module`` and does ``baseline.step`` on it. Inference-only
    peers are left out of a training step; absent ones are left out (:func:`peer_status`
    lists them). Dynamo's code cache is reset first: one case's compiled code is not the
    next's, and the cases do not add up to Dynamo's recompile limit. The candidates come in
    the order of ``keys``, those of other backends than Inductor last.
    """
    if baseline.module is None or baseline.step is None:
        raise ValueError(f"{baseline.name} has no module to compile for the peers")
    torch._dynamo.reset()
    out = []
    # Other backends (zentorch) compile last: after zentorch had compiled a training step,
    # eml+Inductor's compiled gradients of the FFN came out 1.4x their magnitude off (right
    # when compiled alone or before it), although joint_custom_post_pass is restored.
    for key in sorted(keys, key=lambda key: PEERS[key].backend != "inductor"):
        peer = PEERS[key]
        if (peer.inference_only and training) or absent_reason(peer) is not None:
            continue
        run, result = baseline.step(_compile(peer, baseline.module))
        notes: list[str] = []
        context = functools.partial(_compiling, peer, notes)
        out.append(Candidate(peer.name, None, run, result, first_call_context=context,
                             may_fail=True, notes=notes))  # fmt: skip
    return out


def record_notes(
    into: list[dict[str, Any]], timed: dict[str, Any], where: dict[str, Any], run: int
) -> None:
    """Append what the compiled candidates of a timed case reported (once over the runs).

    ``timed``: :func:`~eml_ops.bench.timing.time_case`'s result; ``where``: the case's mode,
    label, threads and dtype.
    """
    found = [(cand.name, note) for cand in timed["kept"] for note in cand.notes]
    found += [(name, f"failed: {error}") for name, error in timed["failed"].items()]
    for name, note in found:
        entry = {**where, "candidate": name, "note": note}
        if all({k: v for k, v in e.items() if k != "run"} != entry for e in into):
            into.append({**entry, "run": run})


def note_of(notes: Sequence[dict[str, Any]], where: dict[str, Any], candidate: str) -> str | None:
    """Return the first note recorded for ``candidate`` in the case ``where``, or None."""
    for entry in notes:
        if entry["candidate"] == candidate and all(entry.get(k) == v for k, v in where.items()):
            return entry["note"]
    return None
