"""Tensor-parallel (or FSDP2) training of an eml_ops model with PyTorch's own tools (gloo, CPU).

Every process builds the same MLP (seeded) and converts it with
:func:`eml_ops.replace_linear`. The converted layers are still ``nn.Linear`` instances, so
PyTorch's parallel styles accept them:

* ``--mode tp`` (default): :func:`~torch.distributed.tensor.parallel.parallelize_module`
  splits the layers over the ranks, Megatron-style: the first ``ColwiseParallel`` (weight
  rows on each rank), the second ``RowwiseParallel`` (weight columns; the partial outputs are
  summed), the last ``ColwiseParallel`` with a replicated output. Weights become DTensors
  and our ``eml::linear`` runs on the local shards (see ``eml_ops/_sharding.py``). Every
  rank sees the whole batch.
* ``--mode fsdp``: :func:`~torch.distributed.fsdp.fully_shard` on every layer and the
  model (FSDP2): parameters sharded between steps, gathered for the forward, gradients
  reduce-scattered. Every rank trains on its own shard of the batch, as with DDP.

The task (regression onto a fixed random teacher network) and the batches are those of
``examples/ddp.py``, whose set-up code this example shares.

One machine, two processes::

    torchrun --standalone --nproc_per_node=2 examples/tensor_parallel.py
    torchrun --standalone --nproc_per_node=2 examples/tensor_parallel.py --mode fsdp

Verification mode: ``--steps`` steps (default 3 here) next to a single-process run of the
same model over the whole batches, computed on every rank; each step's loss, the gathered
gradients and the parameters after the last step must agree::

    torchrun --standalone --nproc_per_node=2 examples/tensor_parallel.py --verify --result tp.json

Several machines: as in ``examples/ddp.py`` (``--nnodes``, ``--node_rank``,
``--rdzv_endpoint``); ``--hidden`` must be divisible by the number of processes in tp mode.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Sequence
from typing import Any

import ddp  # examples/ddp.py, next to this script: processes, MLP, teacher, batches
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

import eml_ops

MODES = ("tp", "fsdp")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line (``argv`` without the program name; ``None``: ``sys.argv``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=MODES, default="tp", help="tensor parallel or FSDP2")
    parser.add_argument(
        "--steps", type=int, default=None, help="training steps (default 30; 3 with --verify)"
    )
    ddp.add_training_arguments(
        parser, verify_help="compare every step with a single-process run over the whole batches"
    )
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = 3 if args.verify else 30
    ddp.check_sizes(parser, args)
    return args


def tensor_parallel(model: nn.Sequential, mesh: DeviceMesh) -> nn.Module:
    """Split the three Layers of ``make_model`` over ``mesh`` with PyTorch's parallel styles."""
    plan = {
        "0": ColwiseParallel(),  # output stays sharded on the features: Tanh runs per shard
        "2": RowwiseParallel(),  # consumes those shards; partial outputs summed (all-reduce)
        "4": ColwiseParallel(output_layouts=Replicate()),  # every rank gets the whole output
    }
    return parallelize_module(model, mesh, plan)


def fully_sharded(model: nn.Sequential, mesh: DeviceMesh) -> nn.Module:
    """FSDP2: each Layer is its own unit, the model the root."""
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def full_grads(model: nn.Module) -> torch.Tensor:
    """All parameter gradients as one vector, gathered from the ranks where sharded."""
    grads = [p.grad for p in model.parameters()]
    grads = [g.full_tensor() if isinstance(g, DTensor) else g for g in grads]
    return torch.cat([g.reshape(-1) for g in grads])


def full_parameters(model: nn.Module) -> torch.Tensor:
    """All parameters as one vector, gathered from the ranks where sharded."""
    params = [p.full_tensor() if isinstance(p, DTensor) else p for p in model.parameters()]
    return torch.cat([p.detach().reshape(-1) for p in params])


def parallel_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    args: argparse.Namespace,
    teacher: nn.Module,
    step: int,
) -> float:
    """One step on this rank's part of the batch; returns the loss of the whole batch."""
    x, y = ddp.global_batch(step, args.batch_size, teacher, args.seed)
    if args.mode == "fsdp":  # data parallel: each rank its own rows
        rank, world_size = dist.get_rank(), dist.get_world_size()
        x, y = ddp.shard(x, rank, world_size), ddp.shard(y, rank, world_size)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    batch_loss = loss.detach().clone()
    if args.mode == "fsdp":  # equal shards: the mean of the rank means is the batch mean
        dist.all_reduce(batch_loss)
        batch_loss /= dist.get_world_size()
    return batch_loss.item()


def verify(
    model: nn.Module, reference: nn.Module, args: argparse.Namespace, teacher: nn.Module
) -> dict[str, Any]:
    """``args.steps`` parallel steps, each against a single-process step over the whole batch.

    Returns:
        ``match`` (on every rank: losses, gathered gradients and the final parameters agree
        with the single-process run) and the details.
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=args.lr)
    losses, reference_losses, grad_diffs, failures = [], [], [], []
    for step in range(args.steps):
        losses.append(parallel_step(model, optimizer, args, teacher, step))
        grads = full_grads(model)

        x, y = ddp.global_batch(step, args.batch_size, teacher, args.seed)
        reference_optimizer.zero_grad()
        reference_loss = nn.functional.mse_loss(reference(x), y)
        reference_loss.backward()
        reference_optimizer.step()
        reference_losses.append(reference_loss.item())
        reference_grads = full_grads(reference)

        grad_diffs.append((grads - reference_grads).abs().max().item())
        for what, actual, expected in (
            ("loss", torch.tensor(losses[-1]), torch.tensor(reference_losses[-1])),
            ("gradients", grads, reference_grads),
        ):
            try:
                torch.testing.assert_close(actual, expected)
            except AssertionError as error:
                failures.append(f"step {step}, {what}: {error}")
    try:
        torch.testing.assert_close(full_parameters(model), full_parameters(reference))
    except AssertionError as error:
        failures.append(f"parameters after the last step: {error}")

    everyone: list[list[str] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, failures)
    all_failures = [f"rank {rank}: {f}" for rank, fs in enumerate(everyone) for f in fs or []]
    return {
        "match": not all_failures,
        "losses": losses,
        "reference_losses": reference_losses,
        "max_abs_grad_diff": max(grad_diffs),
        "failures": all_failures,
    }


def train(model: nn.Module, args: argparse.Namespace, teacher: nn.Module) -> list[float]:
    """Train for ``args.steps`` steps; returns the loss of the whole batch of each step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    losses = []
    for step in range(args.steps):
        losses.append(parallel_step(model, optimizer, args, teacher, step))
        if dist.get_rank() == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step:4d}: loss {losses[-1]:.6f}", flush=True)
    return losses


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Train (or verify) on the process group; rank 0 prints and writes ``--result``."""
    args = parse_args(argv)
    rank, world_size = ddp.init_distributed()
    try:
        if args.batch_size % world_size:
            raise SystemExit(
                f"--batch-size {args.batch_size} is not divisible by the world size {world_size}"
            )
        backend = args.backend or eml_ops.get_backend()
        eml_ops.set_backend(backend)

        torch.manual_seed(args.seed)  # the same teacher and initial model on every rank
        teacher = ddp.make_model(args.hidden).requires_grad_(False)
        model = eml_ops.replace_linear(ddp.make_model(args.hidden))
        layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
        assert layers and all(isinstance(m, eml_ops.Layer) for m in layers)
        reference = copy.deepcopy(model)

        mesh = init_device_mesh("cpu", (world_size,))
        parallel = (tensor_parallel if args.mode == "tp" else fully_sharded)(model, mesh)

        result: dict[str, Any] = {
            "mode": args.mode,
            "world_size": world_size,
            "backend": backend,
            "batch_size": args.batch_size,
            "layers": [type(m).__name__ for m in layers],
            "weight_placements": [  # how each weight is held between steps
                [str(p) for p in m.weight.placements] if isinstance(m.weight, DTensor) else []
                for m in layers
            ],
        }
        if args.verify:
            result.update(verify(parallel, reference, args, teacher))
            if rank == 0:
                status = "match" if result["match"] else "MISMATCH"
                print(
                    f"{args.mode} ({world_size} ranks, backend {backend}), {args.steps} steps "
                    f"vs single process over the whole batches: {status} "
                    f"(max |grad diff| {result['max_abs_grad_diff']:.3e})",
                    flush=True,
                )
                for failure in result["failures"]:
                    print(failure, file=sys.stderr, flush=True)
        else:
            result["losses"] = train(parallel, args, teacher)
        if rank == 0 and args.result is not None:
            args.result.parent.mkdir(parents=True, exist_ok=True)
            args.result.write_text(json.dumps(result, indent=2) + "\n")
        dist.barrier()
        return result
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    ddp.exit_after_process_group(0 if main().get("match", True) else 1)
