"""Nested jagged tensors (``layout=torch.jagged``) in the ``eml::`` operators.

A jagged tensor ``[B, j, *, in]`` keeps its components one after another in a dense
``values`` tensor ``[total, *, in]`` (``total`` = the sum of the lengths ``j``), so
``linear`` of it is ``linear`` of its values. Each ``eml::`` op on a jagged tensor runs the
same op on the values (our GEMM, any backend, its C++ autograd kernel) and wraps the result
with the input's offsets, as torch does for ``aten.linear`` (torch/nested/_internal/ops.py):
``dL/dX`` is jagged like ``dL/dY``, ``dL/dW`` and ``dL/db`` are dense.

The kernels are registered when :mod:`eml_ops` is imported, for two places of dispatch:

* the ``AutogradNestedTensor`` key (above autograd, it overrides the C++ autograd kernel for
  jagged tensors): the values are taken and wrapped by differentiable views, so autograd
  records the dense op with its own backward, and double backward works as for dense tensors;
* :func:`torch.library.register_torch_dispatch` for torch's jagged tensor class (below
  autograd: ``torch.inference_mode``, where autograd keys are skipped).

As ``F.linear``, the ops accept jagged inputs that are contiguous (no holes, the ragged
dimension right after the batch) and refuse the others, and nested weights or biases, with a
``ValueError`` naming the op.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.nested._internal.nested_tensor import (
    NestedTensor,
    nested_view_from_values_offsets_lengths,
)

OPS = torch.ops.eml


def _is_jagged(tensor: object) -> bool:
    return isinstance(tensor, NestedTensor)


def _check_jagged_input(op: str, name: str, tensor: Tensor) -> None:
    """Raise ValueError unless ``tensor`` is a jagged tensor ``linear`` can run on its values."""
    if not _is_jagged(tensor):
        kind = f"a nested tensor of layout {tensor.layout}" if tensor.is_nested else (
            f"a dense tensor of shape {list(tensor.shape)}")
        raise ValueError(f"{op}: expected {name} to be a jagged NestedTensor "
                         f"(layout=torch.jagged), got {kind}")
    if tensor._lengths is not None or tensor._ragged_idx != 1:
        what = "holes (offsets and lengths)" if tensor._lengths is not None else (
            f"its ragged dimension at dim {tensor._ragged_idx}, not 1")
        raise ValueError(
            f"{op}: expected {name} to be a contiguous jagged NestedTensor, got one of shape "
            f"{tuple(tensor.shape)} with {what}; call .contiguous() on it first")
    if tensor.dim() < 3:
        raise ValueError(
            f"{op}: the last dimension of {name} (in_features) must not be the ragged one, got "
            f"a jagged tensor of shape {tuple(tensor.shape)}")


def _check_dense(op: str, **tensors: Tensor | None) -> None:
    """Raise ValueError if one of ``tensors`` (weight, bias) is nested: they must be dense."""
    for name, tensor in tensors.items():
        if tensor is not None and tensor.is_nested:
            raise ValueError(f"{op}: {name} must be a dense tensor, got a nested tensor "
                             f"(layout {tensor.layout}); only the input may be jagged")


def _like(jagged: Tensor, values: Tensor) -> Tensor:
    """Wrap ``values`` as a jagged tensor with ``jagged``'s offsets (so its nested int): a view.

    What the public ``nested_tensor_from_jagged`` calls, without its refusal to run while FX
    traces (torch.compile traces this). The cached sequence lengths carry over.
    """
    return nested_view_from_values_offsets_lengths(
        values, jagged.offsets(), jagged.lengths(), ragged_idx=jagged._ragged_idx,
        min_seqlen=jagged._maybe_min_seqlen, max_seqlen=jagged._maybe_max_seqlen)


def _op_name(op: torch._ops.OpOverload) -> str:
    return op.name().removesuffix(".default")


def _linear_on_values(op: torch._ops.OpOverload, input: Tensor, weight: Tensor,
                      bias: Tensor | None = None) -> Tensor:
    """``op`` (``eml::linear``/``eml::linear_forward``) of a jagged input, on its values."""
    _check_dense(_op_name(op), weight=weight, bias=bias)
    _check_jagged_input(_op_name(op), "input", input)
    return _like(input, op(input.values(), weight, bias))


def _linear_backward_on_values(op: torch._ops.OpOverload, grad_output: Tensor, input: Tensor,
                               weight: Tensor, output_mask: Sequence[bool]
                               ) -> tuple[Tensor | None, ...]:
    """``eml::linear_backward`` of a jagged grad_output and input: dL/dX jagged, the rest dense."""
    name = _op_name(op)
    _check_dense(name, weight=weight)
    _check_jagged_input(name, "grad_output", grad_output)
    _check_jagged_input(name, "input", input)
    grad_values, input_values = grad_output.values(), input.values()
    if grad_values.shape[:-1] != input_values.shape[:-1]:
        raise ValueError(
            f"{name}: grad_output of shape {tuple(grad_output.shape)} must have the components "
            f"of input of shape {tuple(input.shape)} (values of shapes "
            f"{list(grad_values.shape)} and {list(input_values.shape)})")
    grad_input, grad_weight, grad_bias = op(grad_values, input_values, weight, output_mask)
    if output_mask[0]:
        grad_input = _like(grad_output, grad_input)
    return grad_input, grad_weight, grad_bias


_KERNELS: dict[torch._ops.OpOverload, Callable[..., Any]] = {
    OPS.linear.default: _linear_on_values,
    OPS.linear_forward.default: _linear_on_values,
    OPS.linear_backward.default: _linear_backward_on_values,
}
_library = torch.library.Library("eml", "IMPL")  # holds the registrations while alive


def _torch_dispatch_rule(cls: type, func: torch._ops.OpOverload, types: tuple[type, ...],
                         args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    return _KERNELS[func](func, *args, **kwargs)


def register_jagged_rules() -> None:
    """Register the kernels with torch.library (called once by ``import eml_ops``)."""
    for op, kernel in _KERNELS.items():
        _library.impl(op.name(), functools.partial(kernel, op), "AutogradNestedTensor")
        torch.library.register_torch_dispatch(op, NestedTensor, _torch_dispatch_rule,
                                              lib=_library)
