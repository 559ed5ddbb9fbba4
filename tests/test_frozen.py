"""Frozen weights: eml::pack_weight, eml::linear_packed, eml_ops.FrozenLayer, freeze, unfreeze."""

from __future__ import annotations

import copy
import io
import threading
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import eml_ops
from tests.helpers import intra_op_threads, tolerance
from tests.test_properties import build, linear_problems, running_on

pack = torch.ops.eml.pack_weight
packed_linear = torch.ops.eml.linear_packed


class OpsSeen(TorchDispatchMode):
    """Records the name of every operator dispatched while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.names.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def ops_of(fn: object, *args: object) -> list[str]:
    with OpsSeen() as seen:
        fn(*args)
    return seen.names


# --------------------------------------------------------------------------------------------
# The operators against F.linear and float64: shapes (0 and 1 included), layouts, ISAs, threads


@given(linear_problems(dtypes=(torch.float32, torch.float64), small_batch=40, features=150))
def test_packed_op_matches_f_linear_and_float64(problem: dict) -> None:
    x, w, b = build(problem)
    with running_on(problem):  # the ISA the weight is packed and multiplied with
        packed, block_k = pack(w)
        actual = packed_linear(x, packed, block_k, w.shape[0], b)
    expected = F.linear(x, w, b)
    reference = F.linear(x.double(), w.double(), None if b is None else b.double())
    tol = tolerance(problem["dtype"], problem["in_features"])
    assert actual.dtype == x.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, **tol)
    torch.testing.assert_close(actual.double(), reference, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rows", [1, 2, 7, 8, 13, 64, 300])
def test_packed_op_beyond_the_cache_blocks(dtype: torch.dtype, rows: int) -> None:
    # k past KC (several blocks of steps), n past the panels of one thread's part.
    torch.manual_seed(rows)
    x, w, b = torch.randn(rows, 1100, dtype=dtype), torch.randn(530, 1100, dtype=dtype), None
    packed, block_k = pack(w)
    assert block_k < 1100 and packed.shape[0] == 1100 and packed.shape[1] >= 530
    for threads in (1, 2):
        with intra_op_threads(threads):
            torch.testing.assert_close(packed_linear(x, packed, block_k, 530, b), F.linear(x, w),
                                       **tolerance(dtype, 1100))


def test_a_packed_weight_keeps_its_block_depth_across_isas() -> None:
    # Packed under one ISA's blocks, multiplied under another's: block_k travels with it.
    torch.manual_seed(0)
    x, w = torch.randn(9, 700), torch.randn(40, 700)
    isa = eml_ops._C.get_isa()
    try:
        for pack_isa in ("generic", isa):
            eml_ops._C.set_isa(pack_isa)
            packed, block_k = pack(w)
            for run_isa in ("generic", isa):
                eml_ops._C.set_isa(run_isa)
                torch.testing.assert_close(packed_linear(x, packed, block_k, 40),
                                           F.linear(x, w), **tolerance(torch.float32, 700))
    finally:
        eml_ops._C.set_isa(isa)


def test_packed_op_at_an_unaligned_address_is_copied_not_misread() -> None:
    torch.manual_seed(1)
    x, w = torch.randn(6, 33), torch.randn(20, 33)
    packed, block_k = pack(w)
    storage = torch.empty(packed.numel() + 1)
    shifted = storage[1:].view(packed.shape).copy_(packed)  # 4 bytes past the allocation
    assert shifted.data_ptr() % 64 != 0
    torch.testing.assert_close(packed_linear(x, shifted, block_k, 20), F.linear(x, w))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_opcheck(dtype: torch.dtype) -> None:
    torch.manual_seed(2)
    w = torch.randn(19, 37, dtype=dtype)
    torch.library.opcheck(pack, (w,))
    packed, block_k = pack(w)
    for x, bias in [(torch.randn(5, 37, dtype=dtype), torch.randn(19, dtype=dtype)),
                    (torch.randn(2, 3, 37, dtype=dtype), None)]:
        torch.library.opcheck(packed_linear, (x, packed, block_k, 19, bias))


def test_meta_tensors_give_the_shapes() -> None:
    packed, block_k = pack(torch.empty(50, 30, device="meta"))
    assert packed.device.type == "meta" and packed.shape == (30, 64) and block_k >= 1
    out = packed_linear(torch.empty(4, 7, 30, device="meta"), packed, block_k, 50)
    assert out.shape == (4, 7, 50) and out.device.type == "meta"


def test_bad_arguments_raise_naming_the_op_and_shapes() -> None:
    w = torch.randn(20, 8)
    packed, block_k = pack(w)
    x = torch.randn(3, 8)
    cases = [
        (lambda: pack(torch.randn(3)), r"eml::pack_weight: weight must be 2-D"),
        (lambda: pack(w.half()), r"eml::pack_weight: weight must be float32 or float64"),
        (lambda: packed_linear(torch.randn(3, 9), packed, block_k, 20),
         r"eml::linear_packed: packed_weight must be \[in_features, padded out_features\] = "
         r"\[9, 32\]"),
        (lambda: packed_linear(x, packed, block_k, 40), r"= \[8, 48\].*got \[8, 32\]"),
        (lambda: packed_linear(x.double(), packed, block_k, 20), r"same dtype"),
        (lambda: packed_linear(x.int(), packed, block_k, 20), r"float32 or float64"),
        (lambda: packed_linear(x, packed, 0, 20), r"block_k >= 1"),
        (lambda: packed_linear(x, packed.t().contiguous().t(), block_k, 20), r"contiguous"),
        (lambda: packed_linear(x, packed, block_k, 20, torch.randn(19)), r"bias must be 1-D"),
        (lambda: packed_linear(x, packed, block_k, 20, torch.randn(20).double()),
         r"bias must have input's dtype"),
        (lambda: packed_linear(torch.randn(()), packed, block_k, 20), r"at least 1 dimension"),
        (lambda: packed_linear(x.requires_grad_(), packed, block_k, 20),
         r"eml::linear_packed: computes no gradients"),
    ]
    for call, message in cases:
        with pytest.raises(RuntimeError, match=message):
            call()


def test_no_gradient_needed_under_no_grad() -> None:
    x = torch.randn(3, 8, requires_grad=True)
    packed, block_k = pack(torch.randn(5, 8, requires_grad=True))
    assert not packed.requires_grad  # a constant
    with torch.no_grad():
        assert not packed_linear(x, packed, block_k, 5).requires_grad


# --------------------------------------------------------------------------------------------
# FrozenLayer and freeze: nn.Linear's results, the packed path where it applies


def model(dtype: torch.dtype = torch.float32) -> nn.Sequential:
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(48, 96), nn.GELU(), nn.Linear(96, 24, bias=False),
                         eml_ops.Layer(24, 10, bias=True)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_freeze_keeps_the_results_and_packs(dtype: torch.dtype) -> None:
    reference = model(dtype).eval()
    frozen = eml_ops.freeze(copy.deepcopy(reference))
    assert [type(m) for m in frozen if isinstance(m, nn.Linear)] == [eml_ops.FrozenLayer] * 3
    assert isinstance(frozen[0], nn.Linear) and isinstance(frozen[0], eml_ops.Layer)
    assert frozen.state_dict().keys() == reference.state_dict().keys()
    x = torch.randn(2, 5, 48, dtype=dtype)
    with torch.no_grad():
        torch.testing.assert_close(frozen(x), reference(x), **tolerance(dtype, 96))
        assert ops_of(frozen, x).count("eml.linear_packed") == 3
    with torch.inference_mode():
        assert ops_of(frozen, x).count("eml.linear_packed") == 3
    assert "packed=True" in repr(frozen[0])


def test_training_calls_run_on_the_weight_with_gradients() -> None:
    reference, frozen = model(), eml_ops.freeze(model())
    x = torch.randn(7, 48)
    assert "eml.linear_packed" not in ops_of(frozen, x)  # parameters require grad
    frozen(x).square().sum().backward()
    reference(x).square().sum().backward()
    for mine, theirs in zip(frozen.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, **tolerance(torch.float32, 96))
    # Frozen parameters and an input that needs no grad: packed, even with grad mode on.
    frozen.requires_grad_(False)
    assert ops_of(frozen, x).count("eml.linear_packed") == 3
    assert "eml.linear_packed" not in ops_of(frozen, x.requires_grad_())


def test_changed_weights_are_packed_again() -> None:
    reference, frozen = model(), eml_ops.freeze(model())
    x = torch.randn(4, 48)
    tol = tolerance(torch.float32, 96)
    for net in (reference, frozen):  # an optimizer step: in-place updates
        net(x).sum().backward()
        torch.optim.SGD(net.parameters(), lr=0.1).step()
    with torch.no_grad():
        torch.testing.assert_close(frozen(x), reference(x), **tol)
        new_state = {k: torch.randn_like(v) for k, v in reference.state_dict().items()}
        reference.load_state_dict(new_state)
        frozen.load_state_dict(new_state)
        torch.testing.assert_close(frozen(x), reference(x), **tol)
        frozen[0].weight = nn.Parameter(torch.randn(96, 48))  # a new Parameter
        reference[0].weight = nn.Parameter(frozen[0].weight.detach().clone())
        torch.testing.assert_close(frozen(x), reference(x), **tol)


def test_to_and_dtype_changes_pack_again() -> None:
    frozen = eml_ops.freeze(model())
    reference = model()
    frozen.double()
    assert frozen[0]._packed_weight.dtype == torch.float64
    x = torch.randn(3, 48, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(frozen(x), reference.double()(x))
    frozen.to(torch.bfloat16)  # not packable: the Layer path, bfloat16 results
    assert frozen[0]._packed_weight is None and "packed=False" in repr(frozen[0])
    with torch.no_grad():
        assert frozen(x.bfloat16()).dtype == torch.bfloat16
    frozen.float().to("meta")
    assert frozen[0]._packed_weight.device.type == "meta"
    assert frozen(torch.empty(2, 48, device="meta")).shape == (2, 10)


def test_autocast_and_other_dtypes_run_as_nn_linear() -> None:
    reference, frozen = model().eval(), eml_ops.freeze(model().eval())
    x = torch.randn(6, 48)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = frozen(x), reference(x)
        assert "eml.linear_packed" not in ops_of(frozen, x)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, atol=0.05, rtol=0.05)
    with torch.no_grad(), pytest.raises(RuntimeError, match="same dtype"):
        frozen(x.double())  # as the Layer (and nn.Linear) refuse a float64 input


def test_deepcopy_pickle_and_unfreeze() -> None:
    frozen = eml_ops.freeze(model())
    x = torch.randn(2, 48)
    with torch.no_grad():
        want = frozen(x)
        twin = copy.deepcopy(frozen)
        torch.testing.assert_close(twin(x), want)
        buffer = io.BytesIO()
        torch.save(frozen, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        torch.testing.assert_close(loaded(x), want)
    layers = eml_ops.unfreeze(frozen)
    assert [type(m) for m in layers if isinstance(m, nn.Linear)] == [eml_ops.Layer] * 3
    assert not hasattr(layers[0], "_packed_weight")
    with torch.no_grad():
        torch.testing.assert_close(layers(x), want)
        assert "eml.linear_packed" not in ops_of(layers, x)


def test_hooks_carry_over_and_a_lone_layer_is_returned() -> None:
    linear = nn.Linear(8, 4)
    calls: list[int] = []
    handle = linear.register_forward_hook(lambda *_: calls.append(1))
    frozen = eml_ops.freeze(linear)
    assert type(frozen) is eml_ops.FrozenLayer and frozen.weight is linear.weight
    with torch.no_grad():
        frozen(torch.randn(2, 8))
    assert calls == [1]
    handle.remove()
    frozen(torch.randn(2, 8))
    assert calls == [1]


def test_pruned_parametrized_and_subclassed_layers_are_left_alone() -> None:
    net = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8))
    torch.nn.utils.prune.l1_unstructured(net[0], "weight", amount=0.5)
    torch.nn.utils.parametrizations.weight_norm(net[1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        eml_ops.freeze(net)
    assert {str(w.message).split("'")[1] for w in caught} == {"0", "1"}
    assert all("parametrized or pruned" in str(w.message) for w in caught)
    assert type(net[2]) is eml_ops.FrozenLayer and type(net[0]) is nn.Linear
    with pytest.raises(ValueError, match="not an nn.Linear or a Layer"):
        eml_ops.FrozenLayer.from_linear(nn.ReLU())
    compressed = eml_ops.compress_weights(nn.Sequential(nn.Linear(8, 8)))
    eml_ops.freeze(compressed)
    assert type(compressed[0]) is eml_ops.CompressedLayer


# --------------------------------------------------------------------------------------------
# Graph modes, FLOP counting, ONNX, threads


def test_script_runs_the_packed_op_and_saves() -> None:
    frozen = eml_ops.freeze(model()).eval()
    scripted = torch.jit.script(frozen)
    assert "linear_packed" in getattr(scripted, "0").code
    x = torch.randn(5, 48)
    with torch.no_grad():
        want = frozen(x)
        torch.testing.assert_close(scripted(x), want)
        buffer = io.BytesIO()
        torch.jit.save(scripted, buffer)
        buffer.seek(0)
        torch.testing.assert_close(torch.jit.load(buffer)(x), want)
    scripted(x).sum().backward()  # training in script: the Layer path
    assert scripted[0].weight.grad is not None


def test_compile_and_export_run_the_packed_op() -> None:
    frozen = eml_ops.freeze(model()).eval().requires_grad_(False)
    x = torch.randn(5, 48)
    want = frozen(x)
    compiled = torch.compile(frozen, fullgraph=True, dynamic=True)
    torch.testing.assert_close(compiled(x), want)
    torch.testing.assert_close(compiled(torch.randn(9, 48)).shape, torch.Size([9, 10]))
    exported = torch.export.export(frozen, (x,))
    targets = [str(node.target) for node in exported.graph.nodes if node.op == "call_function"]
    assert targets.count("eml.linear_packed.default") == 3
    torch.testing.assert_close(exported.module()(x), want)


def test_flop_counter_counts_the_packed_op() -> None:
    frozen = eml_ops.freeze(model()).eval()
    x = torch.randn(3, 48)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        frozen(x)
    assert counter.get_total_flops() == 2 * 3 * (48 * 96 + 96 * 24 + 24 * 10)


def test_many_python_threads_share_a_frozen_model() -> None:
    frozen = eml_ops.freeze(model()).eval()
    x = torch.randn(16, 48)
    with torch.no_grad():
        want = frozen(x)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            with torch.no_grad():
                for _ in range(20):
                    torch.testing.assert_close(frozen(x), want)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    workers = [threading.Thread(target=work) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
