"""Frozen weights for inference: :class:`FrozenLayer` and :func:`freeze`.

Every call of a :class:`~eml_ops.Layer` packs its weight into the GEMM's panels (about 15% of
a 256 x 4096 x 1024 forward). A frozen layer packs it once, with ``eml::pack_weight``, and
runs ``eml::linear_packed`` (``torch.ops.eml.linear_packed``) on the packed copy for every
call that needs no gradient, as Inductor's ``freezing`` and zentorch do at compilation::

    packed, block_k = torch.ops.eml.pack_weight(weight)   # once: [in, out padded], float32/64
    y = torch.ops.eml.linear_packed(x, packed, block_k, out_features, bias)   # per call

No ``from __future__ import annotations`` here: TorchScript reads these annotations at run time.
"""

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.utils import parametrize, prune
from torch.utils.flop_counter import register_flop_formula

from . import _C
from ._flops import linear_flops
from .layer import (
    Layer,
    _conversion_obstacle,
    _convert_modules,
    _describe_path,
    _has_torch_function,
    _layer_forward,
    _take_over,
)

_PACKABLE_DTYPES = (torch.float32, torch.float64)
_PACKABLE_DEVICES = ("cpu", "meta")
_PLAIN_TENSOR_TYPES = (torch.Tensor, nn.Parameter)


@torch.jit.unused
def _packable(weight: torch.Tensor) -> bool:
    """Whether ``eml::pack_weight`` packs ``weight``: a plain float32/64 CPU (or meta) tensor."""
    return (
        type(weight) in _PLAIN_TENSOR_TYPES
        and weight.dtype in _PACKABLE_DTYPES
        and weight.device.type in _PACKABLE_DEVICES
        and not torch._C._functorch.is_functorch_wrapped_tensor(weight)
    )


@torch.jit.unused
def _weight_key(weight: torch.Tensor) -> tuple[Any, ...]:
    """Return what identifies the weight's values: its memory, version, dtype and device.

    An in-place write (an optimizer step, ``load_state_dict``, ``copy_``) bumps the version;
    ``.to()``, ``.double()`` and a new Parameter change the memory. Writes that bypass
    autograd's version counter (through ``.numpy()`` or ``data_ptr``) are not seen.
    """
    return (weight.data_ptr(), weight._version, weight.dtype, weight.device)


def _packed_applies(
    input: torch.Tensor, packed: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> bool:
    """Whether the packed weight computes this call: input of its dtype and device, no grad."""
    if input.dtype != packed.dtype or input.device != packed.device:
        return False
    if torch.is_grad_enabled():
        if input.requires_grad or weight.requires_grad:
            return False
        if bias is not None and bias.requires_grad:
            return False
    return True


@torch.jit.unused
def _packed_computes(
    input: torch.Tensor, packed: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> bool:
    """_packed_applies, outside autocast (whose casts the Layer's operator makes)."""
    return _packed_applies(input, packed, weight, bias) and not torch.is_autocast_enabled("cpu")


class FrozenLayer(Layer):
    """A :class:`~eml_ops.Layer` for inference whose weight is packed once; see the module doc.

    Design:

    * A subclass of :class:`~eml_ops.Layer` (so of ``nn.Linear``): the same parameters,
      ``state_dict`` and hooks; the packed copy is a plain attribute, not a buffer: in no
      ``state_dict`` (a whole module saved with ``torch.save`` or ``torch.jit.save`` keeps it).
    * The packed copy computes every call that needs no gradient (under ``torch.no_grad()``
      or ``torch.inference_mode()``, or with parameters that do not require grad and an input
      that does not) of the weight's dtype (float32 or float64) on the CPU, in eager mode,
      ``torch.jit.script``, ``torch.compile`` and ``torch.export``. Every other call (training,
      autocast, other devices and dtypes, tensor subclasses, FX tracing, ``torch.func``
      transforms, ONNX export) runs as a Layer, on the weight itself: same results.
    * In eager mode each call checks that the weight is still the one packed (its memory and
      version) and packs it again if not: an optimizer step or ``load_state_dict`` is seen.
      Compiled and scripted code does not check: freeze after the last change of the weight.
      ``.to()``, ``.double()`` and the like pack again at once.
    * The packed path always runs the ``blocked`` backend (its panels are ``blocked``'s);
      results equal ``F.linear``'s within float rounding, as the Layer's do.
    * Pruned or parametrized layers compute their weight on every call: they are not frozen.
    """

    _packed_weight: torch.Tensor | None
    _packed_block_k: int
    # The key is for eager mode only (dtype and device do not script).
    __jit_ignored_attributes__ = ["_packed_key"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pack()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Apply the layer to ``input`` of shape ``[*, in_features]``."""
        if torch.jit.is_scripting():
            packed = self._packed_weight
            if (
                packed is not None
                and not torch.is_autocast_cpu_enabled()
                and _packed_applies(input, packed, self.weight, self.bias)
            ):
                return torch.ops.eml.linear_packed(
                    input, packed, self._packed_block_k, self.out_features, self.bias
                )
            return _layer_forward(input, self.weight, self.bias)
        return self._python_forward(input)

    @torch.jit.unused
    def _python_forward(self, input: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if torch.compiler.is_compiling():
            # Dynamo and torch.export trace the packed path on what was packed, but for the
            # ONNX exporter (ONNX has no packed weights): it gets the Layer's operator.
            if torch.compiler.is_exporting() and torch.onnx.is_in_onnx_export():
                return _layer_forward(input, weight, bias)
            packed = self._packed_weight
            if packed is None or not _packed_computes(input, packed, weight, bias):
                return _layer_forward(input, weight, bias)
            return torch.ops.eml.linear_packed(
                input, packed, self._packed_block_k, self.out_features, bias
            )
        if (
            _has_torch_function(input, weight, bias)
            or torch._C._functorch.is_functorch_wrapped_tensor(input)
            or (torch.jit.is_tracing() and torch.onnx.is_in_onnx_export())
        ):
            return _layer_forward(input, weight, bias)
        if _weight_key(weight) != self._packed_key:  # changed since packed
            self._pack()
        packed = self._packed_weight
        if packed is None or not _packed_computes(input, packed, weight, bias):
            return _layer_forward(input, weight, bias)
        # Plain eager mode: the operator through the dispatcher from C++, the GIL released
        # (as Layer's fast path), not through torch.ops.
        return _C.linear_packed(input, packed, self._packed_block_k, self.out_features, bias)

    @torch.jit.unused
    def _pack(self) -> None:
        """Pack the weight as it is now (or record that it cannot be packed)."""
        weight = self.weight
        packed, block_k = None, 0
        if _packable(weight):
            packed, block_k = torch.ops.eml.pack_weight(weight.detach())
        self._packed_weight = packed
        self._packed_block_k = block_k
        self._packed_key = _weight_key(weight)

    @torch.jit.unused
    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> nn.Module:
        # .to(), .double(), .cuda(), to_empty(): the packed copy follows the new weight.
        result = super()._apply(fn, recurse)
        self._pack()
        return result

    @torch.jit.unused
    def extra_repr(self) -> str:
        """nn.Linear's, and whether the weight is packed now."""
        return f"{super().extra_repr()}, packed={self._packed_weight is not None}"

    @classmethod
    def from_linear(cls, module: nn.Linear) -> "FrozenLayer":
        """Build a FrozenLayer that takes over ``module``'s state and packs its weight.

        ``module``: an ``nn.Linear`` or :class:`~eml_ops.Layer` (exactly), neither pruned nor
        parametrized; the state is taken over as :meth:`Layer.from_linear` does.

        Raises:
            ValueError: ``module`` cannot be frozen; the message says why.
        """
        reason = _freeze_obstacle(module)
        if reason is not None:
            raise ValueError(f"eml_ops.FrozenLayer.from_linear: cannot freeze {module!r}: {reason}")
        layer = _take_over(cls, module)
        layer._pack()
        return layer


def _freeze_obstacle(module: nn.Module) -> str | None:
    """Why ``module`` cannot become a FrozenLayer computing what it did, or None if it can."""
    reason = _conversion_obstacle(module, accepted=(nn.Linear, Layer))
    if reason is not None:
        return reason
    if parametrize.is_parametrized(module) or prune.is_pruned(module):
        return "it is parametrized or pruned: its weight is computed anew on every call"
    return None


def freeze(module: nn.Module) -> nn.Module:
    """Swap every ``nn.Linear`` and :class:`~eml_ops.Layer` in ``module`` for a FrozenLayer.

    Each layer's weight is packed once (see :class:`FrozenLayer`); parameters, buffers, hooks
    and ``state_dict`` carry over as with :func:`~eml_ops.replace_linear`. Subclasses of
    ``nn.Linear`` other than :class:`~eml_ops.Layer` are left alone, as are layers already
    frozen; a pruned or parametrized layer is left as it is, with a warning naming it. Use it
    for inference (``model.eval()`` and ``torch.no_grad()``); :func:`unfreeze` undoes it.

    Returns:
        The model, converted in place; a new FrozenLayer if ``module`` itself is a linear
        layer.
    """
    return _convert_modules(module, _frozen)


def _frozen(module: nn.Module, path: str) -> nn.Module | None:
    """Return ``module`` as :func:`freeze` converts it (None: not a linear one, look inside)."""
    if parametrize.type_before_parametrizations(module) not in (nn.Linear, Layer):
        return None
    reason = _freeze_obstacle(module)
    if reason is None:
        return FrozenLayer.from_linear(module)
    warnings.warn(f"eml_ops.freeze: left linear layer {_describe_path(path)} unfrozen: {reason}",
                  stacklevel=4)
    return module


def unfreeze(module: nn.Module) -> nn.Module:
    """Turn every :class:`FrozenLayer` in ``module`` back into a :class:`~eml_ops.Layer`.

    The packed copies are dropped; the Layers take over the frozen layers' state.

    Returns:
        The model, converted in place; a new Layer if ``module`` itself is a FrozenLayer.
    """
    return _convert_modules(module, _unfrozen)


def _unfrozen(module: nn.Module, path: str) -> nn.Module | None:
    """Return ``module`` as :func:`unfreeze` converts it (None: no FrozenLayer, look inside)."""
    if type(module) is not FrozenLayer:
        return None
    layer = _take_over(Layer, module)
    for name in ("_packed_weight", "_packed_block_k", "_packed_key"):
        vars(layer).pop(name, None)
    return layer


@register_flop_formula(torch.ops.eml.linear_packed)
def _linear_packed_flops(
    input_shape: torch.Size,
    packed_shape: torch.Size,
    block_k: int,
    out_features: int,
    *_: object,
    **__: object,
) -> int:
    """Count ``eml::linear_packed``'s FLOPs for FlopCounterMode, as ``eml::linear``'s."""
    return linear_flops(input_shape, (out_features, packed_shape[0]))
