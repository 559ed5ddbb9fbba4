"""ONNX export of the ``eml::`` operators, with both of ``torch.onnx.export``'s exporters.

A converted model exports to standard ONNX operators (``Gemm``, or ``MatMul`` and ``Add``, in
the default domain), so any ONNX runtime runs it without eml_ops. Each exporter gets the
translation it looks for, registered when :mod:`eml_ops` is imported:

* The **dynamo exporter** (``dynamo=True``, the default) captures the model with
  ``torch.export``, where our operators stay whole, and then runs ``run_decompositions`` with
  a table it builds from ``torch._decomp.decomposition_table`` (the global table of
  post-autograd decompositions) for every operator that its ONNX registry does not
  translate. So we register a decomposition there, with
  :func:`torch._decomp.register_decomposition`: the operator's own
  ``CompositeExplicitAutograd`` kernel (argument checks, then ``at::linear``, ``at::mm`` and
  ``sum``), which the exporter traces into ATen operators it translates. It is the one hook
  that needs neither onnxscript nor ``torch.onnx`` at import time; the alternatives are the
  private ``_torchlib`` registry of ``torch.onnx._internal`` or onnxscript's (both load
  onnxscript), or a ``CompositeImplicitAutograd`` kernel, which would make every
  ``run_decompositions()`` (torch.export, AOTInductor) decompose our operators too.
  The table is read elsewhere only by FakeTensorMode for symbolic shapes, where running that
  same kernel gives the same result as before.
* The **TorchScript exporter** (``dynamo=False``) traces the model with ``torch.jit.trace``,
  which records ``eml::linear``, and looks up a symbolic function per operator name: the
  public :func:`torch.onnx.register_custom_op_symbolic` registers ATen's own ``aten::linear``
  symbolic for ours. ``torch.onnx`` takes a while to import, so the registration waits until
  something imports it (see :func:`_after_import`).

``eml::compressed_linear`` (:class:`eml_ops.CompressedLayer`) exports with both exporters,
its weight stored in the file as it is stored in the layer where the exporter allows it:

* dynamo: what its ``CompositeExplicitAutograd`` kernel computes, ``Cast`` of the weight
  to float32, ``MatMul``, ``Mul`` by the per-output-channel scales (int8), ``Add`` of the
  bias. The exporter's optimiser folds constants of at most 8192 elements, so the weight of
  a layer larger than 128 x 64 stays int8 (or 16-bit) in the file; smaller ones become
  float32 initializers.
* TorchScript: an int8 weight as ``DequantizeLinear`` with the scales along axis 0 (zero
  point 0: the symmetric quantisation), which the exporter's constant folding keeps, then
  ``MatMul`` and ``Add``; a 16-bit weight as ``Cast``, which the constant folding turns
  into a float32 initializer.

``eml::linear_backward`` appears only in training graphs, which neither exporter exports;
the dynamo exporter would decompose it like the other two, the TorchScript exporter has no
symbolic for it (``UnsupportedOperatorError``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import decomposition_table, register_decomposition

OPS = torch.ops.eml
# The operators an inference graph holds; the TorchScript exporter needs a symbolic for each.
_FORWARD_OPS = ("eml::linear", "eml::linear_forward")
# register_custom_op_symbolic serves the given opset and all later ones; ATen's linear
# symbolic is opset 9's. DequantizeLinear per axis and Cast from bfloat16 need opset 13.
_SYMBOLIC_OPSET = 9
_COMPRESSED_SYMBOLIC_OPSET = 13
_ONNX_FLOAT = 1  # onnx.TensorProto.FLOAT, without importing onnx
# The operators with a decomposition for the dynamo exporter (and on Inductor's allow list).
_DECOMPOSED = (OPS.linear, OPS.linear_forward, OPS.linear_backward, OPS.compressed_linear)


def _composite_kernel(op: torch._ops.OpOverload) -> Callable[..., Any]:
    """Call ``op``'s ``CompositeExplicitAutograd`` kernel (written in ATen operators)."""
    composite = torch._C.DispatchKey.CompositeExplicitAutograd

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        return op._op_dk(composite, *args, **kwargs)

    decomposition.__name__ = f"{op._schema.name.replace('::', '_')}_composite"
    return decomposition


def register_decompositions() -> None:
    """Register the decompositions the dynamo exporter applies (once per process)."""
    for packet in _DECOMPOSED:
        op = packet.default
        if op not in decomposition_table:
            register_decomposition(op)(_composite_kernel(op))


def _compressed_linear_symbolic(g: Any, input: Any, weight: Any, scales: Any,
                                bias: Any) -> Any:
    """``eml::compressed_linear`` in ONNX: the weight dequantised, ``MatMul``, ``Add``.

    int8 (scales given): ``DequantizeLinear`` per output channel; 16-bit: ``Cast``.
    """
    from torch.onnx import symbolic_helper

    if symbolic_helper._is_none(scales):
        weight_float = g.op("Cast", weight, to_i=_ONNX_FLOAT)
    else:
        weight_float = g.op("DequantizeLinear", weight, scales, axis_i=0)
    output = g.op("MatMul", input, g.op("Transpose", weight_float, perm_i=[1, 0]))
    if not symbolic_helper._is_none(bias):
        output = g.op("Add", output, bias)
    return output


def register_torchscript_symbolics() -> None:
    """Register the TorchScript exporter's symbolics for our inference operators.

    ``eml::linear`` and ``eml::linear_forward`` get ATen's own ``aten::linear`` symbolic,
    ``eml::compressed_linear`` :func:`_compressed_linear_symbolic`.
    """
    from torch.onnx import register_custom_op_symbolic, symbolic_opset9

    for name in _FORWARD_OPS:
        register_custom_op_symbolic(name, symbolic_opset9.linear, _SYMBOLIC_OPSET)
    register_custom_op_symbolic("eml::compressed_linear", _compressed_linear_symbolic,
                                _COMPRESSED_SYMBOLIC_OPSET)


class _LoaderThenHook(importlib.abc.Loader):
    """A module's own loader, followed by a hook that receives the loaded module."""

    def __init__(self, loader: importlib.abc.Loader, hook: Callable[[], None]) -> None:
        self._loader = loader
        self._hook = hook

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        self._hook()

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ...: the loader's
        return getattr(self._loader, name)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds ``name`` once, as the other finders do, and runs ``hook`` after loading it."""

    def __init__(self, name: str, hook: Callable[[], None]) -> None:
        self._name = name
        self._hook = hook

    def find_spec(self, fullname: str, path: Any, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self._name:
            return None
        sys.meta_path.remove(self)  # one shot, and out of the way of the search below
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _LoaderThenHook(spec.loader, self._hook)
        return spec


def _after_import(name: str, hook: Callable[[], None]) -> None:
    """Run ``hook`` now if module ``name`` is loaded, else right after it is first imported."""
    if name in sys.modules:
        hook()
    else:
        sys.meta_path.insert(0, _AfterImport(name, hook))


def allow_inductor_fallbacks() -> None:
    """Let Inductor call our operators although the decomposition table now holds them.

    Inductor runs our kernels (a fallback, no lowering); with ``CI`` set in the environment
    it refuses a fallback for an operator that has a decomposition, unless the operator is
    on its allow list, where torchvision's ``roi_align`` stands for the same reason.
    """
    from torch._inductor.lowering import FALLBACK_ALLOW_LIST

    for packet in _DECOMPOSED:
        FALLBACK_ALLOW_LIST.add(packet.default.name().split(".")[0])


def register_onnx_translations() -> None:
    """Make both exporters of ``torch.onnx.export`` translate our operators."""
    register_decompositions()
    _after_import("torch._inductor.lowering", allow_inductor_fallbacks)
    _after_import("torch.onnx", register_torchscript_symbolics)
