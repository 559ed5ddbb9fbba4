"""Drop-in for real models: replace_linear and Layer behave like nn.Linear where models care.

Devices, dtypes, frozen parameters, optimizers built before the conversion, state_dicts,
deepcopy, pickling whole models, reduced-precision and integer inputs, meta-device
construction and autocast.
"""

from __future__ import annotations

import copy
import io
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import eml_ops

HALF_DTYPES = [torch.bfloat16, torch.float16]
INTEGER_DTYPES = [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool]
DEVICES = ["cpu", "meta"] + (["cuda"] if torch.cuda.is_available() else [])


def make_model(
    device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> nn.Sequential:
    factory = {"device": device, "dtype": dtype}
    return nn.Sequential(
        nn.Linear(8, 16, **factory),
        nn.ReLU(),
        nn.Sequential(nn.Linear(16, 16, bias=False, **factory), nn.Tanh()),
        nn.Linear(16, 3, **factory),
    )


def layers(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, (nn.Linear, eml_ops.Layer))]


def assert_converted(model: nn.Module) -> None:
    """Every linear layer is an eml Layer (no nn.Linear left)."""
    found = layers(model)
    assert len(found) == 3
    assert all(type(m) is eml_ops.Layer for m in found)


def regression_data(
    dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=generator, dtype=dtype)
    mixing = torch.randn(8, 3, generator=generator, dtype=dtype)
    target = x @ mixing  # learnable, so a few steps reduce the loss clearly
    return x.to(device), target.to(device)


# --------------------------------------------------------------------------------------------
# replace_linear keeps what the model had


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_replace_linear_keeps_device_and_dtype(device: str, dtype: torch.dtype) -> None:
    model = make_model(device=device, dtype=dtype)
    eml_ops.replace_linear(model)
    assert_converted(model)
    for parameter in model.parameters():
        assert parameter.device.type == device and parameter.dtype == dtype
    output = model(torch.randn(5, 8, device=device, dtype=dtype))
    assert output.shape == (5, 3) and output.dtype == dtype and output.device.type == device


def test_float64_model_stays_float64_and_matches() -> None:
    torch.manual_seed(0)
    model = make_model().double()
    x = torch.randn(7, 8, dtype=torch.float64)
    expected = model(x)
    eml_ops.replace_linear(model)
    assert all(p.dtype == torch.float64 for p in model.parameters())
    output = model(x)
    assert output.dtype == torch.float64
    torch.testing.assert_close(output, expected, rtol=1e-12, atol=1e-12)


def test_frozen_linear_stays_frozen() -> None:
    torch.manual_seed(0)
    model = make_model()
    model[0].requires_grad_(False)
    eml_ops.replace_linear(model)
    assert_converted(model)
    assert not model[0].weight.requires_grad and not model[0].bias.requires_grad
    assert model[2][0].weight.requires_grad and model[3].weight.requires_grad

    frozen = [p.detach().clone() for p in model[0].parameters()]
    trainable = [p.detach().clone() for p in model[3].parameters()]
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    x, target = regression_data()
    F.mse_loss(model(x), target).backward()
    optimizer.step()
    assert model[0].weight.grad is None and model[0].bias.grad is None
    for before, after in zip(frozen, model[0].parameters(), strict=True):
        assert torch.equal(before, after)
    for before, after in zip(trainable, model[3].parameters(), strict=True):
        assert not torch.equal(before, after)


@pytest.mark.parametrize("optimizer_class", [torch.optim.SGD, torch.optim.Adam])
def test_optimizer_built_before_conversion_trains_the_converted_model(
    optimizer_class: type[torch.optim.Optimizer],
) -> None:
    torch.manual_seed(0)
    model = make_model()
    optimizer = optimizer_class(model.parameters(), lr=0.02)
    before = [p.detach().clone() for p in model.parameters()]
    eml_ops.replace_linear(model)
    assert_converted(model)
    optimized = [p for group in optimizer.param_groups for p in group["params"]]
    assert all(a is b for a, b in zip(optimized, model.parameters(), strict=True))

    x, target = regression_data()
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0]
    for old, new in zip(before, model.parameters(), strict=True):
        assert not torch.equal(old, new)


# --------------------------------------------------------------------------------------------
# Serialisation and copies


def test_state_dicts_load_both_ways() -> None:
    torch.manual_seed(0)
    original = make_model()
    torch.manual_seed(1)  # different weights, so loading has to change them
    converted = eml_ops.replace_linear(make_model())
    x = torch.randn(9, 8)
    assert not torch.allclose(original(x), converted(x))

    assert list(converted.state_dict()) == list(original.state_dict())
    converted.load_state_dict(original.state_dict())  # nn.Linear -> Layer (strict)
    torch.testing.assert_close(converted(x), original(x))

    torch.manual_seed(2)
    plain = make_model()
    plain.load_state_dict(converted.state_dict())  # Layer -> nn.Linear (strict)
    for a, b in zip(plain.parameters(), converted.parameters(), strict=True):
        assert torch.equal(a, b)
    torch.testing.assert_close(plain(x), converted(x))


def test_deepcopy_is_a_working_independent_model() -> None:
    torch.manual_seed(0)
    model = eml_ops.replace_linear(make_model())
    clone = copy.deepcopy(model)
    assert_converted(clone)
    x = torch.randn(4, 8)
    torch.testing.assert_close(clone(x), model(x), rtol=0, atol=0)
    for a, b in zip(model.parameters(), clone.parameters(), strict=True):
        assert a is not b and a.data_ptr() != b.data_ptr()

    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(clone.parameters(), lr=0.5)
    F.mse_loss(clone(x), torch.zeros(4, 3)).sum().backward()
    optimizer.step()
    assert all(p.grad is None for p in model.parameters())
    for old, parameter in zip(before, model.parameters(), strict=True):
        assert torch.equal(old, parameter)
    assert not torch.allclose(clone(x), model(x))


def test_whole_model_save_and_load(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = eml_ops.replace_linear(make_model())
    x = torch.randn(6, 8)
    expected = model(x)
    path = tmp_path / "model.pt"
    torch.save(model, path)
    loaded = torch.load(path, weights_only=False)
    assert_converted(loaded)
    assert loaded[0].in_features == 8 and loaded[3].out_features == 3
    assert loaded[2][0].bias is None
    torch.testing.assert_close(loaded(x), expected, rtol=0, atol=0)

    buffer = io.BytesIO()  # and once more through memory, after a training step
    loss = F.mse_loss(loaded(x), torch.zeros_like(expected))
    loss.backward()
    torch.save(loaded, buffer)
    buffer.seek(0)
    again = torch.load(buffer, weights_only=False)
    torch.testing.assert_close(again(x), expected, rtol=0, atol=0)


# --------------------------------------------------------------------------------------------
# Input dtypes


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision_matches_f_linear(backend: str, dtype: torch.dtype, bias: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    n_rows, n_in, n_out = 16, 64, 24
    # Scaled so outputs and gradients are O(1): tolerances are then a few units of rounding.
    x = torch.randn(n_rows, n_in, generator=generator).to(dtype)
    w = (torch.randn(n_out, n_in, generator=generator) / n_in**0.5).to(dtype)
    b = torch.randn(n_out, generator=generator).to(dtype) if bias else None
    grad = (torch.randn(n_rows, n_out, generator=generator) / n_rows**0.5).to(dtype)
    eps = torch.finfo(dtype).eps
    close = {"rtol": 4 * eps, "atol": 4 * eps}

    results = []
    for function in (eml_ops.linear, F.linear):
        inputs = [t.clone().requires_grad_() for t in (x, w, b) if t is not None]
        output = function(*inputs)
        output.backward(grad)
        results.append((output, *(t.grad for t in inputs)))
    for ours, theirs in zip(*results, strict=True):
        assert ours.dtype == dtype
        torch.testing.assert_close(ours, theirs, **close)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision_model(backend: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = make_model(dtype=dtype)
    converted = eml_ops.replace_linear(copy.deepcopy(model))
    x = torch.randn(5, 8, dtype=dtype)
    output = converted(x)
    assert output.dtype == dtype
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(output, model(x), rtol=8 * eps, atol=8 * eps)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_integer_inputs_behave_like_f_linear(backend: str, dtype: torch.dtype, bias: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    low = 0 if dtype in (torch.uint8, torch.bool) else -4
    high = 2 if dtype == torch.bool else 5

    def draw(*shape: int) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=generator).to(dtype)

    args = [draw(5, 7), draw(3, 7)] + ([draw(3)] if bias else [])
    try:
        expected = F.linear(*args)
    except RuntimeError as error:  # NotImplementedError is a RuntimeError too
        with pytest.raises(RuntimeError) as raised:
            eml_ops.linear(*args)
        assert str(raised.value), f"eml_ops raised an empty message where F.linear said {error}"
    else:
        output = eml_ops.linear(*args)
        assert output.dtype == expected.dtype == dtype
        assert torch.equal(output, expected)


def test_mixed_integer_and_float_raise_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="dtype"):
        eml_ops.linear(torch.ones(2, 3, dtype=torch.int64), torch.ones(4, 3))


# --------------------------------------------------------------------------------------------
# Meta-device construction


def test_meta_device_model_converts_and_infers_shapes() -> None:
    with torch.device("meta"):
        model = make_model()
        eml_ops.replace_linear(model)
        direct = eml_ops.Layer(8, 4, bias=True)
    assert_converted(model)
    assert all(p.is_meta for p in model.parameters())
    assert direct.weight.is_meta and direct.bias.is_meta
    output = model(torch.empty(11, 2, 8, device="meta"))
    assert output.is_meta and output.shape == (11, 2, 3)
    assert direct(torch.empty(6, 8, device="meta")).shape == (6, 4)


def test_meta_model_materialises_and_runs() -> None:
    """The usual large-model flow: build on meta, convert, allocate, initialise, run."""
    with torch.device("meta"):
        model = eml_ops.replace_linear(make_model())
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    for layer in layers(model):
        layer.reset_parameters()
    assert_converted(model)
    assert all(p.device.type == "cpu" for p in model.parameters())
    x = torch.randn(4, 8)
    expected = x
    for module in (model[0], model[1], model[2][0], model[2][1], model[3]):
        expected = (
            F.linear(expected, module.weight, module.bias)
            if isinstance(module, eml_ops.Layer)
            else module(expected)
        )
    torch.testing.assert_close(model(x), expected)
    assert torch.isfinite(model(x)).all()


# --------------------------------------------------------------------------------------------
# Autocast


@pytest.mark.parametrize("bias", [True, False])
def test_autocast_bfloat16_like_f_linear(bias: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(16, 32, generator=generator)
    w = torch.randn(8, 32, generator=generator) / 32**0.5
    b = torch.randn(8, generator=generator) if bias else None
    grad = torch.randn(16, 8, generator=generator).to(torch.bfloat16)
    close = {"rtol": 2e-2, "atol": 2e-2}

    results = []
    for function in (eml_ops.linear, F.linear):
        leaves = [t.clone().requires_grad_() for t in (x, w, b) if t is not None]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            output = function(*leaves)
        output.backward(grad)
        results.append((output, leaves))
    (ours, our_leaves), (theirs, their_leaves) = results
    assert theirs.dtype == torch.bfloat16  # what F.linear does under CPU autocast
    assert ours.dtype == torch.bfloat16
    torch.testing.assert_close(ours, theirs, **close)
    for our_leaf, their_leaf in zip(our_leaves, their_leaves, strict=True):
        assert our_leaf.grad is not None and our_leaf.grad.dtype == torch.float32
        torch.testing.assert_close(our_leaf.grad, their_leaf.grad, **close)


def test_autocast_converted_model_outputs_bfloat16() -> None:
    torch.manual_seed(0)
    model = make_model()
    converted = eml_ops.replace_linear(copy.deepcopy(model))
    x = torch.randn(5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x)
        output = converted(x)
    assert expected.dtype == output.dtype == torch.bfloat16
    torch.testing.assert_close(output, expected, rtol=2e-2, atol=2e-2)
    output.float().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in converted.parameters())
