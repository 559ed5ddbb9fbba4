"""Run-time choice of the GEMM backend behind the CPU kernels of the ``eml::`` operators.

Backends: ``aten`` (ATen matmul, i.e. MKL/oneDNN), ``reference`` (our plain loops),
``blocked`` (our packed, cache-blocked GEMM) and ``tpp`` (LIBXSMM JIT kernels, when built
with LIBXSMM). The default is ``blocked``: it is built everywhere and computes every dtype
and shape our GEMMs take, while ``tpp`` needs LIBXSMM, computes float32 and float64 only and
is faster than ``blocked`` on some shapes and slower on others (``python -m eml_ops bench
--backends blocked,tpp`` measures both on the CPU at hand). The environment variable
``EML_OPS_BACKEND`` overrides the default at import.

Scope, as with ``torch.autocast``:

* :func:`set_backend` sets the **process default**, used by every thread that has no
  override of its own. It is atomic: each such thread's next call uses the new backend, a call
  already running finishes on the one it started with.
* :func:`use_backend` overrides the backend for the **calling thread** while its block runs
  and then restores what that thread had before (its previous override, or none). Other
  threads, and threads started inside the block, keep following the process default: a
  worker thread that should use a backend enters its own ``use_backend``. Blocks nest.
  Inside a block, :func:`set_backend` still changes the process default, but this thread
  keeps the block's backend until the block ends.
* :func:`get_backend` names the backend the calling thread's next call runs.
* A kernel reads the selection once, on the thread that calls it. Autograd runs the backward
  of CPU tensors on the thread that calls ``backward()``, so a backward inside the block runs
  on the block's backend, and one outside it on whatever that thread selects then (as
  autocast applies where the op runs). Like autocast's, the override belongs to the thread,
  not to an ``asyncio`` task or a ``contextvars`` context: tasks sharing a thread share it.

Backends other than ``aten`` run float32, float64, float16 and bfloat16 on our GEMMs (the
16-bit types computed in float32 and rounded once; ``tpp`` hands the 16-bit types to
``blocked``). On CPUs with bfloat16 dot products (AVX512_BF16, AMX) bfloat16 takes the policy
``auto``: the small products on ours (few rows, or below 2^20 multiply-adds; ``python -m
eml_ops info`` says which) and the rest on ATen, whose oneDNN kernels are several times faster
there. ``EML_OPS_BF16=own|aten|auto``
(or ``eml_ops._C.set_bf16_policy``) overrides that choice. Other dtypes, and tensors on
other devices, always go through ATen.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from . import _C

ENVIRONMENT_VARIABLE = "EML_OPS_BACKEND"
BF16_ENVIRONMENT_VARIABLE = "EML_OPS_BF16"


def available_backends() -> list[str]:
    """Names of the backends compiled in and usable on this CPU, e.g. ``['aten', ...]``."""
    return list(_C.available_backends())


def get_backend() -> str:
    """Name of the backend the calling thread's next CPU kernel runs."""
    return str(_C.get_backend())


def set_backend(name: str) -> None:
    """Set the process default backend (threads inside :func:`use_backend` keep theirs).

    Raises:
        ValueError: ``name`` is unknown or not available in this build; the message names
            the choices.
    """
    _check_name("set_backend", name)
    _C.set_backend(name)  # std::invalid_argument arrives as ValueError


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[str]:
    """Run a block of the calling thread on backend ``name``, then restore its previous one.

    Local to the thread (see the module docstring): other threads are not affected.

    Raises:
        ValueError: ``name`` is unknown or not available; nothing is changed then.
    """
    _check_name("use_backend", name)
    previous = _C.get_thread_backend()  # None: this thread follows the process default
    _C.set_thread_backend(name)
    try:
        yield name
    finally:
        _C.set_thread_backend(previous)


def _check_name(function: str, name: object) -> None:
    if not isinstance(name, str):
        raise TypeError(f"eml_ops.{function}: expected a backend name, got {type(name).__name__}")


def apply_environment() -> None:
    """Apply ``EML_OPS_BACKEND`` and ``EML_OPS_BF16`` if set; ValueError on a bad value."""
    for variable, apply in ((ENVIRONMENT_VARIABLE, set_backend),
                            (BF16_ENVIRONMENT_VARIABLE, _C.set_bf16_policy)):
        requested = os.environ.get(variable)
        if requested:
            try:
                apply(requested)
            except ValueError as error:
                raise ValueError(f"{variable}={requested!r}: {error}") from None
