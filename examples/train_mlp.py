"""Train an MLP on scikit-learn's digits twice: with ``nn.Linear`` and with ``eml_ops`` Layers.

Both runs start from the same weights (the eml model is a deep copy of the nn.Linear one,
converted with :func:`eml_ops.replace_linear`) and see the same mini-batches in the same
order (one seeded generator per run), so their losses differ only by float32 rounding of
the two GEMM implementations. The script prints both training losses per epoch, the test
accuracy of both models, and saves a plot of the two loss curves.

With ``--autocast bf16`` (or ``fp16``) both runs compute their forward passes under
``torch.autocast("cpu", dtype=...)``: the layers run in 16 bits (eml_ops on its own
bfloat16/float16 GEMM), the weights and optimizer stay float32 (mixed precision).

The digits data set (1797 8x8 images, 10 classes) ships with scikit-learn: nothing is
downloaded.

Run::

    python examples/train_mlp.py --epochs 20 --out train_mlp.png
    python examples/train_mlp.py --backend blocked --hidden 128 --lr 0.05
    python examples/train_mlp.py --autocast bf16
"""

from __future__ import annotations

import argparse
import contextlib
import copy
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypedDict

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

import eml_ops


class Result(TypedDict):
    """What :func:`main` returns."""

    backend: str
    autocast: str | None
    losses_linear: list[float]
    losses_eml: list[float]
    accuracy_linear: float
    accuracy_eml: float
    plot: str


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line (``argv`` without the program name; ``None``: ``sys.argv``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=20, help="passes over the training set")
    parser.add_argument("--batch-size", type=int, default=64, help="mini-batch size")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    parser.add_argument("--hidden", type=int, default=128, help="width of the two hidden layers")
    parser.add_argument(
        "--out", type=Path, default=Path("train_mlp.png"), help="path of the loss plot (PNG)"
    )
    parser.add_argument(
        "--backend",
        choices=eml_ops.available_backends(),
        default=None,
        help="eml_ops GEMM backend for the eml run (default: the current one)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for weights, split and order")
    parser.add_argument(
        "--autocast",
        choices=sorted(AUTOCAST_DTYPES),
        default=None,
        help="run the forward passes under torch.autocast('cpu') in this dtype",
    )
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "hidden"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@contextlib.contextmanager
def autocast(name: str | None) -> Iterator[None]:
    """``torch.autocast("cpu")`` in the dtype called ``name``; nothing when ``name`` is None."""
    if name is None:
        yield
        return
    with torch.autocast("cpu", dtype=AUTOCAST_DTYPES[name]):
        yield


def load_data(
    seed: int, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Digits, split 80/20 (stratified, seeded) and standardised with the training statistics.

    Returns:
        ``(x_train, y_train, x_test, y_test)``; features ``[n, 64]`` in ``dtype``, labels int64.
    """
    features, labels = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        features, labels, test_size=0.2, random_state=seed, stratify=labels
    )
    mean = x_train.mean(axis=0)
    std = x_train.std(axis=0) + 1e-6  # some border pixels are always 0

    def to_tensor(array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy((array - mean) / std).to(dtype)

    return (
        to_tensor(x_train),
        torch.from_numpy(y_train).long(),
        to_tensor(x_test),
        torch.from_numpy(y_test).long(),
    )


def make_mlp(n_inputs: int, n_hidden: int, n_classes: int) -> nn.Sequential:
    """A plain three-layer MLP of ``nn.Linear`` layers."""
    return nn.Sequential(
        nn.Linear(n_inputs, n_hidden),
        nn.ReLU(),
        nn.Linear(n_hidden, n_hidden),
        nn.ReLU(),
        nn.Linear(n_hidden, n_classes),
    )


def train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    label: str,
    autocast_dtype: str | None = None,
) -> list[float]:
    """Train ``model`` with SGD (momentum 0.9); the batch order depends only on ``seed``.

    ``autocast_dtype`` (``"bf16"``, ``"fp16"`` or None): the forward passes' autocast dtype.

    Returns:
        The mean training loss of each epoch.
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_function = nn.CrossEntropyLoss()
    order = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for epoch in range(epochs):
        permutation = torch.randperm(len(x), generator=order)
        total, count = 0.0, 0
        for indices in permutation.split(batch_size):
            optimizer.zero_grad()
            with autocast(autocast_dtype):
                loss = loss_function(model(x[indices]), y[indices])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(indices)
            count += len(indices)
        losses.append(total / count)
        print(f"[{label}] epoch {epoch + 1:3d}/{epochs}: loss {losses[-1]:.6f}", flush=True)
    return losses


@torch.no_grad()
def accuracy(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, autocast_dtype: str | None = None
) -> float:
    """Fraction of ``x`` that ``model`` (autocast to ``autocast_dtype``) classifies as ``y``."""
    model.eval()
    with autocast(autocast_dtype):
        return (model(x).argmax(dim=1) == y).float().mean().item()


def plot_losses(losses_linear: Sequence[float], losses_eml: Sequence[float], path: Path) -> None:
    """Save the two loss curves as a PNG (Agg canvas: no display needed)."""
    figure = Figure(figsize=(6, 4))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    epochs = range(1, len(losses_linear) + 1)
    axes.plot(epochs, losses_linear, "o-", label="nn.Linear")
    axes.plot(epochs, losses_eml, "x--", label="eml_ops.Layer")
    axes.set_xlabel("epoch")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylabel("training loss (cross-entropy)")
    axes.set_yscale("log")
    axes.set_title("MLP on digits: nn.Linear vs eml_ops")
    axes.legend()
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)


def main(argv: Sequence[str] | None = None) -> Result:
    """Run both trainings, print the losses and accuracies, save the plot, return the numbers."""
    args = parse_args(argv)
    x_train, y_train, x_test, y_test = load_data(args.seed)

    torch.manual_seed(args.seed)
    model_linear = make_mlp(x_train.shape[1], args.hidden, int(y_train.max()) + 1)
    model_eml = eml_ops.replace_linear(copy.deepcopy(model_linear))  # same initial weights

    settings = {"epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
                "seed": args.seed, "autocast_dtype": args.autocast}
    losses_linear = train(model_linear, x_train, y_train, label="nn.Linear", **settings)
    backend = args.backend or eml_ops.get_backend()
    with eml_ops.use_backend(backend):
        losses_eml = train(model_eml, x_train, y_train, label=f"eml/{backend}", **settings)
        accuracy_eml = accuracy(model_eml, x_test, y_test, args.autocast)
    accuracy_linear = accuracy(model_linear, x_test, y_test, args.autocast)

    print(f"\n{'epoch':>5}  {'nn.Linear':>10}  {'eml_ops':>10}  {'rel. diff':>9}")
    for epoch, (a, b) in enumerate(zip(losses_linear, losses_eml, strict=True), start=1):
        print(f"{epoch:5d}  {a:10.6f}  {b:10.6f}  {abs(a - b) / abs(a):9.2e}")
    precision = f"autocast {args.autocast}" if args.autocast else "float32"
    print(f"test accuracy ({precision}): nn.Linear {accuracy_linear:.4f}, "
          f"eml_ops ({backend}) {accuracy_eml:.4f}")
    plot_losses(losses_linear, losses_eml, args.out)
    print(f"loss plot: {args.out}")
    return {
        "backend": backend,
        "autocast": args.autocast,
        "losses_linear": losses_linear,
        "losses_eml": losses_eml,
        "accuracy_linear": accuracy_linear,
        "accuracy_eml": accuracy_eml,
        "plot": str(args.out),
    }


if __name__ == "__main__":
    main()
