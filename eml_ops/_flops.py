"""FLOP formulas of the ``eml::`` operators for :class:`torch.utils.flop_counter.FlopCounterMode`.

FlopCounterMode counts only the operators in its registry, so without these formulas our
layers count 0 FLOPs. They are registered with the public hook
:func:`torch.utils.flop_counter.register_flop_formula` when :mod:`eml_ops` is imported, and
count what the mode counts for ``nn.Linear`` (whose ``aten.linear`` decomposes into
``aten.addmm``/``aten.mm``/``aten.bmm``): ``2 * rows * in * out`` per product (a
multiply-add is two FLOPs), the bias add not counted, as ``addmm``'s formula does not count
it. The formulas read only shapes, so they count fake and meta tensors as well.
"""

from __future__ import annotations

from math import prod
from typing import Any

import torch
from torch.utils.flop_counter import register_flop_formula

OPS = torch.ops.eml
Shape = torch.Size | tuple[int, ...]


def _product_flops(input_shape: Shape, weight_shape: Shape) -> int:
    """FLOPs of ``X W^T`` for ``X`` of ``input_shape`` ``[*, in]`` and ``W`` ``[out, in]``."""
    rows = prod(input_shape[:-1])  # 1 for a 1-D input, as aten.mm counts its [1, in] matrix
    out_features, in_features = weight_shape
    return 2 * rows * in_features * out_features


def linear_flops(input_shape: Shape, weight_shape: Shape, bias_shape: Shape | None = None,
                 *, out_shape: Shape | None = None, **kwargs: Any) -> int:
    """FLOPs of ``eml::linear`` and ``eml::linear_forward``: one product, the bias free."""
    return _product_flops(input_shape, weight_shape)


def linear_backward_flops(grad_output_shape: Shape, input_shape: Shape, weight_shape: Shape,
                          output_mask: list[bool], *, out_shape: Any = None,
                          **kwargs: Any) -> int:
    """FLOPs of ``eml::linear_backward``: one product each for dL/dX and dL/dW if asked.

    ``dL/dX = dL/dY W`` and ``dL/dW = (dL/dY)^T X`` cost as much as the forward product;
    ``dL/db`` is a sum, which FlopCounterMode does not count.
    """
    products = int(output_mask[0]) + int(output_mask[1])
    return products * _product_flops(input_shape, weight_shape)


def register_flop_formulas() -> None:
    """Register the formulas (once per process; the registry refuses duplicates)."""
    from torch.utils.flop_counter import flop_registry  # which packets already have one

    if OPS.linear not in flop_registry:
        register_flop_formula([OPS.linear, OPS.linear_forward])(linear_flops)
        register_flop_formula(OPS.linear_backward)(linear_backward_flops)
