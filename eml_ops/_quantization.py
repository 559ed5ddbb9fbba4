"""Eager-mode quantisation (``torch.ao.quantization``) of Layers, as of their nn.Linear.

torch's eager flows match modules by exact type (``type_before_parametrizations``), never
with ``isinstance``, at three places; a Layer (a subclass of nn.Linear) passes none of them:

1. which modules get a qconfig: ``propagate_qconfig_`` looks the module's type up in the
   qconfig dict, ``{nn.Linear: qconfig}`` for ``quantize_dynamic(model, {nn.Linear})`` and
   for its default ``qconfig_spec``;
2. which modules get observers (``prepare``) and are swapped (``convert``): the keys of
   the default module mappings, ``DEFAULT_*_MODULE_MAPPINGS``;
3. the swap itself: ``from_float`` of the quantised class accepts only its float classes.

Registered at ``import eml_ops``: for 2. and 3., every default mapping that maps nn.Linear
gets an entry for Layer, a class whose ``from_float`` hands the target's ``from_float`` an
nn.Linear that shares the Layer's state (what :func:`eml_ops.replace_linear` converted), so
the result is the very quantised module the nn.Linear would have become. For 1., torch has
no hook: the qconfig dict is built inside ``quantize_dynamic``. So ``propagate_qconfig_``,
which every flow calls, is wrapped, in its module and where ``torch.ao.quantization``
exports it: it gives Layer the qconfig the dict gives nn.Linear, unless the dict names
Layer itself.

A mapping passed by the user (``quantize_dynamic(..., mapping=)``, ``convert(mapping=)``)
names nn.Linear, not Layer. So ``swap_module``, which ``convert`` calls for each module, is
wrapped as well: a Layer that the mapping does not name is swapped by the mapping's
nn.Linear entry, as the nn.Linear would have been; a Layer named by neither stays float, as
an nn.Linear would. These two are the torch functions eml_ops wraps; neither changes
anything for a model without Layers.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import torch.ao.quantization as quantization
from torch import nn
from torch.ao.quantization import quantization_mappings
from torch.nn.utils import parametrize

from .layer import Layer, _parametrized_class

# The module: torch.ao.quantization.quantize is also the name of its function quantize().
quantize_module = importlib.import_module("torch.ao.quantization.quantize")

# The default mappings of torch.ao.quantization.quantization_mappings that map nn.Linear.
_MAPPINGS = (
    "DEFAULT_STATIC_QUANT_MODULE_MAPPINGS",
    "DEFAULT_REFERENCE_STATIC_QUANT_MODULE_MAPPINGS",
    "DEFAULT_QAT_MODULE_MAPPINGS",
    "DEFAULT_DYNAMIC_QUANT_MODULE_MAPPINGS",
    "DEFAULT_STATIC_SPARSE_QUANT_MODULE_MAPPINGS",
    "DEFAULT_DYNAMIC_SPARSE_QUANT_MODULE_MAPPINGS",
)


def as_linear(layer: Layer) -> nn.Linear:
    """Give an ``nn.Linear`` sharing ``layer``'s whole state (parameters, qconfig, observers).

    The inverse of :meth:`Layer.from_linear`; a parametrized Layer gives a parametrized
    nn.Linear with the same parametrizations.
    """
    linear = nn.Linear.__new__(nn.Linear)  # no __init__: nothing allocated
    vars(linear).update(vars(layer))
    if parametrize.is_parametrized(layer):
        linear.__class__ = _parametrized_class(nn.Linear, type(layer))
    return linear


@functools.cache  # one stand-in per quantised class: a user's mapping is read at every swap
def _from_layer(quantized: type) -> type:
    """Make a stand-in for ``quantized`` in a mapping, whose ``from_float`` takes a Layer."""
    target_from_float = quantized.from_float

    # wraps: inspect.signature (which swap_module reads for use_precomputed_fake_quant)
    # then reports the target's parameters.
    @functools.wraps(target_from_float)
    def from_float(mod: Layer, *args: Any, **kwargs: Any) -> nn.Module:
        return target_from_float(as_linear(mod), *args, **kwargs)

    namespace: dict[str, Any] = {
        "__doc__": f"Quantises an eml_ops.Layer into a {quantized.__qualname__}.",
        "__module__": __name__,
        "from_float": staticmethod(from_float),
    }
    if getattr(quantized, "_IS_REFERENCE", False):  # swap_module passes weight qparams then
        namespace["_IS_REFERENCE"] = True
    return type(f"{quantized.__name__}FromLayer", (), namespace)


def _register_mappings() -> None:
    for name in _MAPPINGS:
        mapping: dict[Callable, Any] = getattr(quantization_mappings, name)
        if nn.Linear in mapping and Layer not in mapping:
            mapping[Layer] = _from_layer(mapping[nn.Linear])


def with_layer_entry(mapping: dict[Any, Any]) -> dict[Any, Any]:
    """Give ``mapping`` with an entry for Layer made from nn.Linear's, if it lacks one."""
    if Layer in mapping or nn.Linear not in mapping:
        return mapping
    return {**mapping, Layer: _from_layer(mapping[nn.Linear])}


def with_layer_keys(qconfig_dict: dict[Any, Any] | None) -> dict[Any, Any] | None:
    """``qconfig_dict``, plus Layer's entry copied from nn.Linear's where it has none."""
    if not qconfig_dict or nn.Linear not in qconfig_dict or Layer in qconfig_dict:
        return qconfig_dict
    return {**qconfig_dict, Layer: qconfig_dict[nn.Linear]}


def _wrap_propagate_qconfig() -> None:
    original = quantize_module.propagate_qconfig_
    if getattr(original, "_eml_ops_wrapped", False):
        return

    @functools.wraps(original)
    def propagate_qconfig_(module: nn.Module, qconfig_dict: dict[Any, Any] | None = None,
                           prepare_custom_config_dict: dict[str, Any] | None = None) -> None:
        original(module, with_layer_keys(qconfig_dict), prepare_custom_config_dict)

    propagate_qconfig_._eml_ops_wrapped = True  # type: ignore[attr-defined]
    quantize_module.propagate_qconfig_ = propagate_qconfig_  # what quantize_dynamic calls
    if quantization.propagate_qconfig_ is original:
        quantization.propagate_qconfig_ = propagate_qconfig_


def _wrap_swap_module() -> None:
    original = quantize_module.swap_module
    if getattr(original, "_eml_ops_wrapped", False):
        return

    @functools.wraps(original)
    def swap_module(mod: nn.Module, mapping: dict[Any, Any], *args: Any,
                    **kwargs: Any) -> nn.Module:
        if parametrize.type_before_parametrizations(mod) is Layer:
            mapping = with_layer_entry(mapping)
        return original(mod, mapping, *args, **kwargs)

    swap_module._eml_ops_wrapped = True  # type: ignore[attr-defined]
    quantize_module.swap_module = swap_module  # what convert's module walk calls
    if getattr(quantization, "swap_module", None) is original:
        quantization.swap_module = swap_module


def register_quantization() -> None:
    """Let torch's eager quantisation flows treat Layers as the nn.Linears they were."""
    _register_mappings()
    _wrap_propagate_qconfig()
    _wrap_swap_module()
