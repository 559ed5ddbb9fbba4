"""The product path: :class:`Layer`, :func:`linear` and :func:`replace_linear`.

All three go through ``torch.ops.eml.linear``, whose autograd kernel is C++:

* forward:  ``Y = X W^T (+ b)``
* backward: ``dL/dX = dL/dY W``, ``dL/dW = (dL/dY)^T X``, ``dL/db = sum over rows of dL/dY``

No ``from __future__ import annotations`` here: TorchScript reads these annotations at run time.
"""

import math

import torch
from torch import nn

from . import _C

# True when an argument overrides __torch_function__ (a Tensor subclass, an FX proxy; exact
# Tensors and Parameters do not) or a TorchFunctionMode is active: a C check of ~50 ns.
_has_torch_function = torch.overrides.has_torch_function_variadic


@torch.jit.unused
def _python_linear(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    # Plain tensors in plain eager mode take the fast path: eml::linear called from C++
    # through the dispatcher (same op, kernels and checks, minus the microsecond torch.ops
    # spends in Python), with the GIL released while it runs. Everything else goes through
    # torch.ops.eml.linear, which honours __torch_function__: tensor subclasses, FX proxies
    # and TorchFunctionModes see the op, and torch.compile/export put it in their graphs.
    if _has_torch_function(input, weight, bias) or torch.compiler.is_compiling():
        return torch.ops.eml.linear(input, weight, bias)
    return _C.linear(input, weight, bias)


def _eml_linear(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    if torch.jit.is_scripting():
        return torch.ops.eml.linear(input, weight, bias)
    else:
        return _python_linear(input, weight, bias)


def linear(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """Functional form: ``torch.nn.functional.linear`` semantics on ``eml::linear``.

    Args:
        input: ``[*, in_features]`` (1-D and zero-size allowed).
        weight: ``[out_features, in_features]``.
        bias: optional ``[out_features]``.

    Returns:
        ``[*, out_features]`` in the input's dtype.
    """
    return _eml_linear(input, weight, bias)


class Layer(nn.Module):
    """A linear layer ``y = x W^T (+ b)`` on ``torch.ops.eml.linear``.

    Parameters are named and initialised like :class:`torch.nn.Linear`'s (``weight``,
    ``bias``), so state_dicts are interchangeable. Works in eager mode, with
    ``torch.jit.script``, ``torch.compile`` and ``torch.export``.

    Args:
        i_n_features_input: number of input features (``in_features``).
        i_n_features_output: number of output features (``out_features``).
        bias: whether the layer has a learnable bias (default ``False``, as in the course).
        device: device of the parameters.
        dtype: dtype of the parameters.
    """

    __constants__ = ["in_features", "out_features"]
    in_features: int
    out_features: int
    weight: torch.Tensor

    def __init__(
        self,
        i_n_features_input: int,
        i_n_features_output: int,
        bias: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.in_features = i_n_features_input
        self.out_features = i_n_features_output
        shape = (i_n_features_output, i_n_features_input)
        self.weight = nn.Parameter(torch.empty(shape, **factory))
        if bias:
            self.bias = nn.Parameter(torch.empty(i_n_features_output, **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise as :class:`torch.nn.Linear` does (Kaiming-uniform, a = sqrt(5))."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1]
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Apply the layer to ``input`` of shape ``[*, in_features]``."""
        return _eml_linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        """Describe the layer as nn.Linear does."""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )

    @classmethod
    def from_linear(cls, module: nn.Linear) -> "Layer":
        """Build a Layer holding ``module``'s own Parameter objects (no copies)."""
        layer = cls(
            module.in_features,
            module.out_features,
            bias=module.bias is not None,
            device="meta",  # allocate nothing: the parameters are replaced right away
            dtype=module.weight.dtype,
        )
        layer.weight = module.weight
        if module.bias is not None:
            layer.bias = module.bias
        layer.train(module.training)
        return layer


def replace_linear(module: nn.Module) -> nn.Module:
    """Swap every ``torch.nn.Linear`` in ``module`` (recursively) for a :class:`Layer`.

    Each Layer holds the very same Parameter objects, so devices, dtypes, ``requires_grad``
    and optimizers built before the conversion carry over. Only exact ``nn.Linear``
    instances are replaced: subclasses may override ``forward`` and are left alone.

    Returns:
        The model, converted in place; a new Layer if ``module`` itself is an ``nn.Linear``.
    """
    if type(module) is nn.Linear:
        return Layer.from_linear(module)
    for name, child in module.named_children():
        converted = replace_linear(child)
        if converted is not child:
            setattr(module, name, converted)
    return module
