"""Nested jagged tensors (``layout=torch.jagged``) through eml_ops.linear, Layer and the ops.

Forward and backward (grads of input, weight and bias) against F.linear / nn.Linear on the same
jagged inputs, on every backend, with components of drawn lengths including empty ones; the
work runs on our ops over the dense values; torch.compile; and the inputs F.linear refuses.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import eml_ops
from tests.helpers import BACKENDS, OWN_BACKENDS, tolerance


def jagged(components: list[torch.Tensor], requires_grad: bool = False) -> torch.Tensor:
    return torch.nested.nested_tensor(components, layout=torch.jagged,
                                      requires_grad=requires_grad)


def components(lengths: list[int], inner: tuple[int, ...], dtype: torch.dtype,
               seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(length, *inner, generator=generator, dtype=dtype) for length in lengths]


def run(linear, lengths: list[int], inner: tuple[int, ...], out_features: int,
        with_bias: bool, needs_grad: tuple[bool, bool, bool], dtype: torch.dtype,
        seed: int = 0) -> list[torch.Tensor | None]:
    """Output values and the grads of input, weight and bias of ``linear`` on a jagged input."""
    x = jagged(components(lengths, inner, dtype, seed), requires_grad=needs_grad[0])
    generator = torch.Generator().manual_seed(seed + 1)
    weight = torch.randn(out_features, inner[-1], generator=generator, dtype=dtype)
    bias = torch.randn(out_features, generator=generator, dtype=dtype) if with_bias else None
    weight.requires_grad_(needs_grad[1])
    if bias is not None:
        bias.requires_grad_(needs_grad[2])
    y = linear(x, weight, bias)
    assert y.is_nested and y.layout == torch.jagged
    assert y.shape[0] == len(lengths) and y.shape[1] == x.shape[1]  # the same nested int
    assert torch.equal(y.offsets(), x.offsets())
    results: list[torch.Tensor | None] = [y.values().detach()]
    if y.requires_grad:
        grad_values = torch.randn(y.values().shape, generator=generator, dtype=dtype)
        (y.values() * grad_values).sum().backward()
    results.append(x.grad.values() if x.grad is not None else None)
    results.append(weight.grad)
    results.append(bias.grad if bias is not None else None)
    return results


def assert_all_close(actual: list[torch.Tensor | None], expected: list[torch.Tensor | None],
                     **tolerances: float) -> None:
    for ours, reference in zip(actual, expected, strict=True):
        assert (ours is None) == (reference is None)
        if ours is not None:
            torch.testing.assert_close(ours, reference, **tolerances)


@st.composite
def jagged_problems(draw: st.DrawFn) -> dict:
    lengths = draw(st.lists(st.integers(0, 9), min_size=1, max_size=5))
    extra_dims = draw(st.lists(st.integers(1, 3), max_size=1))  # [B, j, (h,) in]
    in_features = draw(st.integers(1, 24))
    return {
        "lengths": lengths,
        "inner": (*extra_dims, in_features),
        "out_features": draw(st.integers(1, 24)),
        "with_bias": draw(st.booleans()),
        "needs_grad": draw(st.tuples(st.booleans(), st.booleans(), st.booleans())),
        "dtype": draw(st.sampled_from([torch.float32, torch.float64])),
        "backend": draw(st.sampled_from(BACKENDS)),
        "seed": draw(st.integers(0, 2**16)),
    }


@given(jagged_problems())
def test_forward_and_backward_match_f_linear(problem: dict) -> None:
    backend = problem.pop("backend")
    with eml_ops.use_backend(backend):
        ours = run(eml_ops.linear, **problem)
    expected = run(F.linear, **problem)
    assert_all_close(ours, expected, **tolerance(problem["dtype"], problem["inner"][-1] * 10))


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_component_empty(backend: str) -> None:
    problem = {"lengths": [0, 0], "inner": (5,), "out_features": 3, "with_bias": True,
               "needs_grad": (True, True, True), "dtype": torch.float64}
    with eml_ops.use_backend(backend):
        ours = run(eml_ops.linear, **problem)
    assert ours[0].shape == (0, 3) and ours[2].abs().sum() == 0
    assert_all_close(ours, run(F.linear, **problem))


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_matches_nn_linear(backend: str) -> None:
    torch.manual_seed(0)
    reference = nn.Linear(6, 4)
    layer = eml_ops.Layer.from_linear(nn.Linear(6, 4))
    layer.load_state_dict(reference.state_dict())
    parts = components([3, 0, 5, 1], (6,), torch.float32, seed=1)
    results = []
    for module in (layer, reference):
        x = jagged(parts, requires_grad=True)
        with eml_ops.use_backend(backend):
            y = module(x)
            y.values().pow(2).sum().backward()
        results.append([y.values().detach(), x.grad.values(), module.weight.grad,
                        module.bias.grad])
    assert_all_close(*results)


def test_as_nested_tensor_carries_grads_to_the_components() -> None:
    parts = [part.requires_grad_() for part in components([2, 0, 4], (5,), torch.float64, 3)]
    copies = [part.detach().clone().requires_grad_() for part in parts]
    weight = torch.randn(3, 5, dtype=torch.float64)
    for linear, leaves in ((eml_ops.linear, parts), (F.linear, copies)):
        x = torch.nested.as_nested_tensor(leaves, layout=torch.jagged)
        linear(x, weight).values().sum().backward()
    for ours, reference in zip(parts, copies, strict=True):
        assert ours.grad is not None and ours.grad.shape == ours.shape
        torch.testing.assert_close(ours.grad, reference.grad)


def test_the_ops_themselves_on_jagged_tensors() -> None:
    x = jagged(components([2, 3], (4,), torch.float64, 5))
    weight, bias = torch.randn(2, 4, dtype=torch.float64), torch.randn(2, dtype=torch.float64)
    expected = F.linear(x, weight, bias)
    for op in (torch.ops.eml.linear, torch.ops.eml.linear_forward):
        torch.testing.assert_close(op(x, weight, bias).values(), expected.values())
    grad = jagged(components([2, 3], (2,), torch.float64, 6))
    grad_input, grad_weight, grad_bias = torch.ops.eml.linear_backward(grad, x, weight,
                                                                       [True, True, True])
    torch.testing.assert_close(grad_input.values(), grad.values() @ weight)
    torch.testing.assert_close(grad_weight, grad.values().t() @ x.values())
    torch.testing.assert_close(grad_bias, grad.values().sum(0))
    assert torch.equal(grad_input.offsets(), grad.offsets())


class OpLog(TorchDispatchMode):
    """Records each op that reaches dispatch, with whether its tensor arguments are nested."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[bool, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        nested = tuple(arg.is_nested for arg in args if isinstance(arg, torch.Tensor))
        self.calls.append((str(func.overloadpacket), nested))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("backend", OWN_BACKENDS)
def test_the_products_run_on_our_ops_over_the_dense_values(backend: str) -> None:
    x = jagged(components([3, 0, 2], (8,), torch.float32, 7), requires_grad=True)
    weight = torch.randn(4, 8, requires_grad=True)
    log = OpLog()
    with eml_ops.use_backend(backend), log:
        eml_ops.linear(x, weight).values().sum().backward()
    dense_calls = [name for name, nested in log.calls if nested and not any(nested)]
    assert "eml.linear_forward" in dense_calls and "eml.linear_backward" in dense_calls
    matmuls = {"aten.mm", "aten.addmm", "aten.bmm", "aten.matmul", "aten.linear"}
    assert not matmuls & {name for name, _ in log.calls}


def test_inference_mode_and_no_grad() -> None:
    x = jagged(components([4, 1], (3,), torch.float64, 8))
    weight = torch.randn(2, 3, dtype=torch.float64)
    expected = F.linear(x, weight).values()
    for context in (torch.inference_mode, torch.no_grad):
        with context():
            torch.testing.assert_close(eml_ops.linear(x, weight).values(), expected)


def test_compile_matches_eager_f_linear() -> None:
    # One backend: compiling is what is tested here (minutes on a loaded 2-core machine);
    # the backends' kernels on jagged values are checked above.
    torch._dynamo.reset()
    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 2))
    model = eml_ops.replace_linear(nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 2)))
    model.load_state_dict(reference.state_dict())
    compiled = torch.compile(model, fullgraph=True)
    for lengths in ([3, 1, 4], [2, 0, 5]):
        results = []
        for module in (compiled, reference):
            x = jagged(components(lengths, (5,), torch.float32, 10), requires_grad=True)
            y = module(x)
            y.values().pow(2).sum().backward()
            results.append([y.values().detach(), x.grad.values(),
                            *[p.grad.clone() for p in module.parameters()]])
            module.zero_grad()
        assert_all_close(*results)


def holes() -> torch.Tensor:
    return torch.nested.narrow(torch.randn(3, 5, 4), 1, torch.tensor([0, 1, 0]),
                               torch.tensor([2, 1, 3]), layout=torch.jagged)


def transposed() -> torch.Tensor:
    return jagged(components([2, 3], (5, 4), torch.float32, 11)).transpose(1, 2)


@pytest.mark.parametrize("make_input", [holes, transposed], ids=["holes", "transposed"])
def test_non_contiguous_jagged_inputs_are_refused_as_f_linear_does(make_input) -> None:
    x, weight = make_input(), torch.randn(2, 4)
    with pytest.raises(ValueError, match="contiguous"):
        F.linear(x, weight)
    for op in (eml_ops.linear, torch.ops.eml.linear, torch.ops.eml.linear_forward):
        with pytest.raises(ValueError, match=r"eml::linear.*contiguous jagged NestedTensor"):
            op(x, weight)


def test_a_jagged_input_with_holes_made_contiguous_works() -> None:
    x, weight = holes().contiguous(), torch.randn(2, 4)
    torch.testing.assert_close(eml_ops.linear(x, weight).values(), F.linear(x, weight).values())


def test_nested_weight_bias_and_ragged_features_are_refused() -> None:
    x = jagged(components([2, 3], (4,), torch.float32, 12))
    with pytest.raises(ValueError, match="eml::linear: weight must be a dense tensor"):
        eml_ops.linear(torch.randn(2, 4), jagged([torch.randn(3, 4)]))
    with pytest.raises(ValueError, match="eml::linear: bias must be a dense tensor"):
        eml_ops.linear(x, torch.randn(2, 4), jagged([torch.randn(1, 2)]))
    ragged_features = jagged([torch.randn(2), torch.randn(3)])
    with pytest.raises(ValueError, match="in_features.*must not be the ragged one"):
        eml_ops.linear(ragged_features, torch.randn(2, 3))
    with pytest.raises(RuntimeError, match="in_features mismatch"):
        eml_ops.linear(x, torch.randn(2, 5))
