"""torch.ao.quantization's eager flows quantise a converted model as they do the original.

Each flow runs on an nn.Linear model and on its converted copy; the results must hold the
same quantised module types and compute the same outputs (the same quantised weights, so
the same numbers exactly).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.ao.quantization as tq
import torch.nn.utils.parametrize
from torch import nn

import eml_ops


@pytest.fixture(autouse=True)
def quiet_deprecations() -> Iterator[None]:
    """torch.ao.quantization's eager API is deprecated upstream (and still shipped)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


class Scaled(nn.Module):
    """A parametrization: the weight, doubled."""

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return 2 * weight


def mlp(kind: str = "plain") -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16, bias=False),
                          nn.ReLU(), nn.Linear(16, 4))
    if kind == "parametrized":
        torch.nn.utils.parametrize.register_parametrization(model[2], "weight", Scaled())
    return model


def module_types(model: nn.Module) -> list[tuple[str, type]]:
    """The type of each module, a Layer left float counted as the nn.Linear it was."""
    return [(name, nn.Linear if type(module) is eml_ops.Layer else type(module))
            for name, module in model.named_modules()]


def quantized_weights(model: nn.Module) -> list[torch.Tensor]:
    """The (dequantised) weight of every quantised linear module (reference ones too)."""
    weights = []
    for module in model.modules():
        if isinstance(module, torch.ao.nn.quantized.reference.Linear):
            weights.append(module.get_quantized_weight().dequantize())
        elif callable(getattr(module, "weight", None)):  # quantised modules: a method
            weights.append(module.weight().dequantize())
    return weights


def assert_same_flow(flow: Callable[[nn.Module], nn.Module],
                     make_model: Callable[[], nn.Module], inputs: torch.Tensor | None,
                     exact: bool = True) -> nn.Module:
    """Run ``flow`` on a model and on a converted one: same modules, weights and outputs.

    ``make_model`` builds the same model each time.
    Outputs are equal exactly unless a float Layer ran before quantisation (``exact``
    False: calibration), where its last bits differ from nn.Linear's and with them the
    observed ranges.
    """
    converted = eml_ops.replace_linear(make_model())
    assert any(isinstance(m, eml_ops.Layer) for m in converted.modules())
    expected_model, model = flow(make_model()), flow(converted)
    assert module_types(model) == module_types(expected_model)
    expected_weights = quantized_weights(expected_model)
    assert expected_weights
    for weight, expected in zip(quantized_weights(model), expected_weights, strict=True):
        torch.testing.assert_close(weight, expected, rtol=0, atol=0)
    if inputs is not None:
        with torch.no_grad():
            tolerance = {"rtol": 0, "atol": 0} if exact else {"rtol": 1e-5, "atol": 1e-6}
            torch.testing.assert_close(model(inputs), expected_model(inputs), **tolerance)
    return model


DYNAMIC_FLOWS: dict[str, Callable[[nn.Module], nn.Module]] = {
    "{nn.Linear}": lambda m: tq.quantize_dynamic(m, {nn.Linear}),
    "default spec": lambda m: tq.quantize_dynamic(m),
    "{nn.Linear} qint8": lambda m: tq.quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8),
    "{nn.Linear} float16": lambda m: tq.quantize_dynamic(m, {nn.Linear}, dtype=torch.float16),
    "default spec float16": lambda m: tq.quantize_dynamic(m, dtype=torch.float16),
    "{nn.Linear: qconfig}": lambda m: tq.quantize_dynamic(
        m, {nn.Linear: tq.per_channel_dynamic_qconfig}),
    "by name": lambda m: tq.quantize_dynamic(m, {"0", "4"}),
    "inplace": lambda m: tq.quantize_dynamic(m, {nn.Linear}, inplace=True),
    # A mapping of the user's own names nn.Linear only: Layers are swapped by that entry.
    "user mapping": lambda m: tq.quantize_dynamic(
        m, {nn.Linear}, mapping={nn.Linear: torch.ao.nn.quantized.dynamic.Linear}),
}


@pytest.mark.parametrize("flow", list(DYNAMIC_FLOWS))
def test_quantize_dynamic_as_on_the_original(flow: str) -> None:
    model = assert_same_flow(DYNAMIC_FLOWS[flow], mlp, torch.randn(5, 3, 8))
    quantized = [name for name, m in model.named_modules()
                 if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]
    assert quantized == (["0", "4"] if flow == "by name" else ["0", "2", "4"])


def test_a_user_mapping_without_nn_linear_leaves_layers_float_as_nn_linears() -> None:
    """Neither an nn.Linear nor a Layer is swapped by a mapping that names neither."""
    mapping = {nn.Conv1d: torch.ao.nn.quantized.dynamic.Conv1d}
    expected = tq.quantize_dynamic(mlp(), {nn.Linear}, mapping=mapping)
    model = tq.quantize_dynamic(eml_ops.replace_linear(mlp()), {nn.Linear}, mapping=mapping)
    assert [type(expected[i]) for i in (0, 2, 4)] == [nn.Linear] * 3
    assert [type(model[i]) for i in (0, 2, 4)] == [eml_ops.Layer] * 3
    assert list(mapping) == [nn.Conv1d]  # the user's dict is not changed


def test_convert_with_a_user_mapping_as_on_the_original() -> None:
    """The static flow's ``convert(mapping=)`` with the user's own nn.Linear entry."""
    mapping = {**tq.get_default_static_quant_module_mappings()}
    mapping.pop(eml_ops.Layer)  # as a user's dict written by hand: nn.Linear only

    model = assert_same_flow(lambda m: static_flow(m, mapping), lambda: StubbedModel("plain"),
                             torch.randn(6, 8), exact=False)
    assert [type(model.body[i]) for i in (0, 2, 4)] == [torch.ao.nn.quantized.Linear] * 3
    assert eml_ops.Layer not in mapping


def test_quantize_dynamic_by_layer_type_as_by_nn_linear() -> None:
    expected = tq.quantize_dynamic(mlp(), {nn.Linear})
    model = tq.quantize_dynamic(eml_ops.replace_linear(mlp()), {eml_ops.Layer})
    assert module_types(model) == module_types(expected)


def test_a_qconfig_for_layer_wins_over_nn_linear_s() -> None:
    """An explicit Layer entry is not overridden by the nn.Linear one (here: keep float)."""
    model = eml_ops.replace_linear(mlp())
    spec = {nn.Linear: tq.default_dynamic_qconfig, eml_ops.Layer: None}
    quantized = tq.quantize_dynamic(model, spec)
    assert [type(quantized[i]) for i in (0, 2, 4)] == [eml_ops.Layer] * 3
    assert list(spec) == [nn.Linear, eml_ops.Layer]  # the user's dict is not changed


def test_propagate_qconfig_gives_layers_nn_linear_s_qconfig() -> None:
    """Also called directly, as torch.ao.quantization exports it; the dict stays as it was."""
    model = nn.Sequential(eml_ops.Layer(4, 4), nn.Linear(4, 4), nn.Conv1d(1, 1, 1))
    spec = {nn.Linear: tq.default_dynamic_qconfig}
    tq.propagate_qconfig_(model, spec)
    assert model[0].qconfig is not None and model[1].qconfig is not None
    assert model[2].qconfig is None and list(spec) == [nn.Linear]
    assert tq.propagate_qconfig_.__doc__ == tq.propagate_qconfig_.__wrapped__.__doc__


class StubbedModel(nn.Module):
    """The static flow's model: quantise at the input, dequantise at the output."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.quant, self.body, self.dequant = tq.QuantStub(), mlp(kind), tq.DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dequant(self.body(self.quant(x)))


def static_flow(model: nn.Module, mapping: dict | None = None) -> nn.Module:
    torch.manual_seed(1)
    model.eval().qconfig = tq.get_default_qconfig("x86")
    prepared = tq.prepare(model)
    with torch.no_grad():
        for _ in range(4):
            prepared(torch.randn(16, 8))  # calibration
    return tq.convert(prepared, mapping=mapping)


def qat_flow(model: nn.Module) -> nn.Module:
    torch.manual_seed(1)
    model.train().qconfig = tq.get_default_qat_qconfig("x86")
    prepared = tq.prepare_qat(model)
    optimizer = torch.optim.SGD(prepared.parameters(), lr=0.01)
    for _ in range(3):
        optimizer.zero_grad()
        prepared(torch.randn(16, 8)).square().mean().backward()
        optimizer.step()
    return tq.convert(prepared.eval())


@pytest.mark.parametrize("kind", ["plain", "parametrized"])
@pytest.mark.parametrize("flow", [static_flow, qat_flow], ids=["static", "qat"])
def test_static_and_qat_flows_as_on_the_original(flow: Callable[[nn.Module], nn.Module],
                                                 kind: str) -> None:
    model = assert_same_flow(flow, lambda: StubbedModel(kind), torch.randn(6, 8),
                             exact=flow is qat_flow)  # QAT swaps before any forward
    assert [type(model.body[i]) for i in (0, 2, 4)] == [torch.ao.nn.quantized.Linear] * 3


def test_prepared_layers_observe_as_nn_linear_does() -> None:
    """After prepare() a Layer carries the observer an nn.Linear gets, and still runs ours."""
    model = eml_ops.replace_linear(StubbedModel("plain")).eval()
    model.qconfig = tq.get_default_qconfig("x86")
    prepared = tq.prepare(model)
    assert type(prepared.body[0]) is eml_ops.Layer
    assert isinstance(prepared.body[0].activation_post_process, tq.HistogramObserver)


def test_reference_convert_as_on_the_original() -> None:
    """``convert(is_reference=True)``: reference modules, to be lowered (not run) next."""
    def reference_flow(model: nn.Module) -> nn.Module:
        torch.manual_seed(1)
        model.eval().qconfig = tq.get_default_qconfig("x86")
        prepared = tq.prepare(model)
        prepared(torch.randn(16, 8))
        return tq.convert(prepared, is_reference=True)

    model = assert_same_flow(reference_flow, lambda: StubbedModel("plain"), None)
    assert type(model.body[0]) is torch.ao.nn.quantized.reference.Linear
