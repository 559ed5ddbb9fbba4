"""Seed 6.2: the linear layer as a pure-Python ``torch.autograd.Function``.

Forward ``Y = X W^T``; backward (derived in the README):
``dL/dX = dL/dY · W`` and ``dL/dW = (dL/dY)^T · X``.
"""

from __future__ import annotations

import math

import torch


class Function(torch.autograd.Function):
    """``Y = X W^T`` with a hand-written backward pass."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, i_input: torch.Tensor,
                i_weight: torch.Tensor) -> torch.Tensor:
        """Compute ``Y = X W^T`` for ``X: [*, in]`` and ``W: [out, in]``."""
        ctx.save_for_backward(i_input, i_weight)
        return torch.matmul(i_input, i_weight.t())

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, i_grad: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Return ``(dL/dX, dL/dW)`` from ``dL/dY``."""
        l_input, l_weight = ctx.saved_tensors
        l_grad_input = l_grad_weight = None
        if ctx.needs_input_grad[0]:
            l_grad_input = torch.matmul(i_grad, l_weight)
        if ctx.needs_input_grad[1]:
            l_grad_2d = i_grad.reshape(-1, l_weight.shape[0])
            l_input_2d = l_input.reshape(-1, l_weight.shape[1])
            l_grad_weight = torch.matmul(l_grad_2d.t(), l_input_2d)
        return l_grad_input, l_grad_weight


class Layer(torch.nn.Module):
    """Linear layer without bias on :class:`Function`; ``weight`` may be replaced freely.

    Example (the seed's hint)::

        layer = Layer(3, 2)
        layer.weight = torch.nn.Parameter(torch.tensor([[1.0, 2, 3], [4, 5, 6]]))
    """

    def __init__(self, i_n_features_input: int, i_n_features_output: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(i_n_features_output, i_n_features_input))
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def forward(self, i_input: torch.Tensor) -> torch.Tensor:
        """Apply the layer."""
        return Function.apply(i_input, self.weight)
