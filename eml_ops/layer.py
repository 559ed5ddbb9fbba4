"""The product path: :class:`Layer`, :func:`linear` and :func:`replace_linear`.

All three run ``eml::linear`` (``torch.ops.eml.linear``), whose autograd kernel is C++:

* forward:  ``Y = X W^T (+ b)``
* backward: ``dL/dX = dL/dY W``, ``dL/dW = (dL/dY)^T X``, ``dL/db = sum over rows of dL/dY``

No ``from __future__ import annotations`` here: TorchScript reads these annotations at run time.
"""

import math
import warnings

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
        """Build a Layer that takes over ``module``'s state: see :func:`replace_linear`.

        Raises:
            ValueError: ``module`` is not an ``nn.Linear`` (pruned or parametrized ones are),
                or it has something that cannot be carried over; the message says what.
        """
        reason = _conversion_obstacle(module)
        if reason is not None:
            raise ValueError(f"eml_ops.Layer.from_linear: cannot convert {module!r}: {reason}")
        # Build with the Layer's own __init__ (so any attribute it adds exists), allocating
        # nothing, then take over the whole instance state of the module: the very dicts of
        # parameters, buffers, submodules and hooks (so RemovableHandles keep working),
        # the training flag, pruning's weight_orig/weight_mask and its forward-pre-hook, and
        # the ModuleDict of parametrizations.
        layer = cls(module.in_features, module.out_features, bias=False, device="meta")
        vars(layer).update(vars(module))
        if parametrize.is_parametrized(module):
            layer.__class__ = _parametrized_class(cls, type(module))
        _rebind_module_hooks(layer, module)
        return layer


def _conversion_obstacle(module: nn.Module) -> str | None:
    """Why ``module`` cannot become a Layer computing what it did, or None if it can."""
    if parametrize.type_before_parametrizations(module) is not nn.Linear:
        return f"it is a {type(module).__name__}, not an nn.Linear"
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
    return _replace_linear(module, "")


def _replace_linear(module: nn.Module, path: str) -> nn.Module:
    # path: the module's name in the model, as named_modules() gives it ("" for the root).
    if parametrize.type_before_parametrizations(module) is nn.Linear:
        reason = _conversion_obstacle(module)
        if reason is None:
            return Layer.from_linear(module)
        name = f"'{path}'" if path else "(the model itself)"
        warnings.warn(f"eml_ops.replace_linear: left nn.Linear {name} unconverted: {reason}",
                      stacklevel=3)
        return module
    for name, child in module.named_children():
        converted = _replace_linear(child, f"{path}.{name}" if path else name)
        if converted is not child:
            setattr(module, name, converted)
    return module
