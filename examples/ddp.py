"""Data-parallel training of an eml_ops model with DistributedDataParallel (gloo, CPU).

Every process builds the same MLP (seeded), converts it with :func:`eml_ops.replace_linear`
and wraps it in :class:`torch.nn.parallel.DistributedDataParallel`. Each step draws one
global batch (the same on every rank, seeded) and every rank trains on its own shard of it;
DDP averages the gradients over the ranks during ``backward``. The task is regression onto
a fixed random "teacher" network.

One machine, two processes (loopback only; ``--standalone`` picks a free rendezvous port)::

    torchrun --standalone --nproc_per_node=2 examples/ddp.py
    python -m torch.distributed.run --standalone --nproc_per_node=4 examples/ddp.py --steps 50

Verification mode: one step, then rank 0 compares the DDP-averaged gradients (and the
parameters after the optimizer step) with a single-process step over the whole batch that
it computes locally, and checks that all ranks hold the same gradients::

    torchrun --standalone --nproc_per_node=2 examples/ddp.py --verify --result ddp.json

Several machines (here 2 with 4 processes each; HOST is the address of the node_rank-0
machine, reachable from the other one, and PORT a free port on it). Run on each machine,
with its own ``--node_rank``::

    torchrun --nnodes=2 --nproc_per_node=4 --node_rank=0 --rdzv_endpoint=HOST:PORT examples/ddp.py
    torchrun --nnodes=2 --nproc_per_node=4 --node_rank=1 --rdzv_endpoint=HOST:PORT examples/ddp.py

(set ``GLOO_SOCKET_IFNAME`` to the network interface to use if gloo picks the wrong one).
Without torchrun, ``python examples/ddp.py`` runs as a single process (world size 1) on
127.0.0.1 with a free port.
"""

from __future__ import annotations

import argparse
import copy
import gc
import ipaddress
import json
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import eml_ops

N_INPUTS = 32
N_OUTPUTS = 8


def add_training_arguments(parser: argparse.ArgumentParser, verify_help: str) -> None:
    """The options of the distributed examples (this one and ``tensor_parallel.py``)."""
    parser.add_argument(
        "--batch-size", type=int, default=64, help="global batch size (divisible by world size)"
    )
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    parser.add_argument("--hidden", type=int, default=64, help="width of the hidden layers")
    parser.add_argument(
        "--backend",
        choices=eml_ops.available_backends(),
        default=None,
        help="eml_ops GEMM backend (default: the current one)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for model and data")
    parser.add_argument("--verify", action="store_true", help=verify_help)
    parser.add_argument(
        "--result", type=Path, default=None, help="write the outcome as JSON here (rank 0)"
    )


def check_sizes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with a usage error unless steps, batch size and hidden width are positive."""
    for name in ("steps", "batch_size", "hidden"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")


def exit_after_process_group(code: int) -> None:
    """Exit with ``code`` once the process group is destroyed, skipping interpreter shutdown.

    At shutdown a gloo worker thread may still be releasing tensors of the last collectives
    while Python and libtorch tear down, which aborts the process now and then ("terminate
    called without an active exception", seen under load); everything is written by now.
    """
    gc.collect()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line (``argv`` without the program name; ``None``: ``sys.argv``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps")
    add_training_arguments(
        parser, verify_help="one step, then compare with a single-process step over the whole batch"
    )
    args = parser.parse_args(argv)
    check_sizes(parser, args)
    return args


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) resolves to a loopback address."""
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def init_distributed() -> tuple[int, int]:
    """Join the gloo process group that torchrun describes (or a world of one without it).

    Returns:
        ``(rank, world_size)``.
    """
    if "RANK" not in os.environ:  # plain `python examples/ddp.py`: a world of one process
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port(os.environ["MASTER_ADDR"])))
    if "GLOO_SOCKET_IFNAME" not in os.environ and is_loopback(os.environ["MASTER_ADDR"]):
        # All processes are local: keep gloo's pairs on the loopback interface even when the
        # host name resolves to an address of another (possibly unreachable) interface.
        loopback = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
        if loopback:
            os.environ["GLOO_SOCKET_IFNAME"] = loopback[0]
    dist.init_process_group(backend="gloo")
    return dist.get_rank(), dist.get_world_size()


def make_model(hidden: int) -> nn.Sequential:
    """An MLP of ``nn.Linear`` layers (the caller converts it to eml Layers)."""
    return nn.Sequential(
        nn.Linear(N_INPUTS, hidden),
        nn.Tanh(),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
        nn.Linear(hidden, N_OUTPUTS),
    )


def global_batch(
    step: int, batch_size: int, teacher: nn.Module, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch of ``step``: identical on every rank (seeded by ``seed`` and ``step``)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    x = torch.randn(batch_size, N_INPUTS, generator=generator)
    with torch.no_grad():
        y = teacher(x)
    return x, y


def shard(tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rows of ``tensor`` that ``rank`` trains on (equal, contiguous shards)."""
    return tensor.tensor_split(world_size)[rank]


def flat_grads(model: nn.Module) -> torch.Tensor:
    """All parameter gradients of ``model`` as one vector."""
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def verify(
    ddp_model: DistributedDataParallel,
    reference: nn.Module | None,
    args: argparse.Namespace,
    teacher: nn.Module,
    rank: int,
    world_size: int,
) -> dict[str, Any]:
    """One DDP step against a single-process step over the whole batch (on rank 0).

    Returns:
        On every rank: ``match`` (gradients and updated parameters agree with the single
        process step, and all ranks hold the same gradients) and the details.
    """
    x, y = global_batch(0, args.batch_size, teacher, args.seed)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(ddp_model(shard(x, rank, world_size)), shard(y, rank, world_size))
    loss.backward()  # DDP: gradients averaged over the ranks
    ddp_grads = flat_grads(ddp_model.module)
    optimizer.step()

    gathered = [torch.empty_like(ddp_grads) for _ in range(world_size)]
    dist.all_gather(gathered, ddp_grads)

    outcome: dict[str, Any] = {}
    if rank == 0:
        assert reference is not None
        reference_optimizer = torch.optim.SGD(reference.parameters(), lr=args.lr)
        reference_optimizer.zero_grad()
        reference_loss = nn.functional.mse_loss(reference(x), y)
        reference_loss.backward()
        reference_grads = flat_grads(reference)
        reference_optimizer.step()

        failures = []
        try:
            torch.testing.assert_close(ddp_grads, reference_grads)
        except AssertionError as error:
            failures.append(f"gradients: {error}")
        try:
            torch.testing.assert_close(
                torch.cat([p.detach().reshape(-1) for p in ddp_model.module.parameters()]),
                torch.cat([p.detach().reshape(-1) for p in reference.parameters()]),
            )
        except AssertionError as error:
            failures.append(f"parameters after the step: {error}")
        ranks_agree = all(torch.equal(g, gathered[0]) for g in gathered)
        if not ranks_agree:
            failures.append("the ranks hold different gradients")
        outcome = {
            "match": not failures,
            "ranks_agree": ranks_agree,
            "max_abs_grad_diff": (ddp_grads - reference_grads).abs().max().item(),
            "reference_loss": reference_loss.item(),
            "failures": failures,
        }
    shared = [outcome]
    dist.broadcast_object_list(shared, src=0)
    return shared[0]


def train(
    ddp_model: DistributedDataParallel,
    args: argparse.Namespace,
    teacher: nn.Module,
    rank: int,
    world_size: int,
) -> list[float]:
    """Train for ``args.steps`` steps; returns the loss of each step averaged over the ranks."""
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr, momentum=0.9)
    losses = []
    for step in range(args.steps):
        x, y = global_batch(step, args.batch_size, teacher, args.seed)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(
            ddp_model(shard(x, rank, world_size)), shard(y, rank, world_size)
        )
        loss.backward()
        optimizer.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        losses.append(mean_loss.item() / world_size)
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step:4d}: loss {losses[-1]:.6f}", flush=True)
    return losses


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Train (or verify) on the process group; rank 0 prints and writes ``--result``."""
    args = parse_args(argv)
    rank, world_size = init_distributed()
    try:
        if args.batch_size % world_size:
            raise SystemExit(
                f"--batch-size {args.batch_size} is not divisible by the world size {world_size}"
            )
        backend = args.backend or eml_ops.get_backend()
        eml_ops.set_backend(backend)

        torch.manual_seed(args.seed)  # the same teacher and initial model on every rank
        teacher = make_model(args.hidden).requires_grad_(False)
        model = eml_ops.replace_linear(make_model(args.hidden))
        assert not any(type(m) is nn.Linear for m in model.modules())  # all converted
        reference = copy.deepcopy(model) if rank == 0 else None
        ddp_model = DistributedDataParallel(model)  # also broadcasts rank 0's parameters

        result: dict[str, Any] = {
            "world_size": world_size,
            "backend": backend,
            "batch_size": args.batch_size,
        }
        if args.verify:
            result.update(verify(ddp_model, reference, args, teacher, rank, world_size))
            if rank == 0:
                status = "match" if result["match"] else "MISMATCH"
                print(
                    f"DDP ({world_size} ranks, backend {backend}) vs single process over the "
                    f"whole batch: {status} (max |grad diff| {result['max_abs_grad_diff']:.3e}, "
                    f"ranks agree: {result['ranks_agree']})",
                    flush=True,
                )
                for failure in result["failures"]:
                    print(failure, file=sys.stderr, flush=True)
        else:
            result["losses"] = train(ddp_model, args, teacher, rank, world_size)
        if rank == 0 and args.result is not None:
            args.result.parent.mkdir(parents=True, exist_ok=True)
            args.result.write_text(json.dumps(result, indent=2) + "\n")
        dist.barrier()
        return result
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    exit_after_process_group(0 if main().get("match", True) else 1)
