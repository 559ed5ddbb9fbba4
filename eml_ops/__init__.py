"""eml_ops: a fast, differentiable, scriptable and compile-able linear layer for PyTorch.

``y = x W^T (+ b)`` as the custom operators ``torch.ops.eml.linear`` (differentiable, with a
C++ autograd kernel), ``torch.ops.eml.linear_forward`` and ``torch.ops.eml.linear_backward``,
running on a selectable GEMM backend. Importing the package registers the operators.

The operators live in ``libeml_ops.so`` (libtorch only, no Python): C++ programs link it
(CMake: :data:`cmake_prefix_path`), and Python processes may load it alone with
``torch.ops.load_library(eml_ops.library_path())``.

The course stages (chapter "Custom Extensions") are kept alongside:
:mod:`eml_ops.linear_python` (6.2), :func:`eml_ops.hello` and :mod:`eml_ops.linear_cpp` (6.3).
"""

from __future__ import annotations

import json
import os

import torch

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _check_torch_version() -> None:
    """Raise ImportError unless this torch is the release the binaries were built against.

    The C++ ABI ties libeml_ops.so and _C to one torch release; with another, loading them
    fails with undefined symbols or, worse, crashes later.
    """
    try:
        with open(os.path.join(_PACKAGE_DIR, "_build_info.json")) as file:
            built_with = json.load(file)["torch_version"]
    except FileNotFoundError:
        raise ImportError(
            f"eml_ops is not built in {_PACKAGE_DIR}: run `pip install --no-build-isolation -e .`"
        ) from None
    running = torch.__version__.split("+")[0]
    if running != built_with:
        raise ImportError(
            f"eml_ops was built against torch {built_with}, but torch {running} is installed "
            f"({torch.__file__}): install torch=={built_with}, or rebuild eml_ops "
            "(`pip install --no-build-isolation .`) against this torch."
        )


_check_torch_version()

# After the version check: _C links libtorch. _sharding registers DTensor strategies lazily.
from . import _C, _backends, _sharding  # noqa: E402, F401
from ._backends import available_backends, get_backend, set_backend, use_backend  # noqa: E402
from ._flops import register_flop_formulas  # noqa: E402
from ._nested import register_jagged_rules  # noqa: E402
from ._onnx import register_onnx_translations  # noqa: E402
from ._quantization import register_quantization  # noqa: E402
from ._vmap import register_vmap_rules  # noqa: E402
from .compressed import CompressedLayer, compress_weights  # noqa: E402
from .frozen import FrozenLayer, freeze, unfreeze  # noqa: E402
from .layer import Layer, linear, replace_linear  # noqa: E402

__all__ = [
    "CompressedLayer",
    "FrozenLayer",
    "Layer",
    "available_backends",
    "cmake_prefix_path",
    "compress_weights",
    "freeze",
    "get_backend",
    "hello",
    "library_path",
    "linear",
    "replace_linear",
    "set_backend",
    "unfreeze",
    "use_backend",
]
__version__ = "0.1.0"


#: Folder to add to ``CMAKE_PREFIX_PATH`` for ``find_package(eml_ops)`` (like
#: ``torch.utils.cmake_prefix_path``); ``python -m eml_ops cmake-prefix`` prints it.
cmake_prefix_path = os.path.join(_PACKAGE_DIR, "share", "cmake")


def library_path() -> str:
    """Absolute path of ``libeml_ops.so``, the operator library (libtorch only, no Python).

    ``torch.ops.load_library(eml_ops.library_path())`` registers ``torch.ops.eml.*`` in a
    process that does not import eml_ops; C++ programs link it (see :data:`cmake_prefix_path`).
    """
    return os.path.join(_PACKAGE_DIR, "libeml_ops.so")


def hello() -> None:
    """Print ``Hello World!`` from C++ (seed 6.3: the first pybind11 function)."""
    _C.hello()


_backends.apply_environment()
register_vmap_rules()
register_flop_formulas()  # torch.utils.flop_counter.FlopCounterMode
register_onnx_translations()  # torch.onnx.export, both exporters
register_quantization()  # torch.ao.quantization's eager flows
register_jagged_rules()  # nested jagged tensors (torch.nested, layout=torch.jagged)
