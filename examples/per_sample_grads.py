"""Per-sample gradients of a small eml_ops MLP with ``torch.func``: ``vmap(grad(loss))``.

Per-sample gradients (one gradient of the loss per training example instead of their sum)
are the building block of differentially private SGD, influence functions and gradient
noise statistics. With ``torch.func`` they are one line: ``grad`` differentiates the loss
of a single sample, ``vmap`` maps that over the batch. The model's ``nn.Linear`` layers are
converted to ``eml_ops`` Layers, so every product (forward, backward and the per-sample
weight gradients) runs on eml_ops' GEMM through its C++ autograd kernel and vmap rules.

The script checks the vectorised result against a plain Python loop that calls
``torch.autograd.grad`` once per sample, and prints the largest difference per parameter.

Run::

    python examples/per_sample_grads.py --batch-size 32 --backend blocked
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TypedDict

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

import eml_ops


class Result(TypedDict):
    """What :func:`main` returns."""

    backend: str
    batch_size: int
    shapes: dict[str, list[int]]
    max_abs_diff: dict[str, float]
    match: bool


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line (``argv`` without the program name; ``None``: ``sys.argv``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=32, help="samples in the batch")
    parser.add_argument("--features", type=int, default=20, help="input features")
    parser.add_argument("--hidden", type=int, default=64, help="width of the hidden layer")
    parser.add_argument("--classes", type=int, default=5, help="number of classes")
    parser.add_argument("--backend", choices=eml_ops.available_backends(), default=None,
                        help="eml_ops GEMM backend (default: the current one)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and data")
    return parser.parse_args(argv)


def make_model(features: int, hidden: int, classes: int) -> nn.Module:
    """An MLP built from nn.Linear, converted to eml_ops Layers."""
    model = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, classes))
    return eml_ops.replace_linear(model)


def per_sample_grads_vmap(model: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor,
                          y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gradients of each sample's loss, all at once: ``vmap(grad(loss of one sample))``."""
    def sample_loss(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
                    ) -> torch.Tensor:
        logits = functional_call(model, params, (x.unsqueeze(0),))
        return F.cross_entropy(logits, y.unsqueeze(0))

    return vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, x, y)


def per_sample_grads_loop(model: nn.Module, x: torch.Tensor, y: torch.Tensor
                          ) -> dict[str, torch.Tensor]:
    """The same, one ``torch.autograd.grad`` call per sample."""
    names, params = zip(*model.named_parameters(), strict=True)
    per_sample = []
    for i in range(x.shape[0]):
        loss = F.cross_entropy(model(x[i : i + 1]), y[i : i + 1])
        per_sample.append(torch.autograd.grad(loss, params))
    return {name: torch.stack([grads[k] for grads in per_sample])
            for k, name in enumerate(names)}


def main(argv: Sequence[str] | None = None) -> Result:
    """Compute per-sample gradients both ways, print the differences, return the numbers."""
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    model = make_model(args.features, args.hidden, args.classes)
    x = torch.randn(args.batch_size, args.features)
    y = torch.randint(0, args.classes, (args.batch_size,))
    backend = args.backend or eml_ops.get_backend()
    with eml_ops.use_backend(backend):
        params = {name: p.detach() for name, p in model.named_parameters()}
        vectorised = per_sample_grads_vmap(model, params, x, y)
        looped = per_sample_grads_loop(model, x, y)

    max_abs_diff = {name: float((vectorised[name] - looped[name]).abs().max())
                    if looped[name].numel() else 0.0 for name in looped}
    match = all(torch.allclose(vectorised[name], looped[name], rtol=1e-4, atol=1e-6)
                for name in looped)
    print(f"per-sample gradients of {args.batch_size} samples, eml_ops backend {backend}")
    for name, diff in max_abs_diff.items():
        print(f"  {name:10s} {list(vectorised[name].shape)!s:18s} max |vmap - loop| = {diff:.2e}")
    print("match" if match else "MISMATCH")
    return {
        "backend": backend,
        "batch_size": args.batch_size,
        "shapes": {name: list(t.shape) for name, t in vectorised.items()},
        "max_abs_diff": max_abs_diff,
        "match": match,
    }


if __name__ == "__main__":
    raise SystemExit(0 if main()["match"] else 1)
