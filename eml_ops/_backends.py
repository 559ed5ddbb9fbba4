"""Run-time choice of the GEMM backend behind the CPU kernels of the ``eml::`` operators.

Backends: ``aten`` (ATen matmul, i.e. MKL/oneDNN), ``reference`` (our plain loops),
``blocked`` (our packed, cache-blocked GEMM) and ``tpp`` (LIBXSMM JIT kernels, when built
with LIBXSMM). The default is the fastest available; the environment variable
``EML_OPS_BACKEND`` overrides it at import.

Scope: the selection is process-wide. Setting it is atomic and thread-safe: every thread's
next call uses the new backend, a call already running finishes on the old one.
:func:`use_backend` therefore changes the backend for all threads while its block runs.
Backends other than ``aten`` run float32 and float64; other dtypes, and tensors on other
devices, always go through ATen.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from . import _C

ENVIRONMENT_VARIABLE = "EML_OPS_BACKEND"


def available_backends() -> list[str]:
    """Names of the backends compiled in and usable on this CPU, e.g. ``['aten', ...]``."""
    return list(_C.available_backends())


def get_backend() -> str:
    """Name of the backend the CPU kernels use now."""
    return str(_C.get_backend())


def set_backend(name: str) -> None:
    """Select the backend process-wide.

    Raises:
        ValueError: ``name`` is unknown or not available in this build; the message names
            the choices.
    """
    if not isinstance(name, str):
        raise TypeError(f"eml_ops.set_backend: expected a backend name, got {type(name).__name__}")
    _C.set_backend(name)  # std::invalid_argument arrives as ValueError


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[str]:
    """Run a block on backend ``name`` and restore the previous backend afterwards.

    The switch is process-wide (see the module docstring), so other threads see it too.
    """
    previous = get_backend()
    set_backend(name)
    try:
        yield name
    finally:
        set_backend(previous)


def apply_environment() -> None:
    """Apply ``EML_OPS_BACKEND`` if set; ValueError if it names no available backend."""
    requested = os.environ.get(ENVIRONMENT_VARIABLE)
    if requested:
        try:
            set_backend(requested)
        except ValueError as error:
            raise ValueError(f"{ENVIRONMENT_VARIABLE}={requested!r}: {error}") from None
