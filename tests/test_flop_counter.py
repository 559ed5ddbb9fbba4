"""FlopCounterMode counts for our operators what it counts for nn.Linear / F.linear.

Forward and backward (every combination of the gradients asked for), N-D inputs and every
layout, with and without bias, on real, fake and meta tensors; per operator when called
directly, per module in a converted model.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

import eml_ops
from tests.test_properties import build, linear_problems

OPS = torch.ops.eml
Linear = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]
# Which of input, weight, bias ask for a gradient: every combination but none.
REQUIRES_GRAD = [flags for flags in itertools.product([False, True], repeat=3) if any(flags)]


def counted(run: Callable[[], object]) -> tuple[int, dict[str, dict[object, int]]]:
    """Total FLOPs FlopCounterMode counts while ``run`` runs, and its per-module table."""
    with FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops(), counter.get_flop_counts()


def forward_backward_flops(linear: Linear, x: torch.Tensor, w: torch.Tensor,
                           b: torch.Tensor | None, requires_grad: tuple[bool, bool, bool]
                           ) -> tuple[int, int]:
    """FLOPs of ``linear``'s forward, and of its backward if anything asks for a gradient."""
    leaves = [None if t is None else t.detach().requires_grad_(flag)
              for t, flag in zip((x, w, b), requires_grad, strict=True)]
    output: list[torch.Tensor] = []
    forward, _ = counted(lambda: output.append(linear(*leaves)))
    (y,) = output
    backward = 0
    if y.requires_grad:
        backward, _ = counted(lambda: y.backward(torch.ones_like(y)))
    return forward, backward


def assert_counts_like_f_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                                requires_grad: tuple[bool, bool, bool]) -> None:
    expected = forward_backward_flops(F.linear, x, w, b, requires_grad)
    assert forward_backward_flops(eml_ops.linear, x, w, b, requires_grad) == expected
    assert expected[0] == 2 * math.prod(x.shape[:-1]) * w.numel()  # the counts are not all 0


@given(problem=linear_problems(backends=["blocked"]), requires_grad=st.sampled_from(REQUIRES_GRAD))
def test_real_tensors_count_as_f_linear(problem: dict, requires_grad: tuple[bool, ...]) -> None:
    x, w, b = build(problem)
    assert_counts_like_f_linear(x, w, b, requires_grad)


@given(problem=linear_problems(features=4096, small_batch=64, large_batch=4096),
       requires_grad=st.sampled_from(REQUIRES_GRAD))
def test_fake_tensors_count_as_f_linear(problem: dict, requires_grad: tuple[bool, ...]) -> None:
    """Estimating without running: large shapes cost nothing on fake tensors."""
    with FakeTensorMode():
        x = torch.empty(*problem["batch"], problem["in_features"])
        w = torch.empty(problem["out_features"], problem["in_features"])
        b = None if problem["bias"] is None else torch.empty(problem["out_features"])
        assert_counts_like_f_linear(x, w, b, requires_grad)


@given(problem=linear_problems(backends=["blocked"], features=512),
       requires_grad=st.sampled_from(REQUIRES_GRAD))
def test_meta_tensors_count_as_f_linear(problem: dict, requires_grad: tuple[bool, ...]) -> None:
    x, w, b = (None if t is None else t.to("meta") for t in build(problem))
    assert_counts_like_f_linear(x, w, b, requires_grad)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 3, 5), (2, 0, 5)])
def test_each_operator_called_directly_is_counted_under_its_name(bias: bool, shape: tuple
                                                                 ) -> None:
    """eml::linear is seen as itself below autograd (inference mode), not as linear_forward."""
    x, w = torch.randn(shape), torch.randn(4, 5)
    b = torch.randn(4) if bias else None
    rows = x[..., 0].numel()
    with torch.inference_mode():
        for packet in (OPS.linear, OPS.linear_forward):
            total, table = counted(lambda packet=packet: packet(x, w, b))
            assert total == counted(lambda: F.linear(x, w, b))[0] == 2 * rows * 5 * 4
            assert table["Global"] == {packet: total}


@pytest.mark.parametrize("mask", list(itertools.product([False, True], repeat=3)))
def test_linear_backward_counts_one_product_per_matrix_gradient(mask: tuple[bool, ...]) -> None:
    grad, x, w = torch.randn(2, 3, 4), torch.randn(2, 3, 5), torch.randn(4, 5)
    total, table = counted(lambda: OPS.linear_backward(grad, x, w, list(mask)))
    assert total == (mask[0] + mask[1]) * 2 * 6 * 5 * 4
    assert table["Global"] == {OPS.linear_backward: total}


def test_double_backward_counts_as_nn_linear() -> None:
    def flops(linear: Linear) -> int:
        torch.manual_seed(0)
        x = torch.randn(6, 5, requires_grad=True)
        w, b = torch.randn(4, 5, requires_grad=True), torch.randn(4, requires_grad=True)

        def run() -> None:
            (grad_x,) = torch.autograd.grad(linear(x, w, b).square().sum(), x, create_graph=True)
            grad_x.sum().backward()

        return counted(run)[0]

    assert flops(eml_ops.linear) == flops(F.linear) > 0


@pytest.mark.parametrize("bias", [True, False])
def test_converted_model_counts_as_the_original_per_module(bias: bool) -> None:
    torch.manual_seed(0)
    original = nn.Sequential(nn.Linear(8, 16, bias=bias), nn.ReLU(), nn.Linear(16, 3, bias=bias))
    converted = eml_ops.replace_linear(copy.deepcopy(original))
    x = torch.randn(4, 7, 8)

    def per_module(model: nn.Module) -> dict[str, int]:
        _, table = counted(lambda: model(x).sum().backward())
        return {name: sum(ops.values()) for name, ops in table.items()}

    expected = per_module(original)
    assert per_module(converted) == expected
    assert expected["Global"] == 3 * 2 * 28 * (8 * 16 + 16 * 3) - 2 * 28 * 8 * 16  # no dL/dx
