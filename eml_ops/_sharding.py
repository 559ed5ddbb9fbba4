"""DTensor sharding strategies for the eml:: operators: tensor parallelism runs our kernels.

With these, ``eml::linear``, ``eml::linear_forward`` and ``eml::linear_backward`` accept
:class:`~torch.distributed.tensor.DTensor` arguments: DTensor picks the cheapest of the
shardings below for the placements it is given, redistributes the arguments to it, runs our
op on the local shards and wraps the results. The autograd kernel of ``eml::linear`` runs
above DTensor's dispatch, so backward reaches ``eml::linear_backward`` (or ``eml::linear``
under ``create_graph``) with DTensors too.

Shardings over one mesh dimension, for ``Y = X W^T + b`` with ``X`` of ``n`` dims:

=================  =============  ===========  ==========  ==============
name               ``X``          ``W``        ``b``       ``Y``
=================  =============  ===========  ==========  ==============
replicated         Replicate      Replicate    Replicate   Replicate
column-wise        Replicate      Shard(0)     Shard(0)    Shard(n-1)
row-wise           Shard(n-1)     Shard(1)     Partial     Partial
batch / sequence   Shard(d<n-1)   Replicate    Replicate   Shard(d)
partial input      Partial        Replicate    Partial     Partial
=================  =============  ===========  ==========  ==============

(a ``Partial`` bias is the replicated one split so that the partial outputs sum to ``Y``).
``eml::linear_backward`` has the matching shardings of ``dL/dX = G W``,
``dL/dW = G^T X`` and ``dL/db = sum G``. On a mesh of several dimensions every combination
of these is allowed, one per mesh dimension.

Importing ``torch.distributed.tensor`` costs about a second, so ``import eml_ops`` does not:
:func:`install` registers the strategies at once if DTensor is already imported, and
otherwise right after the first import of ``torch.distributed.tensor``, whoever imports it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch

_DTENSOR_MODULE = "torch.distributed.tensor"
_lock = threading.Lock()
_registered = False

Placements = list[Any]  # one placement (or None for a non-tensor argument) per output/input


def _forward_shardings(
    input: Any, weight: Any, bias: Any = None
) -> list[tuple[Placements, Placements]]:
    """(output, [input, weight, bias]) placements over one mesh dim for ``X W^T + b``."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    def with_bias(placement: Any) -> Any:
        return None if bias is None else placement

    features = input.ndim - 1
    replicate = Replicate()
    shardings = [
        ([replicate], [replicate, replicate, with_bias(replicate)]),
        # column-wise W: each rank computes some output features
        ([Shard(features)], [replicate, Shard(0), with_bias(Shard(0))]),
        # row-wise W: each rank sums over some input features; the bias is added once
        ([Partial()], [Shard(features), Shard(1), with_bias(Partial())]),
        # Y is linear in X: partial inputs give partial outputs
        ([Partial()], [Partial(), replicate, with_bias(Partial())]),
    ]
    for batch_dim in range(features):  # batch or sequence dims: rows are independent
        batch = Shard(batch_dim)
        shardings.append(([batch], [batch, replicate, with_bias(replicate)]))
    return shardings


def _backward_shardings(
    grad_output: Any, input: Any, weight: Any, output_mask: Sequence[bool]
) -> list[tuple[Placements, Placements]]:
    """([dX, dW, db], [G, X, W, mask]) placements over one mesh dim for the three gradients."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    features = input.ndim - 1
    replicate = Replicate()
    shardings = [
        ([replicate, replicate, replicate], [replicate, replicate, replicate, None]),
        # column-wise W: G sharded on out_features; dX sums over them
        ([Partial(), Shard(0), Shard(0)], [Shard(features), replicate, Shard(0), None]),
        # row-wise W: X sharded on in_features
        ([Shard(features), Shard(1), replicate], [replicate, Shard(features), Shard(1), None]),
        # a partial G gives partial gradients (all three are linear in G)
        ([Partial(), Partial(), Partial()], [Partial(), replicate, replicate, None]),
        # a partial X (saved by the partial-input forward) gives a partial dW only
        ([replicate, Partial(), replicate], [replicate, Partial(), replicate, None]),
    ]
    for batch_dim in range(features):
        batch = Shard(batch_dim)
        shardings.append(([batch, Partial(), Partial()], [batch, batch, replicate, None]))
    return [(_only_masked(outputs, output_mask), inputs) for outputs, inputs in shardings]


def _only_masked(placements: Placements, output_mask: Sequence[bool]) -> Placements:
    """Drop the placements of gradients outside the mask: those are None (torch 2.11 checks)."""
    return [placement if wanted else None
            for placement, wanted in zip(placements, output_mask, strict=True)]


def register_strategies() -> None:
    """Register the shardings with DTensor (idempotent; imports ``torch.distributed.tensor``)."""
    global _registered
    with _lock:
        if _registered:
            return
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
        from torch.distributed.tensor.experimental import register_sharding

        ops = torch.ops.eml
        register_sharding([ops.linear.default, ops.linear_forward.default])(_forward_shardings)
        register_sharding(ops.linear_backward.default)(_backward_shardings)
        # register_sharding hashes only int arguments into DTensor's propagation cache;
        # output_mask (argument 3) decides which gradients exist, so it must be hashed too.
        propagator = DTensor._op_dispatcher.sharding_propagator
        backward = ops.linear_backward.default
        propagator.register_op_strategy(
            backward,
            propagator.op_strategy_funcs[backward],
            RuntimeSchemaInfo(static_argnum=3, needs_pytree=True),
        )
        _registered = True


def is_registered() -> bool:
    """Whether DTensor knows the eml:: ops' shardings in this process."""
    return _registered


def _register_or_warn() -> None:
    try:
        register_strategies()
    except Exception as error:  # noqa: BLE001  (never break the user's import of DTensor)
        warnings.warn(
            f"eml_ops: could not register DTensor sharding strategies for eml:: ops "
            f"({type(error).__name__}: {error}); eml_ops on DTensors will not work",
            RuntimeWarning,
            stacklevel=2,
        )


class _LoaderThenRegister(importlib.abc.Loader):
    """Wraps the loader of ``torch.distributed.tensor``: register once it has run."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # Give the module its real loader back before anything else sees it.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        _register_or_warn()


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; hands ``torch.distributed.tensor``'s spec a registering loader."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _DTENSOR_MODULE:
            return None
        _remove_finder(self)  # one import is enough, and the finders below must not see us
        for finder in sys.meta_path:
            find_spec: Callable[..., Any] | None = getattr(finder, "find_spec", None)
            spec = find_spec(fullname, path, target) if find_spec is not None else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _LoaderThenRegister(spec.loader)
                return spec
        return None


def _remove_finder(finder: importlib.abc.MetaPathFinder) -> None:
    try:
        sys.meta_path.remove(finder)
    except ValueError:
        pass


def install() -> None:
    """Register now if DTensor is imported, else once ``torch.distributed.tensor`` is imported.

    Does nothing where ``torch.distributed`` is not available.
    """
    if not torch.distributed.is_available():
        return
    if _DTENSOR_MODULE in sys.modules:
        _register_or_warn()
    elif not any(isinstance(finder, _RegisterAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())


install()
