"""eml_ops.Layer and replace_linear: a drop-in for nn.Linear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import eml_ops


def test_layer_initialises_like_nn_linear() -> None:
    torch.manual_seed(0)
    reference = nn.Linear(7, 4)
    torch.manual_seed(0)
    layer = eml_ops.Layer(7, 4, bias=True)
    assert torch.equal(layer.weight, reference.weight)
    assert torch.equal(layer.bias, reference.bias)
    assert [name for name, _ in layer.named_parameters()] == ["weight", "bias"]


def test_layer_default_has_no_bias_and_repr() -> None:
    layer = eml_ops.Layer(3, 2)
    assert layer.bias is None
    assert repr(layer) == "Layer(in_features=3, out_features=2, bias=False)"


def test_state_dicts_are_interchangeable() -> None:
    reference = nn.Linear(5, 3)
    layer = eml_ops.Layer(5, 3, bias=True)
    layer.load_state_dict(reference.state_dict())
    x = torch.randn(6, 5)
    torch.testing.assert_close(layer(x), reference(x))
    back = nn.Linear(5, 3)
    back.load_state_dict(layer.state_dict())
    assert torch.equal(back.weight, reference.weight)


def test_layer_dtype_and_device_arguments() -> None:
    layer = eml_ops.Layer(4, 2, bias=True, dtype=torch.float64, device="cpu")
    assert layer.weight.dtype == torch.float64 and layer.bias.dtype == torch.float64
    assert layer(torch.randn(3, 4, dtype=torch.float64)).dtype == torch.float64


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(8, 16),
        nn.ReLU(),
        nn.Sequential(nn.Linear(16, 16, bias=False), nn.Tanh()),
        nn.Linear(16, 2),
    )


def test_layer_is_an_nn_linear_with_its_attributes() -> None:
    layer = eml_ops.Layer(5, 3, bias=True)
    assert isinstance(layer, nn.Linear)
    assert (layer.in_features, layer.out_features) == (5, 3)
    assert layer.weight.shape == (3, 5) and layer.bias.shape == (3,)
    assert list(layer.state_dict()) == list(nn.Linear(5, 3).state_dict())
    x = torch.randn(4, 5)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))


def test_layer_rebuilt_from_its_type_and_attributes() -> None:
    """Tools rebuild a layer as ``type(m)(m.in_features, m.out_features, bias=...)``."""
    layer = eml_ops.Layer(6, 2, bias=True)
    for rebuilt in (
        type(layer)(layer.in_features, layer.out_features, bias=layer.bias is not None),
        type(layer)(in_features=6, out_features=2, bias=True),  # nn.Linear's keyword names
        type(layer)(6, out_features=2, bias=True),
    ):
        assert type(rebuilt) is eml_ops.Layer
        assert rebuilt.weight.shape == (2, 6) and rebuilt.bias.shape == (2,)
    assert eml_ops.Layer(6, 2).bias is None  # the course's default stays: no bias


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((6, 2), {"in_features": 6}, "i_n_features_input and in_features, got both"),
        ((), {"out_features": 2}, "i_n_features_input and in_features, got neither"),
        ((6,), {}, "i_n_features_output and out_features, got neither"),
    ],
)
def test_layer_sizes_given_twice_or_not_at_all_raise(
    args: tuple[int, ...], kwargs: dict[str, int], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        eml_ops.Layer(*args, **kwargs)


def test_replace_linear_swaps_recursively_and_keeps_parameters() -> None:
    model = make_model()
    parameters = list(model.parameters())
    x = torch.randn(5, 8)
    expected = model(x)
    converted = eml_ops.replace_linear(model)
    assert converted is model
    assert isinstance(model[0], eml_ops.Layer) and isinstance(model[2][0], eml_ops.Layer)
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert all(a is b for a, b in zip(model.parameters(), parameters, strict=True))
    torch.testing.assert_close(model(x), expected)


def test_replace_linear_on_a_bare_linear_returns_a_layer() -> None:
    linear = nn.Linear(3, 2)
    layer = eml_ops.replace_linear(linear)
    assert isinstance(layer, eml_ops.Layer) and layer.weight is linear.weight


def test_replace_linear_leaves_subclasses_alone() -> None:
    class Custom(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) * 2

    model = nn.Sequential(Custom(3, 3))
    eml_ops.replace_linear(model)
    assert type(model[0]) is Custom


def test_converted_model_trains_like_the_original(backend: str) -> None:
    torch.manual_seed(1)
    original = make_model().double()
    converted = eml_ops.replace_linear(make_model().double())
    converted.load_state_dict(original.state_dict())
    x, target = torch.randn(32, 8, dtype=torch.float64), torch.randn(32, 2, dtype=torch.float64)
    for model in (original, converted):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(5):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), target).backward()
            optimizer.step()
    for a, b in zip(original.parameters(), converted.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
