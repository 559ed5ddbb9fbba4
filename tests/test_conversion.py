"""A PyTorch citizen: the eager entry point and replace_linear behave like F.linear/nn.Linear.

The eager path takes eml::linear's C++ fast lane only for plain tensors; subclasses, FX
proxies and TorchFunctionModes go through torch.ops.eml.linear and see the op. replace_linear
keeps hooks, the training flag, pruning and parametrizations of the modules it converts.
"""

from __future__ import annotations

import copy
import io
import warnings
from collections.abc import Callable

import pytest
import torch
import torch.fx
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrizations, parametrize, prune
from torch.overrides import TorchFunctionMode

import eml_ops


def make_model(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4, bias=False))


# --------------------------------------------------------------------------------------------
# __torch_function__: FX, subclasses, modes


def test_fx_symbolic_trace_records_the_op() -> None:
    model = eml_ops.replace_linear(make_model())
    traced = torch.fx.symbolic_trace(model)
    calls = [node for node in traced.graph.nodes if node.op == "call_function"]
    assert [node.target for node in calls] == [torch.ops.eml.linear] * 2  # Tanh: call_module
    x = torch.randn(5, 8)
    torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
    assert "torch.ops.eml.linear" in traced.code


def test_fx_symbolic_trace_of_the_functional_form() -> None:
    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return eml_ops.linear(x, w, b).relu()

    traced = torch.fx.symbolic_trace(f)
    targets = [node.target for node in traced.graph.nodes if node.op == "call_function"]
    assert torch.ops.eml.linear in targets
    x, w, b = torch.randn(3, 5), torch.randn(2, 5), torch.randn(2)
    torch.testing.assert_close(traced(x, w, b), F.linear(x, w, b).relu())


class Tagged(torch.Tensor):
    """A tensor subclass that only carries its type, as F.linear keeps it."""


@pytest.mark.parametrize("where", ["input", "weight"])
def test_tensor_subclass_survives_as_with_f_linear(backend: str, where: str) -> None:
    x, w, b = torch.randn(4, 6), torch.randn(3, 6), torch.randn(3)
    if where == "input":
        x = x.as_subclass(Tagged)
    else:
        w = w.as_subclass(Tagged)
    expected = F.linear(x, w, b)
    assert type(expected) is Tagged  # what we must match
    for result in (eml_ops.linear(x, w, b), torch.ops.eml.linear(x, w, b)):
        assert type(result) is Tagged
        torch.testing.assert_close(result.as_subclass(torch.Tensor),
                                   expected.as_subclass(torch.Tensor))


def test_tensor_subclass_through_layer_and_backward(backend: str) -> None:
    layer = eml_ops.Layer(6, 3, bias=True)
    plain = torch.randn(4, 6)
    x = plain.clone().as_subclass(Tagged).requires_grad_()
    y = layer(x)
    assert type(y) is Tagged
    y.square().sum().backward()
    reference = plain.clone().requires_grad_()
    expected = torch.autograd.grad(F.linear(reference, layer.weight, layer.bias).square().sum(),
                                   [reference, layer.weight])
    assert x.grad is not None
    torch.testing.assert_close(x.grad.as_subclass(torch.Tensor), expected[0])
    torch.testing.assert_close(layer.weight.grad, expected[1])


class RecordingMode(TorchFunctionMode):
    """Records every function that reaches __torch_function__."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[object] = []

    def __torch_function__(self, func: Callable, types: tuple, args: tuple = (),
                           kwargs: dict | None = None) -> object:
        self.calls.append(func)
        return func(*args, **(kwargs or {}))


def test_torch_function_mode_sees_the_op() -> None:
    layer = eml_ops.Layer(6, 3, bias=True)
    x = torch.randn(4, 6)
    with RecordingMode() as mode:
        y_layer = layer(x)
        y_functional = eml_ops.linear(x, layer.weight, layer.bias)
    assert mode.calls.count(torch.ops.eml.linear) == 2, mode.calls
    expected = F.linear(x, layer.weight, layer.bias)
    torch.testing.assert_close(y_layer, expected)
    torch.testing.assert_close(y_functional, expected)


def test_fake_tensor_mode_runs_through_the_fast_path() -> None:
    # FakeTensorMode is a dispatch mode: the eager path calls eml::linear from C++ with the
    # GIL released, and the dispatcher takes the GIL again for the mode's Python handler.
    from torch._subclasses.fake_tensor import FakeTensorMode

    layer = eml_ops.Layer(6, 3, bias=True)
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.randn(4, 5, 6))
        y = eml_ops.linear(x, mode.from_tensor(layer.weight), mode.from_tensor(layer.bias))
    assert y.shape == (4, 5, 3) and type(y).__name__ == "FakeTensor"


# --------------------------------------------------------------------------------------------
# replace_linear keeps hooks and the training flag


def test_every_hook_and_handle_survives_the_conversion() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(5, 3)
    calls: list[tuple[str, object]] = []

    def record(kind: str) -> Callable:
        def hook(module: nn.Module, *args: object, **kwargs: object) -> None:
            calls.append((kind, module))
        return hook

    def double_output(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        calls.append(("forward", module))
        return output * 2

    def shift_input(module: nn.Module, args: tuple, kwargs: dict) -> tuple:
        calls.append(("forward_pre_kwargs", module))
        return (args[0] + 1,), kwargs

    linear.register_forward_hook(double_output)
    linear.register_forward_pre_hook(shift_input, with_kwargs=True)
    removable = linear.register_forward_pre_hook(record("removed"))
    linear.register_forward_hook(record("forward_kwargs"), with_kwargs=True)
    linear.register_forward_hook(record("always"), always_call=True)
    linear.register_full_backward_pre_hook(record("backward_pre"))
    linear.register_full_backward_hook(record("backward"))
    linear.register_state_dict_pre_hook(record("state_dict_pre"))
    linear.register_state_dict_post_hook(record("state_dict_post"))
    linear.register_load_state_dict_pre_hook(record("load_pre"))
    linear.register_load_state_dict_post_hook(record("load_post"))

    x = torch.randn(4, 5, requires_grad=True)
    expected = (F.linear(x + 1, linear.weight, linear.bias) * 2).detach()
    state = {k: v.clone() for k, v in linear.state_dict().items()}
    layer = eml_ops.replace_linear(linear)
    del linear  # hooks that take the module must now receive the Layer (and not die with it)
    assert isinstance(layer, eml_ops.Layer)
    removable.remove()  # the handle still reaches the hook dict of the converted module
    calls.clear()

    y = layer(x)
    torch.testing.assert_close(y, expected)
    y.sum().backward()
    layer.state_dict()
    layer.load_state_dict(state)
    kinds = [kind for kind, _ in calls]
    assert sorted(kinds) == sorted(["forward_pre_kwargs", "forward", "forward_kwargs", "always",
                                    "backward_pre", "backward", "state_dict_pre",
                                    "state_dict_post", "load_pre", "load_post"]), kinds
    assert all(module is layer for _, module in calls)


@pytest.mark.parametrize("training", [True, False])
def test_training_flag_and_attributes_carry_over(training: bool) -> None:
    model = make_model().train(training)
    model[0].note = "kept"
    eml_ops.replace_linear(model)
    assert isinstance(model[0], eml_ops.Layer) and isinstance(model[2], eml_ops.Layer)
    assert model[0].training is training and model[2].training is training
    assert model[0].note == "kept"


def test_instance_with_its_own_forward_is_left_unconverted_with_a_warning() -> None:
    model = make_model()
    model[2].forward = lambda x: x[..., :4]
    with pytest.warns(UserWarning, match=r"left nn.Linear '2' unconverted: the instance "
                                         r"overrides forward"):
        eml_ops.replace_linear(model)
    assert isinstance(model[0], eml_ops.Layer) and type(model[2]) is nn.Linear
    with pytest.raises(ValueError, match="overrides forward"):
        eml_ops.Layer.from_linear(model[2])
    with pytest.raises(ValueError, match="not an nn.Linear"):
        eml_ops.Layer.from_linear(nn.Tanh())  # type: ignore[arg-type]


def test_linear_compiled_in_place_is_left_unconverted_with_a_warning() -> None:
    linear = nn.Linear(3, 2)
    linear.compile()  # compiles nn.Linear's own call: a Layer holding it would not run eml::
    with pytest.warns(UserWarning, match=r"left nn.Linear \(the model itself\) unconverted: it "
                                         r"was compiled in place"):
        assert eml_ops.replace_linear(linear) is linear


# --------------------------------------------------------------------------------------------
# replace_linear keeps pruning

PRUNINGS: dict[str, Callable[[nn.Module], object]] = {
    "l1_unstructured": lambda m: prune.l1_unstructured(m, "weight", amount=0.4),
    "random_structured": lambda m: prune.random_structured(m, "weight", amount=0.3, dim=0),
    "ln_structured_twice": lambda m: prune.ln_structured(
        prune.l1_unstructured(m, "weight", amount=0.2), "weight", amount=0.25, n=2, dim=1),
    "bias": lambda m: prune.l1_unstructured(m, "bias", amount=0.5),
}


@pytest.mark.parametrize("pruning", PRUNINGS)
def test_pruned_linear_converts_and_keeps_pruning(backend: str, pruning: str) -> None:
    model = make_model()
    PRUNINGS[pruning](model[0])
    x = torch.randn(6, 8)
    expected = model(x)
    keys = list(model.state_dict())
    eml_ops.replace_linear(model)
    layer = model[0]
    assert isinstance(layer, eml_ops.Layer)
    torch.testing.assert_close(model(x), expected)
    assert list(model.state_dict()) == keys
    name = "bias" if pruning == "bias" else "weight"
    mask = getattr(layer, f"{name}_mask").clone()
    assert (mask == 0).any()

    # Training updates the original parameter; the pruned entries stay zero.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()
    model(x)  # the pruning hook recomputes the masked tensor before each forward
    assert torch.all(getattr(layer, name)[mask == 0] == 0)
    reference = F.linear(x, layer.weight, layer.bias)
    torch.testing.assert_close(layer(x), reference)

    prune.remove(layer, name)
    assert isinstance(getattr(layer, name), nn.Parameter)
    assert not hasattr(layer, f"{name}_orig") and not hasattr(layer, f"{name}_mask")
    torch.testing.assert_close(layer(x), reference)


# --------------------------------------------------------------------------------------------
# replace_linear keeps parametrizations


class Symmetric(nn.Module):
    """A parametrization of a square weight: X -> triu(X) + triu(X, 1)^T."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.triu() + x.triu(1).transpose(-1, -2)


class Scaled(nn.Module):
    """A parametrization of the bias: b -> 2 b."""

    def forward(self, b: torch.Tensor) -> torch.Tensor:
        return 2 * b


PARAMETRIZATIONS: dict[str, Callable[[nn.Linear], object]] = {
    "weight_norm": lambda m: parametrizations.weight_norm(m),
    "orthogonal": lambda m: parametrizations.orthogonal(m),
    "spectral_norm": lambda m: parametrizations.spectral_norm(m),
    "symmetric_and_bias": lambda m: (parametrize.register_parametrization(m, "weight", Symmetric()),
                                     parametrize.register_parametrization(m, "bias", Scaled())),
}


def parametrized_model(kind: str) -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8)).double()
    PARAMETRIZATIONS[kind](model[0])
    return model.eval()  # spectral_norm's power iteration runs only in training


@pytest.mark.parametrize("kind", PARAMETRIZATIONS)
def test_parametrized_linear_converts_and_computes_the_same(backend: str, kind: str) -> None:
    model = parametrized_model(kind)
    x = torch.randn(5, 8, dtype=torch.float64)
    expected = model(x)
    original_state = copy.deepcopy(model.state_dict())
    eml_ops.replace_linear(model)
    layer = model[0]
    assert isinstance(layer, eml_ops.Layer) and parametrize.is_parametrized(layer)
    assert type(layer).__name__ == "ParametrizedLayer"
    assert parametrize.type_before_parametrizations(layer) is eml_ops.Layer
    torch.testing.assert_close(model(x), expected, rtol=1e-12, atol=1e-12)
    assert list(model.state_dict()) == list(original_state)

    # The state_dict of the parametrized nn.Linear model loads, and copies work.
    fresh = eml_ops.replace_linear(parametrized_model(kind))
    fresh.load_state_dict(original_state)
    torch.testing.assert_close(fresh(x), expected, rtol=1e-12, atol=1e-12)
    replica = copy.deepcopy(model)
    assert type(replica[0]) is not type(layer) or replica[0] is not layer
    torch.testing.assert_close(replica(x), expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError, match="only supported through state_dict"):
        torch.save(model, io.BytesIO())  # as for the parametrized nn.Linear

    # Gradients reach the original tensors, as they did before.
    model(x).sum().backward()
    originals = dict(layer.parametrizations.named_parameters())
    assert originals and all(p.grad is not None for p in originals.values())

    for name in list(layer.parametrizations.keys()):
        parametrize.remove_parametrizations(layer, name)
    assert type(layer) is eml_ops.Layer and not parametrize.is_parametrized(layer)
    assert isinstance(layer.weight, nn.Parameter)
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected, rtol=1e-10, atol=1e-10)


def test_parametrized_layer_trains_like_the_parametrized_linear(backend: str) -> None:
    original = parametrized_model("weight_norm").train()
    converted = eml_ops.replace_linear(parametrized_model("weight_norm").train())
    x = torch.randn(16, 8, dtype=torch.float64)
    target = torch.randn(16, 8, dtype=torch.float64)
    for model in (original, converted):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(5):
            optimizer.zero_grad()
            F.mse_loss(model(x), target).backward()
            optimizer.step()
    for a, b in zip(original.parameters(), converted.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_legacy_weight_norm_and_spectral_norm_hooks_carry_over() -> None:
    # The deprecated hook-based forms: a forward-pre-hook recomputes `weight` from weight_g and
    # weight_v (or weight_orig and u, v), and spectral_norm adds state_dict hooks.
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model = nn.Sequential(nn.utils.weight_norm(nn.Linear(6, 5)),
                              nn.utils.spectral_norm(nn.Linear(5, 4))).eval()
    x = torch.randn(3, 6)
    expected = model(x)
    state = copy.deepcopy(model.state_dict())
    eml_ops.replace_linear(model)
    assert all(isinstance(m, eml_ops.Layer) for m in model)
    torch.testing.assert_close(model(x), expected)
    assert model.state_dict().keys() == state.keys()
    model.load_state_dict(state)
    torch.testing.assert_close(model(x), expected)
    nn.utils.remove_weight_norm(model[0])
    nn.utils.remove_spectral_norm(model[1])
    torch.testing.assert_close(model(x), expected)
