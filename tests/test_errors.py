"""Bad input gets a clear exception naming the op and the shapes, never a crash."""

from __future__ import annotations

import pytest
import torch

import eml_ops

OPS = torch.ops.eml


@pytest.mark.parametrize("op", [OPS.linear, OPS.linear_forward, eml_ops.linear],
                         ids=["ops.eml.linear", "ops.eml.linear_forward", "eml_ops.linear"])
@pytest.mark.parametrize(
    ("x", "w", "b", "message"),
    [
        (torch.randn(4, 5), torch.randn(3, 6), None,
         r"in_features mismatch: input of shape \[4, 5\] has 5 features, weight of shape \[3, 6\]"),
        (torch.tensor(1.0), torch.randn(3, 5), None, r"at least 1 dimension.*0-D input"),
        (torch.randn(4, 5), torch.randn(5), None, r"weight must be 2-D.*1-D weight of shape \[5\]"),
        (torch.randn(4, 5), torch.randn(2, 3, 5), None, r"weight must be 2-D.*3-D weight"),
        (torch.randn(4, 5), torch.randn(3, 5), torch.randn(4),
         r"bias must be 1-D \[out_features\] = \[3\].*got bias of shape \[4\]"),
        (torch.randn(4, 5), torch.randn(3, 5), torch.randn(1, 3), r"got bias of shape \[1, 3\]"),
        (torch.randn(4, 5), torch.randn(3, 5, dtype=torch.float64), None,
         r"same dtype, got input Float \[4, 5\] and weight Double \[3, 5\]"),
        (torch.randn(4, 5), torch.randn(3, 5), torch.randn(3, dtype=torch.float64),
         r"bias must have the dtype of weight, got bias Double and weight Float"),
        (torch.randn(4, 5), torch.randn(3, 5, device="meta"), None,
         r"same device, got input on cpu and weight on meta"),
    ],
)
def test_bad_input_names_op_and_shapes(backend: str, op: object, x: torch.Tensor,
                                       w: torch.Tensor, b: torch.Tensor | None,
                                       message: str) -> None:
    name = "eml::linear_forward" if op is OPS.linear_forward else "eml::linear"
    with pytest.raises(RuntimeError, match=f"{name}: .*{message}"):
        op(x, w, b)


def test_backward_with_inconsistent_grad_output(backend: str) -> None:
    with pytest.raises(RuntimeError, match=r"eml::linear_backward: grad_output must have shape "
                                           r"\[4, 3\].*got \[4, 2\]"):
        OPS.linear_backward(torch.randn(4, 2), torch.randn(4, 5), torch.randn(3, 5),
                            [True, True, True])


def test_symbolic_shapes_are_named_in_the_message() -> None:
    # Under symbolic tracing the sizes are SymInts: the message shows their expressions.
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return OPS.linear(x, w)

    with pytest.raises(RuntimeError, match=r"^eml::linear: in_features mismatch: input of shape "
                                           r"\[s\d+, s\d+\] has s\d+ features, weight of shape "
                                           r"\[s\d+, s\d+\] expects s\d+"):
        make_fx(f, tracing_mode="symbolic")(torch.randn(4, 5), torch.randn(3, 6))
