"""Seed 6.1 onwards: the worked example, computed by every stage of the course.

``torch.nn.Linear(3, 2, bias=False)`` with the seed's W, X and dL/dY gives Y, dL/dX and
dL/dW; every eml implementation computes the same three, and the demo says whether they
agree exactly.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import _backends, linear_cpp, linear_python
from .layer import Layer

# The seed's data (section 6.1).
SEED_W = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
SEED_X = [[7.0, 8.0, 9.0], [10.0, 11.0, 12.0]]
SEED_DL_DY = [[1.0, 2.0], [2.0, 3.0]]

Result = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def run_layer(layer: torch.nn.Module) -> Result:
    """Forward and backward of ``layer`` on the seed's data: ``(Y, dL/dX, dL/dW)``."""
    layer.weight = torch.nn.Parameter(torch.tensor(SEED_W))
    x = torch.tensor(SEED_X, requires_grad=True)
    y = layer(x)
    y.backward(torch.tensor(SEED_DL_DY))
    return y.detach(), x.grad, layer.weight.grad


def implementations() -> dict[str, Callable[[], Result]]:
    """Every stage of the course, by name, each a thunk computing the seed example."""
    stages: dict[str, Callable[[], Result]] = {
        "torch.nn.Linear (6.1)": lambda: run_layer(torch.nn.Linear(3, 2, bias=False)),
        "linear_python (6.2)": lambda: run_layer(linear_python.Layer(3, 2)),
    }
    for variant in linear_cpp.VARIANTS:
        stages[f"linear_cpp, {variant} (6.3)"] = (
            lambda variant=variant: run_layer(linear_cpp.Layer(3, 2, variant=variant))
        )
    for backend in _backends.available_backends():
        def on_backend(backend: str = backend) -> Result:
            with _backends.use_backend(backend):
                return run_layer(Layer(3, 2))
        stages[f"eml::linear, backend {backend}"] = on_backend
    return stages


def main() -> int:
    """Print the seed example from every stage; return 0 when all agree exactly."""
    from . import hello

    hello()
    torch.set_printoptions(precision=1, sci_mode=False)
    results = {name: compute() for name, compute in implementations().items()}
    expected = next(iter(results.values()))
    all_agree = True
    for name, (y, grad_x, grad_w) in results.items():
        agrees = all(torch.equal(a, b) for a, b in zip((y, grad_x, grad_w), expected, strict=True))
        all_agree &= agrees
        print(f"\n== {name}: {'agrees' if agrees else 'DIFFERS'}")
        print(f"Y =\n{y}\ndL/dX =\n{grad_x}\ndL/dW =\n{grad_w}")
    print(f"\nall {len(results)} implementations agree: {all_agree}")
    return 0 if all_agree else 1
