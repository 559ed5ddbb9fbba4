"""The product path: :class:`Layer`, :func:`linear` and :func:`replace_linear`.

All three run ``eml::linear`` (``torch.ops.eml.linear``), whose autograd kernel is C++:

* forward:  ``Y = X W^T (+ b)``
* backward: ``dL/dX = dL/dY W``, ``dL/dW = (dL/dY)^T X``, ``dL/db = sum over rows of dL/dY``

No ``from __future__ import annotations`` here: TorchScript reads these annotations at run time.
"""

import warnings
from collections.abc import Callable

import torch
from torch import nn
from torch.nn.modules.module import _WrappedHook  # how torch holds hooks that take the module
from torch.nn.utils import parametrize

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
    # (is_compiling first: Dynamo folds it to True and never traces the C check.)
    if torch.compiler.is_compiling() or _has_torch_function(input, weight, bias):
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


def _layer_forward(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """:meth:`Layer.forward` on these parameters (F.linear for weights that intercept it)."""
    if not torch.jit.is_scripting() and _weights_want_f_linear(weight, bias):
        return nn.functional.linear(input, weight, bias)
    return _eml_linear(input, weight, bias)


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
        return _layer_forward(input, self.weight, self.bias)

    @classmethod
    def from_linear(cls, module: nn.Linear) -> "Layer":
        """Build a Layer that takes over ``module``'s state: see :func:`replace_linear`.

        Raises:
            ValueError: ``module`` is not an ``nn.Linear`` (pruned or parametrized ones are),
                or it has something that cannot be carried over; the message says what.
        """
        reason = _conversion_obstacle(module)
        if reason is not None:
            raise ValueError(f"eml_ops.Layer.from_linear: cannot convert {module!r}: {reason}")
        return _take_over(cls, module)


def _take_over(cls: type, module: nn.Linear) -> nn.Linear:
    """Return a ``cls`` (a Layer class) that has taken over ``module``'s whole state."""
    # Build with cls's own __init__ (so any attribute it adds exists), allocating nothing,
    # then take over the whole instance state of the module: the very dicts of parameters,
    # buffers, submodules and hooks (so RemovableHandles keep working), the training flag,
    # pruning's weight_orig/weight_mask and its forward-pre-hook, and the ModuleDict of
    # parametrizations.
    layer = cls(module.in_features, module.out_features, bias=False, device="meta")
    vars(layer).update(vars(module))
    if parametrize.is_parametrized(module):
        layer.__class__ = _parametrized_class(cls, type(module))
    _rebind_module_hooks(layer, module)
    return layer


def _conversion_obstacle(
    module: nn.Module, accepted: tuple[type, ...] = (nn.Linear,)
) -> str | None:
    """Why ``module`` cannot become a Layer computing what it did, or None if it can.

    ``accepted``: the classes (exactly, before parametrization) that may be converted.
    """
    if parametrize.type_before_parametrizations(module) not in accepted:
        names = " or ".join(
            "an nn.Linear" if kind is nn.Linear else f"a {kind.__name__}" for kind in accepted
        )
        return f"it is a {type(module).__name__}, not {names}"
    overridden = sorted(name for name in vars(module) if callable(getattr(nn.Linear, name, None)))
    if overridden:
        return f"the instance overrides {', '.join(overridden)}, which a Layer would not run"
    if vars(module).get("_compiled_call_impl") is not None:  # Module.compile(): nn.Linear's code
        return "it was compiled in place (Module.compile); convert first, then compile"
    return None


# What type() makes of a class by itself; everything else of a parametrized class is copied.
_TYPE_MACHINERY = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__"})


def _parametrized_class(cls: type, parametrized: type) -> type:
    """``Parametrized<cls>``: the class body of ``parametrized`` on top of ``cls``.

    The body holds what torch injected: one property per parametrized tensor,
    ``__getstate__`` and ``__deepcopy__``. torch.nn.utils.parametrize gives a parametrized
    module the class ``type("Parametrized" + name, (original class,), body)`` and
    remove_parametrizations restores ``__class__.__bases__[0]``; so the converted module needs
    such a class whose only base is ``cls``, and then becomes a plain ``cls`` again.
    """
    namespace = {k: v for k, v in vars(parametrized).items() if k not in _TYPE_MACHINERY}
    if "__deepcopy__" in vars(cls):  # as torch does: a class's own __deepcopy__ wins
        namespace.pop("__deepcopy__", None)
    return type(f"Parametrized{cls.__name__}", (cls,), namespace)


def _rebind_module_hooks(layer: nn.Module, module: nn.Module) -> None:
    """Point the hooks that receive ``module`` itself at ``layer``, in place.

    torch holds such hooks (e.g. ``register_load_state_dict_pre_hook``'s) with a weak
    reference to their module, which would otherwise stay the original one.
    """
    for hooks in vars(layer).values():
        if not isinstance(hooks, dict):
            continue
        for key, hook in list(hooks.items()):
            if isinstance(hook, _WrappedHook) and hook.with_module and hook.module() is module:
                hooks[key] = _WrappedHook(hook.hook, layer)


def replace_linear(module: nn.Module) -> nn.Module:
    """Swap every ``torch.nn.Linear`` in ``module`` (recursively) for a :class:`Layer`.

    The Layer takes over the linear module's whole state, so everything carries over:

    * the Parameter objects themselves (devices, dtypes, ``requires_grad``, gradients, and
      optimizers built before the conversion keep working) and buffers;
    * every hook: forward, forward-pre (also ``with_kwargs`` and ``always_call``), backward,
      backward-pre, ``state_dict`` pre/post and ``load_state_dict`` pre/post hooks, and their
      handles (``handle.remove()`` still works);
    * the ``training`` flag and any attribute set on the module;
    * pruning (``torch.nn.utils.prune``): ``weight_orig``, ``weight_mask`` and the pruning
      hook, so the Layer computes with the masked weight, and ``prune.remove`` works;
    * parametrizations (``torch.nn.utils.parametrize``, e.g. ``weight_norm`` and
      ``orthogonal`` of ``torch.nn.utils.parametrizations``): the Layer becomes a
      ``ParametrizedLayer`` with the same parametrizations, and
      ``parametrize.remove_parametrizations`` turns it into a plain Layer.

    The original module object shares this state afterwards (it should not be used as a
    module of its own). Only ``nn.Linear`` itself is converted (parametrized or not):
    subclasses may override ``forward`` and are left alone. A linear module that cannot be
    converted faithfully (a method such as ``forward`` overridden on the instance) is left
    unconverted, with a warning that names it and says why.

    Returns:
        The model, converted in place; a new Layer if ``module`` itself is an ``nn.Linear``.
    """
    return _convert_modules(module, _replaced_linear)


def _replaced_linear(module: nn.Module, path: str) -> nn.Module | None:
    """Return ``module`` as replace_linear converts it (None: not a linear one, look inside)."""
    if parametrize.type_before_parametrizations(module) is not nn.Linear:
        return None
    reason = _conversion_obstacle(module)
    if reason is None:
        return Layer.from_linear(module)
    warnings.warn(f"eml_ops.replace_linear: left nn.Linear {_describe_path(path)} unconverted: "
                  f"{reason}", stacklevel=4)
    return module


def _describe_path(path: str) -> str:
    return f"'{path}'" if path else "(the model itself)"


def _convert_modules(
    module: nn.Module, convert: Callable[[nn.Module, str], nn.Module | None], path: str = ""
) -> nn.Module:
    """Return ``convert(module, path)``, or if that is None ``module``, children converted.

    The children are converted the same way, recursively, and set in place. ``path``: the
    module's name in the model, as named_modules() gives it ("" for the root).
    """
    converted = convert(module, path)
    if converted is not None:
        return converted
    for name, child in module.named_children():
        converted = _convert_modules(child, convert, f"{path}.{name}" if path else name)
        if converted is not child:
            setattr(module, name, converted)
    return module
