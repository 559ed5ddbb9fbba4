"""eml_ops in the ecosystem: tools that find, wrap, mutate or shard nn.Linear layers.

A converted model is still made of ``nn.Linear`` instances (Layer subclasses it), so PEFT,
tensor-parallel styles, FSDP2, type-walking initialisers, pruning and quantisers treat it
as one; what they do to a Layer must compute what it computes on an nn.Linear, or fail with
a clear message.

The DTensor checks run on 2 gloo ranks: the test starts this file under torchrun
(``python -m torch.distributed.run --standalone --nproc_per_node=2 tests/test_ecosystem.py
--result out.json``), see :func:`distributed_main`.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import socket
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import torch.nn.utils.prune
from torch import nn

import eml_ops
from tests.helpers import child_environment


def make_mlp(bias: bool = True) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(8, 16, bias=bias), nn.Tanh(), nn.Linear(16, 16, bias=bias), nn.Tanh(),
        nn.Linear(16, 4, bias=bias),
    )


def converted_pair(seed: int = 0, bias: bool = True) -> tuple[nn.Module, nn.Module]:
    """An nn.Linear MLP and a converted deep copy of it (same weights)."""
    torch.manual_seed(seed)
    original = make_mlp(bias)
    return original, eml_ops.replace_linear(copy.deepcopy(original))


# --------------------------------------------------------------------------------------------
# Recognised as nn.Linear (the Layer itself: tests/test_layer.py)


def test_replace_linear_is_idempotent() -> None:
    original, converted = converted_pair()
    layers = [m for m in converted.modules() if isinstance(m, nn.Linear)]
    assert len(layers) == 3 and all(type(m) is eml_ops.Layer for m in layers)
    again = eml_ops.replace_linear(converted)
    assert again is converted
    assert [m for m in again.modules() if isinstance(m, nn.Linear)] == layers  # same objects
    assert eml_ops.replace_linear(layers[0]) is layers[0]  # a bare Layer comes back as is
    x = torch.randn(5, 8)
    torch.testing.assert_close(again(x), original(x))


def init_weights_like_transformers(module: nn.Module) -> None:
    """The shape of transformers' ``_init_weights``: finds linear layers by type."""
    if isinstance(module, nn.Linear):
        module.weight.data.normal_(mean=0.0, std=0.02)
        if module.bias is not None:
            module.bias.data.zero_()


def test_type_walking_initialiser_reaches_every_layer() -> None:
    original, converted = converted_pair()
    torch.manual_seed(7)
    original.apply(init_weights_like_transformers)
    torch.manual_seed(7)
    converted.apply(init_weights_like_transformers)
    for layer in (converted[0], converted[2], converted[4]):
        assert type(layer) is eml_ops.Layer
        assert layer.bias.abs().sum() == 0  # zeroed: the initialiser reached it
        assert layer.weight.std().item() < 0.05  # N(0, 0.02), not the Kaiming default
    for a, b in zip(original.parameters(), converted.parameters(), strict=True):
        assert torch.equal(a, b)
    x = torch.randn(5, 8)
    torch.testing.assert_close(converted(x), original(x))


def test_type_walking_pruning_prunes_layers_like_nn_linear() -> None:
    original, converted = converted_pair()
    for model in (original, converted):
        targets = [(m, "weight") for m in model.modules() if isinstance(m, nn.Linear)]
        assert len(targets) == 3
        torch.nn.utils.prune.global_unstructured(
            targets, pruning_method=torch.nn.utils.prune.L1Unstructured, amount=0.5
        )
    assert type(converted[0]) is eml_ops.Layer
    assert torch.equal(converted[0].weight_mask, original[0].weight_mask)
    assert (converted[0].weight == 0).any()
    x = torch.randn(5, 8)
    torch.testing.assert_close(converted(x), original(x))
    converted(x).sum().backward()
    original(x).sum().backward()
    torch.testing.assert_close(converted[0].weight_orig.grad, original[0].weight_orig.grad)


class Scaled(nn.Module):
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return 0.5 * weight


@pytest.mark.parametrize("kind", ["custom", "weight_norm"])
def test_parametrized_layer_computes_like_parametrized_nn_linear(kind: str) -> None:
    original, converted = converted_pair()
    for model in (original, converted):
        if kind == "custom":
            torch.nn.utils.parametrize.register_parametrization(model[2], "weight", Scaled())
        else:
            torch.nn.utils.parametrizations.weight_norm(model[2])
    assert isinstance(converted[2], eml_ops.Layer)
    x = torch.randn(5, 8)
    torch.testing.assert_close(converted(x), original(x))
    converted(x).square().sum().backward()
    original(x).square().sum().backward()
    for a, b in zip(original.parameters(), converted.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad)
    torch.nn.utils.parametrize.remove_parametrizations(converted[2], "weight")
    assert type(converted[2]) is eml_ops.Layer
    torch.testing.assert_close(converted(x), original(x))


# --------------------------------------------------------------------------------------------
# Quantisers: module swappers and weight subclasses


def test_quantize_dynamic_leaves_layers_float_and_correct() -> None:
    """torch.ao swaps by exact type: a Layer is not an nn.Linear to it and stays as it is."""
    original, converted = converted_pair()
    x = torch.randn(5, 8)
    expected = original(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.ao.quantization
        from torch.ao.quantization import quantize_dynamic

        quantized_original = quantize_dynamic(copy.deepcopy(original), {nn.Linear})
        quantized = quantize_dynamic(converted, {nn.Linear})
        quantized_by_layer = quantize_dynamic(copy.deepcopy(converted), {eml_ops.Layer})
    assert type(quantized_original[0]) is not nn.Linear  # the original was quantised
    for model in (quantized, quantized_by_layer):
        assert [type(model[i]) for i in (0, 2, 4)] == [eml_ops.Layer] * 3
        torch.testing.assert_close(model(x), expected)


def test_dynamic_quantized_linear_from_a_layer_is_a_clear_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import torch.ao.nn.quantized.dynamic as nnqd

        with pytest.raises(AssertionError, match="only works for one of.*got.*Layer"):
            nnqd.Linear.from_float(eml_ops.Layer(4, 3))


class Int8Weight(torch.Tensor):
    """Weight-only int8 quantisation in the style of torchao: int8 rows, one scale per row.

    Implements ``F.linear`` in ``__torch_function__`` (what nn.Linear calls); at the
    dispatcher it knows only what ``nn.Parameter`` needs, and names anything else.
    """

    @staticmethod
    def __new__(cls, int_data: torch.Tensor, scale: torch.Tensor) -> Int8Weight:
        return torch.Tensor._make_wrapper_subclass(
            cls, int_data.shape, dtype=scale.dtype, device=int_data.device
        )

    def __init__(self, int_data: torch.Tensor, scale: torch.Tensor) -> None:
        self.int_data, self.scale = int_data, scale

    @classmethod
    def from_float(cls, weight: torch.Tensor) -> Int8Weight:
        scale = weight.detach().abs().amax(dim=1).clamp_min(1e-8) / 127
        return cls(torch.round(weight.detach() / scale[:, None]).to(torch.int8), scale)

    def dequantize(self) -> torch.Tensor:
        return self.int_data.to(self.scale.dtype) * self.scale[:, None]

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        kwargs = kwargs or {}
        if func is F.linear:
            input, weight, *bias = args
            return F.linear(input, weight.dequantize(), *bias, **kwargs)  # "the int8 kernel"
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        if func is torch.ops.aten.detach.default:
            return Int8Weight(args[0].int_data, args[0].scale)
        raise NotImplementedError(f"Int8Weight does not implement {func}")


class DequantizingWeight(Int8Weight):
    """A dispatch-level subclass: hands every op the dequantised weight."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        if func is torch.ops.aten.detach.default:
            return DequantizingWeight(args[0].int_data, args[0].scale)
        unwrap = lambda t: t.dequantize() if isinstance(t, Int8Weight) else t  # noqa: E731
        args = torch.utils._pytree.tree_map(unwrap, args)
        return func(*args, **torch.utils._pytree.tree_map(unwrap, kwargs or {}))


def quantize_weights(model: nn.Module, weight_class: type[Int8Weight]) -> int:
    """What torchao's ``quantize_`` does: every nn.Linear (by isinstance) gets a new weight."""
    count = 0
    for module in model.modules():
        if isinstance(module, nn.Linear):
            quantized = weight_class.from_float(module.weight)
            module.weight = nn.Parameter(quantized, requires_grad=False)
            count += 1
    return count


@pytest.mark.parametrize("weight_class", [Int8Weight, DequantizingWeight])
def test_quantised_weight_subclass_computes_as_on_nn_linear(
    weight_class: type[Int8Weight],
) -> None:
    original, converted = converted_pair()
    assert quantize_weights(original, weight_class) == 3
    assert quantize_weights(converted, weight_class) == 3
    assert type(converted[0]) is eml_ops.Layer and type(converted[0].weight) is weight_class
    x = torch.randn(5, 8, requires_grad=True)
    expected = original(x)
    actual = converted(x)
    torch.testing.assert_close(actual, expected)
    # ... and that is the quantised model, not the float one.
    dequantized = F.linear(x, converted[0].weight.dequantize(), converted[0].bias)
    torch.testing.assert_close(converted[0](x), dequantized)
    (grad_actual,) = torch.autograd.grad(actual.sum(), x)
    (grad_expected,) = torch.autograd.grad(expected.sum(), x)
    torch.testing.assert_close(grad_actual, grad_expected)


def test_quantised_weight_without_our_op_is_a_clear_error() -> None:
    """A weight class that knows F.linear only, handed our op directly, names the op."""
    weight = Int8Weight.from_float(torch.randn(3, 4))
    with pytest.raises(NotImplementedError, match=r"Int8Weight does not implement eml\.linear"):
        eml_ops.linear(torch.randn(2, 4), weight)


# --------------------------------------------------------------------------------------------
# PEFT (LoRA) on a converted transformers BERT, built from a config (no downloads)


def tiny_bert_classifier() -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=32, num_labels=3,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    return BertForSequenceClassification(config)


def with_lora(model: nn.Module) -> nn.Module:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)  # the LoRA A matrices are random
    config = LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["query", "value", "dense"],
        modules_to_save=["classifier"],
    )
    return get_peft_model(model, config)


def train_steps(
    model: nn.Module, ids: torch.Tensor, labels: torch.Tensor, steps: int
) -> list[float]:
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_peft_lora_on_converted_bert_trains_like_the_original(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    original = tiny_bert_classifier()
    converted = eml_ops.replace_linear(copy.deepcopy(original))
    assert sum(type(m) is eml_ops.Layer for m in converted.modules()) == 14
    lora_original, lora_converted = with_lora(original), with_lora(converted)
    query = lora_converted.base_model.model.bert.encoder.layer[0].attention.self.query
    assert type(query.base_layer) is eml_ops.Layer  # PEFT wrapped our layer

    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 100, (8, 12), generator=generator)
    labels = torch.randint(0, 3, (8,), generator=generator)
    losses_original = train_steps(lora_original, ids, labels, steps=4)
    losses_converted = train_steps(lora_converted, ids, labels, steps=4)
    assert losses_converted == pytest.approx(losses_original, rel=1e-4)
    assert losses_converted[-1] < losses_converted[0]  # it learned
    trained = {n: p for n, p in lora_converted.named_parameters() if "lora_" in n}
    # A and B for query, value and the three dense layers of each of 2 layers, and the pooler
    assert len(trained) == 2 * (2 * 5 + 1)
    for name, parameter in lora_original.named_parameters():
        if "lora_" in name:
            torch.testing.assert_close(trained[name], parameter, rtol=1e-4, atol=1e-5)

    merged_original, merged = lora_original.merge_and_unload(), lora_converted.merge_and_unload()
    assert type(merged.bert.encoder.layer[0].attention.self.query) is eml_ops.Layer
    with torch.no_grad():
        torch.testing.assert_close(
            merged(input_ids=ids).logits, merged_original(input_ids=ids).logits,
            rtol=1e-4, atol=1e-5,
        )


# --------------------------------------------------------------------------------------------
# DTensor: the strategies are registered when torch.distributed.tensor is imported


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=subprocess_env(), capture_output=True, text=True,
        timeout=120,
    )


EML_OPS_REGISTERED = """
from torch.distributed.tensor import DTensor
strategies = DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs
for name in ("linear", "linear_forward", "linear_backward"):
    assert getattr(torch.ops.eml, name).default in strategies, name
"""


def test_sharding_strategies_register_when_dtensor_is_imported_after_eml_ops() -> None:
    completed = run_python(
        "import sys, torch, eml_ops\n"
        "assert 'torch.distributed.tensor' not in sys.modules  # import eml_ops stays cheap\n"
        "assert not eml_ops._sharding.is_registered()\n"
        "from torch.distributed.tensor.parallel import parallelize_module\n"
        "assert eml_ops._sharding.is_registered()\n"
        "import torch.distributed.tensor as dt\n"
        "assert type(dt.__spec__.loader).__name__ == 'SourceFileLoader', dt.__spec__.loader\n"
        + EML_OPS_REGISTERED
        + "print('registered')\n"
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "registered" and "Warning" not in completed.stderr


def test_sharding_strategies_register_when_dtensor_is_imported_first() -> None:
    completed = run_python(
        "import torch, torch.distributed.tensor\n"
        "import eml_ops\n"
        "assert eml_ops._sharding.is_registered()\n" + EML_OPS_REGISTERED + "print('registered')\n"
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "registered"


def test_no_hook_without_torch_distributed(monkeypatch: pytest.MonkeyPatch) -> None:
    from eml_ops import _sharding

    def must_not_register() -> None:
        raise AssertionError("registered without torch.distributed")

    hooks = [f for f in sys.meta_path if isinstance(f, _sharding._RegisterAfterImport)]
    monkeypatch.setattr(torch.distributed, "is_available", lambda: False)
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f not in hooks])
    monkeypatch.setattr(_sharding, "register_strategies", must_not_register)
    for imported in (False, True):  # DTensor not imported yet, or already imported
        if imported:
            monkeypatch.setitem(sys.modules, "torch.distributed.tensor", sys.modules["torch"])
        else:
            monkeypatch.delitem(sys.modules, "torch.distributed.tensor", raising=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a failed registration would only warn
            _sharding.install()
        assert not any(isinstance(f, _sharding._RegisterAfterImport) for f in sys.meta_path)


# --------------------------------------------------------------------------------------------
# DTensor, tensor parallelism and FSDP2 on 2 gloo ranks (this file under torchrun)

DISTRIBUTED_CASES = [
    "replicated", "column-wise", "row-wise", "batch", "sequence", "partial input",
    "column-wise uneven", "column-wise without bias", "1-D column-wise", "1-D row-wise",
    "column-wise, input without grad", "row-wise, frozen weight", "2-D mesh",
    "linear_backward masks", "double backward", "eml::linear below autograd",
    "parallelize_module", "fully_shard",
]


def subprocess_env() -> dict[str, str]:
    """One thread per process, this test's eml_ops first on the path."""
    return child_environment(OMP_NUM_THREADS="1")


def test_dtensor_tensor_parallel_and_fsdp2_on_two_ranks(tmp_path: Path) -> None:
    result_path = tmp_path / "distributed.json"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        __file__, "--result", str(result_path),
    ]
    completed = subprocess.run(
        command, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    result = json.loads(result_path.read_text())
    assert result["world_size"] == 2
    assert result["checked"] == DISTRIBUTED_CASES  # every case ran, on every rank
    assert result["failures"] == []


def distributed_cases(mesh: Any) -> list[tuple[str, Callable[[], None]]]:
    """The checks that need a process group: (name, check raising AssertionError)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    rank = torch.distributed.get_rank()
    generator = torch.Generator().manual_seed(0)  # the same full tensors on every rank

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    def leaf(tensor: torch.Tensor, placements: Any, on: Any = mesh,
             requires_grad: bool = True) -> DTensor:
        """A DTensor leaf of ``tensor``; ``placements``: one, or a tuple (one per mesh dim)."""
        placements = placements if isinstance(placements, tuple) else (placements,)
        if placements == (Partial(),):  # parts that sum to tensor: 1/4 and 3/4
            part = tensor * (0.25 if rank == 0 else 0.75)
            return DTensor.from_local(part, on, placements).detach().requires_grad_(requires_grad)
        return distribute_tensor(tensor, on, placements).requires_grad_(requires_grad)

    def forward_backward(
        x_shape: tuple[int, ...], out_features: int, placements: tuple[Any, Any, Any | None],
        output: Any, mesh_shape: tuple[int, ...] = (2,), frozen: str = "",
    ) -> Callable[[], None]:
        """``frozen``: the names among x, w, b that do not require a gradient."""

        def check() -> None:
            on = mesh if mesh_shape == (2,) else init_device_mesh("cpu", mesh_shape)
            x, w = randn(*x_shape), randn(out_features, x_shape[-1])
            b = randn(out_features) if placements[2] is not None else None
            g = randn(*x_shape[:-1], out_features)
            needs_grad = [name not in frozen for name in "xwb"]
            full = [
                t.clone().requires_grad_(wanted) if t is not None else None
                for t, wanted in zip((x, w, b), needs_grad, strict=True)
            ]
            (F.linear(*full) * g).sum().backward()
            dtensors = [
                leaf(t, p, on, wanted) if t is not None else None
                for t, p, wanted in zip((x, w, b), placements, needs_grad, strict=True)
            ]
            y = eml_ops.linear(*dtensors)
            expected = output if isinstance(output, tuple) else (output,)
            assert y.placements == expected, f"output placements {y.placements}, not {expected}"
            torch.testing.assert_close(y.full_tensor(), F.linear(x, w, b))
            (y.full_tensor() * g).sum().backward()
            for name, dtensor, reference in zip("xwb", dtensors, full, strict=True):
                if dtensor is None or name in frozen:
                    assert dtensor is None or dtensor.grad is None, f"d{name} of a frozen {name}"
                    continue
                torch.testing.assert_close(
                    dtensor.grad.full_tensor(), reference.grad, msg=lambda m, n=name: f"d{n}: {m}"
                )

        return check

    def backward_masks() -> None:
        # Shapes of their own: no earlier case has filled DTensor's cache for them.
        go, x, w = randn(3, 5, 12), randn(3, 5, 8), randn(12, 8)
        args = (distribute_tensor(go, mesh, [Shard(2)]), distribute_tensor(x, mesh, [Replicate()]),
                distribute_tensor(w, mesh, [Shard(0)]))
        go_2d, x_2d = go.flatten(0, 1), x.flatten(0, 1)
        expected = (go_2d @ w).view(3, 5, 8), go_2d.t() @ x_2d, go_2d.sum(0)
        placements = (Partial(), Shard(0), Shard(0))
        # Masks in turn, same shardings: the mask must be part of DTensor's cache key.
        for mask in (
            [True, False, False],
            [True, True, True],
            [False, True, False],
            [False, False, True],
        ):
            grads = torch.ops.eml.linear_backward(*args, mask)
            checks = zip(mask, grads, expected, placements, strict=True)
            for wanted, grad, reference, placement in checks:
                assert (grad is not None) == wanted, f"mask {mask}: got {grads}"
                if wanted:
                    assert grad.placements == (placement,), f"mask {mask}: {grad.placements}"
                    torch.testing.assert_close(grad.full_tensor(), reference)

    def double_backward() -> None:
        x, w, b, g = randn(5, 8), randn(6, 8), randn(6), randn(5, 6)
        full = [t.clone().requires_grad_() for t in (x, w, b)]
        (grad_x,) = torch.autograd.grad((F.linear(*full) * g).sum(), full[0], create_graph=True)
        grad_x.square().sum().backward()
        dx, dw, db = leaf(x, Replicate()), leaf(w, Shard(0)), leaf(b, Shard(0))
        loss = (eml_ops.linear(dx, dw, db).full_tensor() * g).sum()
        (grad_dx,) = torch.autograd.grad(loss, dx, create_graph=True)
        torch.testing.assert_close(grad_dx.full_tensor(), grad_x)
        grad_dx.full_tensor().square().sum().backward()
        torch.testing.assert_close(dw.grad.full_tensor(), full[1].grad)

    def below_autograd() -> None:
        x, w, b = randn(4, 8), randn(6, 8), randn(6)
        args = (distribute_tensor(x, mesh, [Replicate()]), distribute_tensor(w, mesh, [Shard(0)]),
                distribute_tensor(b, mesh, [Shard(0)]))
        with torch.inference_mode():  # no Autograd key: DTensor sees eml::linear itself
            y = torch.ops.eml.linear(*args)
        assert y.placements == (Shard(1),)
        torch.testing.assert_close(y.full_tensor(), F.linear(x, w, b))

    R, P = Replicate(), Partial()  # noqa: N806  (short names keep the table readable)
    return [
        ("replicated", forward_backward((4, 6, 8), 10, (R, R, R), R)),
        ("column-wise", forward_backward((4, 6, 8), 10, (R, Shard(0), Shard(0)), Shard(2))),
        ("row-wise", forward_backward((4, 6, 8), 10, (Shard(2), Shard(1), R), P)),
        ("batch", forward_backward((4, 6, 8), 10, (Shard(0), R, R), Shard(0))),
        ("sequence", forward_backward((4, 6, 8), 10, (Shard(1), R, R), Shard(1))),
        ("partial input", forward_backward((4, 6, 8), 10, (P, R, R), P)),
        ("column-wise uneven", forward_backward((3, 8), 9, (R, Shard(0), Shard(0)), Shard(1))),
        ("column-wise without bias", forward_backward((3, 8), 10, (R, Shard(0), None), Shard(1))),
        ("1-D column-wise", forward_backward((8,), 10, (R, Shard(0), Shard(0)), Shard(0))),
        ("1-D row-wise", forward_backward((8,), 10, (Shard(0), Shard(1), R), P)),
        # Only one of x and W is saved for backward; the other is passed as a stand-in.
        (
            "column-wise, input without grad",
            forward_backward((4, 6, 8), 10, (R, Shard(0), Shard(0)), Shard(2), frozen="x"),
        ),
        (
            "row-wise, frozen weight",
            forward_backward((4, 6, 8), 10, (Shard(2), Shard(1), R), P, frozen="wb"),
        ),
        (  # one strategy per mesh dim: batch-sharded on the first, column-wise on the second
            "2-D mesh",
            forward_backward(
                (4, 6, 8), 10, ((Shard(0), R), (R, Shard(0)), (R, Shard(0))), (Shard(0), Shard(2)),
                mesh_shape=(1, 2),
            ),
        ),
        ("linear_backward masks", backward_masks),
        ("double backward", double_backward),
        ("eml::linear below autograd", below_autograd),
        ("parallelize_module", lambda: check_parallelize_module(mesh)),
        ("fully_shard", lambda: check_fully_shard(mesh)),
    ]


def assert_gathered_grads_match(model: nn.Module, original: nn.Module) -> None:
    """The (possibly sharded) gradients of ``model``, gathered, equal ``original``'s."""
    from torch.distributed.tensor import DTensor

    parameters = zip(model.named_parameters(), original.parameters(), strict=True)
    for (name, parameter), reference in parameters:
        grad = parameter.grad
        grad = grad.full_tensor() if isinstance(grad, DTensor) else grad
        torch.testing.assert_close(grad, reference.grad, msg=lambda m, n=name: f"{n}: {m}")


def check_parallelize_module(mesh: Any) -> None:
    """Colwise + Rowwise on a converted MLP over [batch, sequence, features] inputs."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch.manual_seed(0)
    original = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    model = eml_ops.replace_linear(copy.deepcopy(original))
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    assert type(model[0]) is eml_ops.Layer and model[0].weight.placements[0].is_shard(0)
    x = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(1))
    y, expected = model(x), original(x)
    torch.testing.assert_close(y, expected)
    y.square().sum().backward()
    expected.square().sum().backward()
    assert_gathered_grads_match(model, original)


def check_fully_shard(mesh: Any) -> None:
    """FSDP2 on a converted MLP: each rank half the batch, gradients of the whole batch."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    original = make_mlp()
    model = eml_ops.replace_linear(copy.deepcopy(original))
    for index in (0, 2, 4):
        fully_shard(model[index], mesh=mesh)
    fully_shard(model, mesh=mesh)
    assert isinstance(model[0], eml_ops.Layer) and model[0].weight.placements[0].is_shard(0)
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(1))
    rows = x.tensor_split(2)[torch.distributed.get_rank()]
    model(rows).square().mean().backward()
    original(x).square().mean().backward()
    assert_gathered_grads_match(model, original)


def distributed_main(argv: list[str]) -> int:
    """Under torchrun: run every distributed case; rank 0 writes what ran and what failed."""
    from torch.distributed.device_mesh import init_device_mesh

    parser = argparse.ArgumentParser()
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    loopback = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    if loopback:  # all ranks are local: keep gloo on the loopback interface
        os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback[0])
    torch.distributed.init_process_group("gloo")
    try:
        mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
        checked, failures = [], []
        for name, check in distributed_cases(mesh):
            try:
                check()
            except Exception as error:  # noqa: BLE001  (report every case, not just the first)
                failures.append(f"{name}: {type(error).__name__}: {error}")
            checked.append(name)
        everyone: list[Any] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(everyone, (checked, failures))
        if torch.distributed.get_rank() == 0:
            result = {
                "world_size": len(everyone),
                "checked": checked if all(c == checked for c, _ in everyone) else everyone,
                "failures": [f"rank {r}: {f}" for r, (_, fs) in enumerate(everyone) for f in fs],
            }
            args.result.write_text(json.dumps(result, indent=2) + "\n")
        torch.distributed.barrier()
        return 0
    finally:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    exit_code = distributed_main(sys.argv[1:])
    # As examples/ddp.py's exit_after_process_group: skip interpreter shutdown, where a gloo
    # worker thread still releasing tensors aborts the process now and then.
    gc.collect()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
