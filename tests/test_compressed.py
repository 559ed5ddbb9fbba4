"""Compressed weights: eml::compressed_linear (int8 with per-channel scales, bfloat16 and
float16 weights, float32 activations), eml_ops.CompressedLayer and compress_weights."""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.nn.functional as F
import torch.nn.utils.prune
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import eml_ops
from eml_ops.compressed import quantize_int8
from tests.helpers import tolerance
from tests.test_properties import build, linear_problems, running_on

op = torch.ops.eml.compressed_linear
WEIGHT_DTYPES = [torch.int8, torch.bfloat16, torch.float16]


def compress(weight: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
    if dtype == torch.int8:
        return quantize_int8(weight)
    return weight.to(dtype).contiguous(), None


def reference(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None,
              bias: torch.Tensor | None) -> torch.Tensor:
    """float64 on the stored weights, scales after the sum (the op's definition)."""
    out = x.double() @ weight.double().T
    if scales is not None:
        out = out * scales.double()
    return out if bias is None else out + bias.double()


# --------------------------------------------------------------------------------------------
# The operator against float64, over shapes, layouts, batch sizes (1 included), ISAs, threads


@given(linear_problems(dtypes=(torch.float32,), small_batch=40), st.sampled_from(WEIGHT_DTYPES))
def test_op_matches_float64_on_the_stored_weights(problem: dict, weight_dtype: torch.dtype
                                                  ) -> None:
    x, w, b = build(problem)
    weight, scales = compress(w, weight_dtype)
    with running_on(problem):
        actual = op(x, weight, scales, b)
    expected = reference(x, weight, scales, b)
    assert actual.dtype == torch.float32 and actual.shape == expected.shape
    # Sums of |x * q| reach 128 * k for int8 before the scale: the bound is relative to it.
    magnitude = reference(x.abs(), weight.abs(), scales, None if b is None else b.abs())
    bound = 4 * torch.finfo(torch.float32).eps * (problem["in_features"] + 2) * (magnitude + 1)
    assert bool(((actual.double() - expected).abs() <= bound).all())


@pytest.mark.parametrize("weight_dtype", WEIGHT_DTYPES)
@pytest.mark.parametrize("rows", [1, 3, 8, 32, 33, 100])
def test_op_both_paths_large_k(weight_dtype: torch.dtype, rows: int) -> None:
    torch.manual_seed(rows)
    x, w, b = torch.randn(rows, 1100), torch.randn(130, 1100), torch.randn(130)
    weight, scales = compress(w, weight_dtype)
    expected = reference(x, weight, scales, b)
    torch.testing.assert_close(op(x, weight, scales, b).double(), expected,
                               **tolerance(torch.float32, 1100))
    with eml_ops.use_backend("aten"):  # the ATen kernel: the same definition
        torch.testing.assert_close(op(x, weight, scales, b).double(), expected,
                                   **tolerance(torch.float32, 1100))


def test_16_bit_weights_give_the_float32_product_of_the_rounded_weights() -> None:
    torch.manual_seed(0)
    x, w = torch.randn(5, 64), torch.randn(40, 64)
    for dtype in (torch.bfloat16, torch.float16):
        rounded = w.to(dtype)
        torch.testing.assert_close(op(x, rounded, None, None), F.linear(x, rounded.float()),
                                   **tolerance(torch.float32, 64))


def test_opcheck() -> None:
    torch.manual_seed(0)
    for dtype in WEIGHT_DTYPES:
        weight, scales = compress(torch.randn(6, 5), dtype)
        for args in [(torch.randn(3, 5, requires_grad=True), weight, scales,
                      torch.randn(6, requires_grad=True)),
                     (torch.randn(2, 4, 5), weight, scales, None),
                     (torch.randn(5), weight, scales, torch.randn(6))]:
            torch.library.opcheck(op.default, args)


def test_meta_tensors_give_the_shape() -> None:
    x = torch.empty(2, 7, 5, device="meta")
    weight = torch.empty(3, 5, dtype=torch.int8, device="meta")
    out = op(x, weight, torch.empty(3, device="meta"), None)
    assert out.device.type == "meta" and out.shape == (2, 7, 3) and out.dtype == torch.float32


# --------------------------------------------------------------------------------------------
# Bad input: clear errors naming the op and the shapes


def good_args() -> list:
    return [torch.randn(4, 5), torch.zeros(3, 5, dtype=torch.int8), torch.ones(3),
            torch.zeros(3)]


@pytest.mark.parametrize(("position", "bad", "message"), [
    (2, torch.ones(3, dtype=torch.float64), r"scales must be float32, got Double"),
    (2, torch.ones(4), r"scales must be 1-D \[out_features\] = \[3\].*\[4\]"),
    (2, None, r"int8 weight needs scales"),
    (1, torch.zeros(5, 3, dtype=torch.int8).T, r"weight must be contiguous.*strides \[1, 3\]"),
    (1, torch.zeros(3, 6, dtype=torch.int8), r"in_features mismatch: input of shape \[4, 5\]"),
    (1, torch.zeros(3, 5, dtype=torch.int32), r"weight must be int8, bfloat16 or float16"),
    (0, torch.randn(4, 5, dtype=torch.float64), r"input must be float32"),
    (3, torch.zeros(2), r"bias must be 1-D \[out_features\] = \[3\]"),
    (3, torch.zeros(3, dtype=torch.float16), r"bias must be float32"),
])
def test_bad_input_raises(position: int, bad: torch.Tensor | None, message: str) -> None:
    args = good_args()
    args[position] = bad
    with pytest.raises(RuntimeError, match=r"eml::compressed_linear: " + message):
        op(*args)


def test_scales_with_16_bit_weight_raise() -> None:
    with pytest.raises(RuntimeError, match=r"scales are for int8 weight only"):
        op(torch.randn(2, 5), torch.zeros(3, 5, dtype=torch.bfloat16), torch.ones(3), None)


def test_weight_requiring_grad_raises() -> None:
    weight = torch.zeros(3, 5, dtype=torch.bfloat16, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"compressed weights are frozen"):
        op(torch.randn(2, 5), weight, None, None)


# --------------------------------------------------------------------------------------------
# Quantisation


def test_quantisation_rounds_to_nearest_per_output_channel() -> None:
    torch.manual_seed(0)
    w = torch.randn(7, 33)
    q, scales = quantize_int8(w)
    assert q.dtype == torch.int8 and scales.dtype == torch.float32 and scales.shape == (7,)
    torch.testing.assert_close(scales, w.abs().amax(1) / 127.5, rtol=0, atol=0)
    exact = w.double() / scales.double().unsqueeze(1)
    # Nearest (up to float32's rounding of 1 / scale), never further; +-amax are clamped.
    assert bool(((q.double() - exact).abs() <= 0.5 + 1e-4).all())
    assert q.min() >= -128 and q.max() <= 127


def test_quantisation_of_extreme_values_and_zero_rows() -> None:
    w = torch.tensor([[0.0, 0.0, 0.0], [1.0, -1.0, 0.5], [3e38, -3e38, 1e-30],
                      [1e-40, 0.0, -1e-40]])
    q, scales = quantize_int8(w)
    assert scales[0] == torch.finfo(torch.float32).eps and bool((q[0] == 0).all())
    assert q[1, 0] == 127 and q[1, 1] in (-128, -127) and q[1, 2] == 64  # +-127.5, 63.75
    assert q[2].tolist()[:2] == [127, -128] and torch.isfinite(scales).all()
    assert bool((scales > 0).all())
    x = torch.randn(2, 3)
    assert torch.isfinite(op(x, q, scales, None)[:, :2]).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_weight_raises_naming_the_layer(bad: float) -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Sequential(nn.Linear(4, 2)))
    with torch.no_grad():
        model[2][0].weight[1, 2] = bad
    with pytest.raises(ValueError, match=r"layer '2\.0' has NaN or infinite values"):
        eml_ops.compress_weights(model, torch.int8)


def test_float16_overflow_raises_and_bfloat16_keeps_it() -> None:
    linear = nn.Linear(2, 2)
    with torch.no_grad():
        linear.weight[0, 0] = 1e6
    with pytest.raises(ValueError, match=r"beyond torch.float16's range"):
        eml_ops.CompressedLayer.from_linear(linear, torch.float16)
    layer = eml_ops.CompressedLayer.from_linear(linear, torch.bfloat16)
    assert layer.weight[0, 0].item() == pytest.approx(1e6, rel=1e-2)


# --------------------------------------------------------------------------------------------
# Accuracy against torchao's Int8WeightOnlyConfig on the same weights


def test_int8_error_no_worse_than_torchao() -> None:
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    torch.manual_seed(0)
    linear = nn.Linear(512, 256)
    x = torch.randn(16, 512)
    exact = F.linear(x.double(), linear.weight.double(), linear.bias.double())
    ours = eml_ops.CompressedLayer.from_linear(linear, torch.int8)
    theirs = copy.deepcopy(linear)
    quantize_(theirs, Int8WeightOnlyConfig())
    with torch.no_grad():
        our_error = (ours(x).double() - exact).square().mean()
        their_error = (theirs(x).double() - exact).square().mean()
    # The same quantisation, bit for bit; the products differ only in float32 rounding.
    assert torch.equal(ours.weight, theirs.weight.qdata)
    assert torch.equal(ours.scales, theirs.weight.scale.flatten())
    assert our_error <= their_error * (1 + 1e-4)


# --------------------------------------------------------------------------------------------
# CompressedLayer and compress_weights


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), eml_ops.Layer(32, 24, bias=True),
                         nn.Sequential(nn.Linear(24, 8, bias=False)))


@pytest.mark.parametrize("dtype", WEIGHT_DTYPES)
def test_compress_weights_converts_and_stays_close(dtype: torch.dtype) -> None:
    model = small_model()
    original = copy.deepcopy(model)
    assert eml_ops.compress_weights(model, dtype) is model
    layers = [m for m in model.modules() if isinstance(m, eml_ops.CompressedLayer)]
    assert len(layers) == 3 and all(m.weight.dtype == dtype for m in layers)
    assert all((m.scales is not None) == (dtype == torch.int8) for m in layers)
    assert model[3][0].bias is None and model[0].bias.dtype == torch.float32
    assert not any(p.dtype != torch.float32 for p in model.parameters())
    assert {n for n, _ in model.named_buffers()} >= {"0.weight", "2.weight", "3.0.weight"}
    x = torch.randn(5, 16)
    torch.testing.assert_close(model(x), original(x), rtol=0.05, atol=0.02)
    single = eml_ops.compress_weights(nn.Linear(3, 2), dtype)
    assert type(single) is eml_ops.CompressedLayer  # a linear module itself: a new layer


def test_from_linear_takes_the_effective_weight_of_a_pruned_layer() -> None:
    linear = nn.Linear(6, 4)
    torch.nn.utils.prune.l1_unstructured(linear, "weight", amount=0.5)
    layer = eml_ops.CompressedLayer.from_linear(linear, torch.bfloat16)
    torch.testing.assert_close(layer.weight.float(), linear.weight.detach().bfloat16().float())
    with pytest.raises(TypeError, match=r"is a ReLU, not an nn.Linear"):
        eml_ops.CompressedLayer.from_linear(nn.ReLU())
    with pytest.raises(ValueError, match=r"dtype must be one of"):
        eml_ops.compress_weights(nn.Linear(2, 2), torch.float32)


def test_state_dict_save_load_and_deepcopy() -> None:
    layer = eml_ops.CompressedLayer.from_linear(nn.Linear(9, 5), torch.int8)
    state = layer.state_dict()
    assert set(state) == {"weight", "scales", "bias"} and state["weight"].dtype == torch.int8
    fresh = eml_ops.CompressedLayer(9, 5, dtype=torch.int8)
    fresh.load_state_dict(state)
    x = torch.randn(3, 9)
    torch.testing.assert_close(fresh(x), layer(x), rtol=0, atol=0)
    buffer = io.BytesIO()
    torch.save(layer.state_dict(), buffer)
    buffer.seek(0)
    loaded = eml_ops.CompressedLayer(9, 5, dtype=torch.int8)
    loaded.load_state_dict(torch.load(buffer, weights_only=True))
    torch.testing.assert_close(loaded(x), layer(x), rtol=0, atol=0)
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    torch.testing.assert_close(torch.load(buffer, weights_only=False)(x), layer(x))
    twin = copy.deepcopy(layer)
    assert twin.weight.data_ptr() != layer.weight.data_ptr()
    torch.testing.assert_close(twin(x), layer(x), rtol=0, atol=0)


def test_gradients_flow_to_input_and_bias_only() -> None:
    torch.manual_seed(0)
    layer = eml_ops.CompressedLayer.from_linear(nn.Linear(7, 4), torch.int8)
    assert [n for n, _ in layer.named_parameters()] == ["bias"]
    x = torch.randn(3, 2, 7, requires_grad=True)
    grad = torch.randn(3, 2, 4)
    gx, gb = torch.autograd.grad(layer(x), (x, layer.bias), grad)
    w = layer.dequantized_weight().double()
    xd = x.detach().double().requires_grad_(True)
    bd = layer.bias.detach().double().requires_grad_(True)
    ex, eb = torch.autograd.grad(F.linear(xd, w, bd), (xd, bd), grad.double())
    torch.testing.assert_close(gx.double(), ex, **tolerance(torch.float32, 7))
    torch.testing.assert_close(gb.double(), eb, **tolerance(torch.float32, 6))
    # Double backward: the gradient is made of differentiable ops.
    x2 = torch.randn(2, 7, requires_grad=True)
    (g,) = torch.autograd.grad(layer(x2).square().sum(), x2, create_graph=True)
    g.sum().backward()
    assert x2.grad is not None and torch.isfinite(x2.grad).all()


@pytest.mark.parametrize("dtype", WEIGHT_DTYPES)
def test_jit_script_and_saved_script(dtype: torch.dtype) -> None:
    layer = eml_ops.CompressedLayer.from_linear(nn.Linear(6, 3), dtype)
    scripted = torch.jit.script(layer)
    x = torch.randn(4, 6)
    torch.testing.assert_close(scripted(x), layer(x), rtol=0, atol=0)
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    torch.testing.assert_close(torch.jit.load(buffer)(x), layer(x), rtol=0, atol=0)


def test_torch_compile_fullgraph_and_export() -> None:
    model = eml_ops.compress_weights(small_model(), torch.int8)
    x = torch.randn(5, 16)
    expected = model(x)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), expected)
    exported = torch.export.export(model, (x,))
    targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert "eml.compressed_linear.default" in targets
    torch.testing.assert_close(exported.module()(x), expected)
    xg = x.clone().requires_grad_(True)
    compiled(xg).sum().backward()
    xe = x.clone().requires_grad_(True)
    model(xe).sum().backward()
    torch.testing.assert_close(xg.grad, xe.grad)


def test_flop_counter_counts_the_op() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    layer = eml_ops.CompressedLayer.from_linear(nn.Linear(16, 8), torch.int8)
    with FlopCounterMode(display=False) as counter:
        layer(torch.randn(4, 16))
    assert counter.get_total_flops() == 2 * 4 * 16 * 8


# --------------------------------------------------------------------------------------------
# PEFT: LoRA adapters train on a converted-and-compressed BERT


def test_peft_lora_trains_on_a_compressed_bert(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_ecosystem import tiny_bert_classifier, train_steps, with_lora

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    original = tiny_bert_classifier()
    compressed = eml_ops.compress_weights(eml_ops.replace_linear(copy.deepcopy(original)),
                                          torch.int8)
    assert sum(type(m) is eml_ops.CompressedLayer for m in compressed.modules()) == 14
    lora_original, lora_compressed = with_lora(original), with_lora(compressed)
    query = lora_compressed.base_model.model.bert.encoder.layer[0].attention.self.query
    assert type(query.base_layer) is eml_ops.CompressedLayer
    base_weight = query.base_layer.weight.clone()

    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 100, (8, 12), generator=generator)
    labels = torch.randint(0, 3, (8,), generator=generator)
    losses_original = train_steps(lora_original, ids, labels, steps=4)
    losses_compressed = train_steps(lora_compressed, ids, labels, steps=4)
    assert losses_compressed[-1] < losses_compressed[0]  # it learned
    assert losses_compressed == pytest.approx(losses_original, rel=0.05)  # int8's error only
    assert torch.equal(query.base_layer.weight, base_weight)  # the base stayed frozen
    trained = [n for n, p in lora_compressed.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n or "classifier" in n for n in trained)


# --------------------------------------------------------------------------------------------
# The benchmark's compressed mode (tiny sizes: what it runs and prints, not how fast)


def test_bench_compressed_results_and_markdown() -> None:
    from eml_ops.bench import compressed as bench

    results = bench.bench(features=64, layers=2, batches=(1, 3), threads=(1,), repeats=1,
                          min_time=0.0)
    names = {r["candidate"] for r in results}
    assert {"nn.Linear float32", "eml float32", "eml int8", "eml bfloat16 weights",
            "eml float16 weights", "torchao int8 weight-only"} <= names
    assert all(r["seconds"] > 0 for r in results)
    assert all(r["speedup"] == 1.0 for r in results if r["candidate"] == bench.BASELINE)
    table = bench.markdown(results, 64, 2)
    assert "| 1 | 1.00x |" in table and "| 3 | 1.00x |" in table
