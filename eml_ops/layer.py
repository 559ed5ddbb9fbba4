"""The product path: :class:`Layer`, :func:`linear` and :func:`replace_linear`.

All three go through ``torch.ops.eml.linear``, whose autograd kernel is C++:

* forward:  ``Y = X W^T (+ b)``
* backward: ``dL/dX = dL/dY W``, ``dL/dW = (dL/dY)^T X``, ``dL/db = sum over rows of dL/dY``

No ``from __future__ import annotations`` here: TorchScript reads these annotations at run time.
"""

import torch
from torch import nn

from . import _C


@torch.jit.unused
def _python_linear(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    # Under torch.compile/export the graph must contain torch.ops.eml.linear. In eager mode,
    # eml::linear is called from C++ through the dispatcher instead: the same op, kernels and
    # checks, minus the microseconds torch.ops spends in Python on every call.
    if torch.compiler.is_compiling():
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


_PLAIN_TENSOR_TYPES = (torch.Tensor, nn.Parameter)


def _overrides_torch_function(tensor: torch.Tensor | None) -> bool:
    """Whether ``tensor``'s class brings its own ``__torch_function__`` (not Tensor's default).

    Tensor, Parameter, DTensor and the tracing subclasses (fake and functional tensors) have
    the default or a disabled handler; quantisation-style weight classes override it to
    implement ``F.linear`` themselves.
    """
    if type(tensor) in _PLAIN_TENSOR_TYPES or not isinstance(tensor, torch.Tensor):
        return False  # also None, and FX proxies: those go to our op like plain tensors
    handler = type(tensor).__torch_function__
    return handler is not torch._C._disabled_torch_function_impl and (
        getattr(handler, "__func__", None) is not torch.Tensor.__torch_function__.__func__
    )


@torch.jit.unused
def _weights_want_f_linear(weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether weight or bias is of a class that intercepts ``F.linear`` (see Layer.forward)."""
    return _overrides_torch_function(weight) or _overrides_torch_function(bias)


def _one_size(name: str, value: int | None, alias: str, alias_value: int | None) -> int:
    """Return the size, given as ``name`` (the course's) or as ``alias`` (nn.Linear's)."""
    if (value is None) == (alias_value is None):
        given = "both" if value is not None else "neither"
        raise TypeError(f"eml_ops.Layer: give exactly one of {name} and {alias}, got {given}")
    return value if value is not None else alias_value


class Layer(nn.Linear):
    """A linear layer ``y = x W^T (+ b)`` on ``torch.ops.eml.linear``.

    A subclass of :class:`torch.nn.Linear`: same attributes (``in_features``,
    ``out_features``, ``weight``, ``bias``), initialisation and state_dict, so every tool that
    finds linear layers with ``isinstance(m, nn.Linear)`` (PEFT, tensor-parallel styles,
    weight initialisers) treats it as one. Only :meth:`forward` differs. Works in eager mode,
    with ``torch.jit.script``, ``torch.compile``, ``torch.export`` and on DTensors.

    Args:
        i_n_features_input: number of input features (``in_features``).
        i_n_features_output: number of output features (``out_features``).
        bias: whether the layer has a learnable bias (default ``False``, as in the course;
            ``nn.Linear``'s default is ``True``).
        device: device of the parameters.
        dtype: dtype of the parameters.
        in_features: keyword alias of ``i_n_features_input`` (``nn.Linear``'s name).
        out_features: keyword alias of ``i_n_features_output``.

    Raises:
        TypeError: a size given twice (positionally and by alias) or not at all.
    """

    def __init__(
        self,
        i_n_features_input: int | None = None,
        i_n_features_output: int | None = None,
        bias: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        in_features: int | None = None,
        out_features: int | None = None,
    ) -> None:
        super().__init__(
            _one_size("i_n_features_input", i_n_features_input, "in_features", in_features),
            _one_size("i_n_features_output", i_n_features_output, "out_features", out_features),
            bias=bias,
            device=device,
            dtype=dtype,
        )

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Apply the layer to ``input`` of shape ``[*, in_features]``.

        A weight (or bias) whose class implements ``__torch_function__`` itself, as
        quantisation libraries install on every ``nn.Linear``, gets what ``nn.Linear`` gives
        it: ``F.linear``, which that class was written to intercept.
        """
        weight, bias = self.weight, self.bias
        if not torch.jit.is_scripting() and _weights_want_f_linear(weight, bias):
            return nn.functional.linear(input, weight, bias)
        return _eml_linear(input, weight, bias)

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
