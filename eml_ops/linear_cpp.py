"""Seed 6.3: the linear layer with forward and backward in C++ (pybind11).

Two C++ variants with the seed's declarations, in ``csrc/course/FunctionCpp.cpp``:
``"aten"`` (ATen matmuls) and ``"loops"`` (our own C++-only loops over ``data_ptr``).
The C++ side assumes contiguous 2-D tensors, so this module makes them so first.
"""

from __future__ import annotations

import math
from types import ModuleType

import torch

from . import _C

VARIANTS = ("aten", "loops")


def _variant(name: str) -> ModuleType:
    if name not in VARIANTS:
        raise ValueError(f"eml_ops.linear_cpp: unknown variant {name!r}; choose one of {VARIANTS}")
    return getattr(_C.course, name)


class Function(torch.autograd.Function):
    """``Y = X W^T`` computed by C++ ``forward``/``backward``; ``variant`` picks the C++ code."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, i_input: torch.Tensor,
                i_weight: torch.Tensor, variant: str = "loops") -> torch.Tensor:
        """Compute ``Y = X W^T`` in C++ for ``X: [*, in]`` and ``W: [out, in]``."""
        cpp = _variant(variant)
        l_input = i_input.reshape(-1, i_input.shape[-1]).contiguous()
        l_weight = i_weight.contiguous()
        ctx.save_for_backward(l_input, l_weight)
        ctx.variant = variant
        ctx.input_shape = i_input.shape
        l_output = cpp.forward(l_input, l_weight)
        return l_output.reshape(*i_input.shape[:-1], i_weight.shape[0])

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, i_grad: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        """Return ``(dL/dX, dL/dW, None)`` from ``dL/dY``, computed in C++."""
        l_input, l_weight = ctx.saved_tensors
        l_grad = i_grad.reshape(-1, l_weight.shape[0]).contiguous()
        l_grad_input, l_grad_weight = _variant(ctx.variant).backward(l_grad, l_input, l_weight)
        return l_grad_input.reshape(ctx.input_shape), l_grad_weight, None


class Layer(torch.nn.Module):
    """Linear layer without bias whose forward and backward run in C++.

    Args:
        i_n_features_input: number of input features.
        i_n_features_output: number of output features.
        variant: ``"loops"`` (our own C++ loops, default) or ``"aten"`` (ATen matmuls).
    """

    def __init__(self, i_n_features_input: int, i_n_features_output: int,
                 variant: str = "loops") -> None:
        super().__init__()
        _variant(variant)
        self.variant = variant
        self.weight = torch.nn.Parameter(torch.empty(i_n_features_output, i_n_features_input))
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def forward(self, i_input: torch.Tensor) -> torch.Tensor:
        """Apply the layer."""
        return Function.apply(i_input, self.weight, self.variant)

    def extra_repr(self) -> str:
        """Show the sizes and the C++ variant."""
        return (f"in_features={self.weight.shape[1]}, out_features={self.weight.shape[0]}, "
                f"variant={self.variant!r}")
