"""eml_ops: a fast, differentiable, scriptable and compile-able linear layer for PyTorch.

``y = x W^T (+ b)`` as the custom operators ``torch.ops.eml.linear`` (differentiable, with a
C++ autograd kernel), ``torch.ops.eml.linear_forward`` and ``torch.ops.eml.linear_backward``,
running on a selectable GEMM backend. Importing the package registers the operators.

The course stages (chapter "Custom Extensions") are kept alongside:
:mod:`eml_ops.linear_python` (6.2), :func:`eml_ops.hello` and :mod:`eml_ops.linear_cpp` (6.3).
"""

from __future__ import annotations

import torch  # noqa: F401  (loads libtorch before our extension)

from . import _C, _backends, _sharding  # noqa: F401  (_sharding: DTensor strategies, lazily)
from ._backends import available_backends, get_backend, set_backend, use_backend
from .layer import Layer, linear, replace_linear

__all__ = [
    "Layer",
    "available_backends",
    "get_backend",
    "hello",
    "linear",
    "replace_linear",
    "set_backend",
    "use_backend",
]
__version__ = "0.1.0"


def hello() -> None:
    """Print ``Hello World!`` from C++ (seed 6.3: the first pybind11 function)."""
    _C.hello()


_backends.apply_environment()
