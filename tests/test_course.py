"""The course's stages (seed 6.1–6.3) reproduce the seed's numbers exactly."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import eml_ops
from eml_ops import demo, linear_cpp, linear_python
from tests.helpers import child_environment

# Derived on paper (README): Y = X W^T, dL/dX = dL/dY W, dL/dW = (dL/dY)^T X.
EXPECTED_Y = torch.tensor([[50.0, 122.0], [68.0, 167.0]])
EXPECTED_GRAD_X = torch.tensor([[9.0, 12.0, 15.0], [14.0, 19.0, 24.0]])
EXPECTED_GRAD_W = torch.tensor([[27.0, 30.0, 33.0], [44.0, 49.0, 54.0]])


@pytest.mark.parametrize("name", list(demo.implementations()))
def test_every_stage_gives_the_seed_numbers(name: str) -> None:
    y, grad_x, grad_w = demo.implementations()[name]()
    assert torch.equal(y, EXPECTED_Y)
    assert torch.equal(grad_x, EXPECTED_GRAD_X)
    assert torch.equal(grad_w, EXPECTED_GRAD_W)


def test_demo_lists_every_backend_and_agrees() -> None:
    """The demo runs every backend and C++ variant, and all of them give the first's values."""
    implementations = demo.implementations()
    for backend in eml_ops.available_backends():
        assert f"eml::linear, backend {backend}" in implementations
    for variant in ("aten", "loops"):
        assert f"linear_cpp, {variant} (6.3)" in implementations
    results = {name: run() for name, run in implementations.items()}
    first_name, first = next(iter(results.items()))
    for name, result in results.items():
        for what, got, want in zip(("y", "dL/dx", "dL/dw"), result, first, strict=True):
            assert torch.equal(got, want), f"{name} differs from {first_name} in {what}"


def test_demo_command_prints_agreement() -> None:
    run = subprocess.run([sys.executable, "-m", "eml_ops", "demo"], capture_output=True,
                         text=True, timeout=300, check=False, env=child_environment())
    assert run.returncode == 0, run.stderr
    assert "Hello World!" in run.stdout
    assert "DIFFERS" not in run.stdout
    assert "implementations agree: True" in run.stdout


def test_hello_prints_from_cpp(capfd: pytest.CaptureFixture[str]) -> None:
    eml_ops.hello()
    assert capfd.readouterr().out == "Hello World!\n"


def test_python_layer_weight_can_be_replaced_as_the_hint_says() -> None:
    layer = linear_python.Layer(3, 2)
    assert layer.weight.shape == (2, 3)
    layer.weight = torch.nn.Parameter(torch.tensor([[1.0, 2, 3], [4, 5, 6]]))
    assert torch.equal(layer(torch.tensor([[7.0, 8, 9], [10, 11, 12]])), EXPECTED_Y)


@pytest.mark.parametrize("variant", linear_cpp.VARIANTS)
def test_cpp_function_gradcheck(variant: str) -> None:
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: linear_cpp.Function.apply(a, b, variant), (x, w))


def test_python_function_gradcheck_nd() -> None:
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(linear_python.Function.apply, (x, w))


@pytest.mark.parametrize("variant", linear_cpp.VARIANTS)
def test_cpp_layer_takes_non_contiguous_input(variant: str) -> None:
    layer = linear_cpp.Layer(6, 4, variant=variant)
    x = torch.randn(6, 5).t()  # transposed: Python makes it contiguous before C++
    torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight))


def test_cpp_loops_refuse_non_contiguous_raw_input() -> None:
    with pytest.raises(RuntimeError, match=r"linear_cpp forward: input must be a contiguous 2-D"):
        eml_ops._C.course.loops.forward(torch.randn(3, 4).t(), torch.randn(2, 3))


def test_cpp_unknown_variant() -> None:
    with pytest.raises(ValueError, match="unknown variant 'fast'"):
        linear_cpp.Layer(3, 2, variant="fast")
