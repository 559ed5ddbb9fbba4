"""ONNX export of converted models with both exporters, run by onnxruntime.

Each exported graph holds only default-domain ONNX operators (no ``eml`` node, so any ONNX
runtime runs it without eml_ops) and computes what the original nn.Linear model computes,
for the batch size it was exported with and for another one (dynamic axes).
"""

from __future__ import annotations

import copy
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from torch import nn

import eml_ops
from tests.helpers import child_environment

EXPORTERS = ["dynamo", "torchscript"]
EXPORT_BATCH, OTHER_BATCH = 3, 5
SEQUENCE = 2  # the middle dimension of 3-D inputs (dynamic too)


def input_shape(rank: int, batch: int) -> tuple[int, ...]:
    return (batch, 8) if rank == 2 else (batch, SEQUENCE + batch % 2, 8)


def dynamic_dims(rank: int) -> list[int]:
    return [0] if rank == 2 else [0, 1]


def export(model: nn.Module, example: torch.Tensor, exporter: str, path: Path) -> None:
    """``torch.onnx.export`` with dynamic leading axes, as a user calls it."""
    dims = dynamic_dims(example.dim())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter's
        if exporter == "dynamo":
            batch = {dim: torch.export.Dim(f"d{dim}", min=1, max=64) for dim in dims}
            torch.onnx.export(model, (example,), str(path), dynamo=True,
                              input_names=["x"], dynamic_shapes=(batch,))
        else:
            torch.onnx.export(model, (example,), str(path), dynamo=False,
                              input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {dim: f"d{dim}" for dim in dims}})


def assert_standard_onnx(path: Path) -> set[str]:
    """Every node is a default-domain ONNX operator; gives the operator types."""
    graph = onnx.load(str(path))
    onnx.checker.check_model(graph)
    nodes = list(graph.graph.node)
    assert all(node.domain in ("", "ai.onnx") for node in nodes), [n.domain for n in nodes]
    assert not any("eml" in node.op_type.lower() or "eml" in node.domain for node in nodes)
    assert not graph.functions  # nothing left to inline, no custom function domain
    return {node.op_type for node in nodes}


def run_onnx(path: Path, x: torch.Tensor) -> torch.Tensor:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (name,) = [i.name for i in session.get_inputs()]
    (y,) = session.run(None, {name: x.numpy()})
    return torch.from_numpy(np.asarray(y))


def mlp(bias: bool) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    original = nn.Sequential(nn.Linear(8, 16, bias=bias), nn.Tanh(), nn.Linear(16, 4, bias=bias))
    return original.eval(), eml_ops.replace_linear(copy.deepcopy(original)).eval()


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("rank", [2, 3])
@pytest.mark.parametrize("bias", [True, False])
def test_converted_model_exports_and_runs_in_onnxruntime(
        exporter: str, rank: int, bias: bool, tmp_path: Path) -> None:
    original, converted = mlp(bias)
    path = tmp_path / "model.onnx"
    export(converted, torch.randn(input_shape(rank, EXPORT_BATCH)), exporter, path)
    op_types = assert_standard_onnx(path)
    assert op_types & {"Gemm", "MatMul"}
    assert ("Add" in op_types or "Gemm" in op_types) if bias else "Add" not in op_types
    for batch in (EXPORT_BATCH, OTHER_BATCH):
        x = torch.randn(input_shape(rank, batch))
        with torch.no_grad():
            expected = original(x)
        torch.testing.assert_close(run_onnx(path, x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_frozen_model_exports_and_runs_in_onnxruntime(exporter: str, tmp_path: Path) -> None:
    # Frozen parameters: outside export the packed path would run (test_frozen.py).
    original, converted = mlp(bias=True)
    frozen = eml_ops.freeze(converted).requires_grad_(False)
    path = tmp_path / "model.onnx"
    export(frozen, torch.randn(input_shape(2, EXPORT_BATCH)), exporter, path)
    assert assert_standard_onnx(path) & {"Gemm", "MatMul"}
    x = torch.randn(input_shape(2, OTHER_BATCH))
    with torch.no_grad():
        expected = original(x)
    torch.testing.assert_close(run_onnx(path, x), expected, rtol=1e-5, atol=1e-5)


class OperatorCalls(nn.Module):
    """Calls ``torch.ops.eml.<name>`` directly, as a hand-written model may."""

    def __init__(self, name: str, bias: bool) -> None:
        super().__init__()
        self.op = getattr(torch.ops.eml, name)
        self.linear = nn.Linear(8, 4, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x, self.linear.weight, self.linear.bias)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("name", ["linear", "linear_forward"])
@pytest.mark.parametrize("bias", [True, False])
def test_each_forward_operator_exports(exporter: str, name: str, bias: bool,
                                       tmp_path: Path) -> None:
    model = OperatorCalls(name, bias).eval()
    path = tmp_path / "op.onnx"
    export(model, torch.randn(input_shape(3, EXPORT_BATCH)), exporter, path)
    assert_standard_onnx(path)
    x = torch.randn(input_shape(3, OTHER_BATCH))
    with torch.no_grad():
        expected = model.linear(x)
    torch.testing.assert_close(run_onnx(path, x), expected, rtol=1e-5, atol=1e-5)


def test_export_leaves_torch_export_graphs_alone() -> None:
    """The decompositions serve ONNX only: torch.export keeps our operators whole."""
    _, converted = mlp(bias=True)
    program = torch.export.export(converted, (torch.randn(3, 8),)).run_decompositions()
    targets = {node.target for node in program.graph.nodes if node.op == "call_function"}
    assert torch.ops.eml.linear_forward.default in targets  # below eml::linear's autograd
    aten = torch.ops.aten
    assert not targets & {aten.linear.default, aten.addmm.default, aten.mm.default}


# Whichever of eml_ops and torch.onnx comes first, the TorchScript exporter's symbolics are
# registered once torch.onnx is loaded, and eml_ops alone does not load it (import time).
IMPORT_ORDER_CHECK = """
import importlib, sys
importlib.import_module(sys.argv[1])
import eml_ops
assert ("torch.onnx" in sys.modules) == (sys.argv[1] == "torch.onnx"), "eml_ops loaded torch.onnx"
import torch.onnx
from torch.onnx._internal.torchscript_exporter.registration import registry
for name in ("eml::linear", "eml::linear_forward"):
    assert registry.is_registered_op(name, 17), name
"""


@pytest.mark.parametrize("first", ["eml_ops", "torch.onnx"])
def test_torchscript_symbolics_whichever_is_imported_first(first: str) -> None:
    subprocess.run([sys.executable, "-c", IMPORT_ORDER_CHECK, first], check=True,
                   env=child_environment())


STORED_DTYPES = {torch.int8: onnx.TensorProto.INT8, torch.float16: onnx.TensorProto.FLOAT16,
                 torch.bfloat16: onnx.TensorProto.BFLOAT16}


def compressed_mlp(dtype: torch.dtype, bias: bool) -> nn.Module:
    """Layers of 128 x 128: more elements than the dynamo exporter's constant folding takes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 128, bias=bias), nn.Tanh(),
                          nn.Linear(128, 128, bias=bias), nn.Tanh(), nn.Linear(128, 128, bias=bias))
    return eml_ops.compress_weights(model, dtype).eval()


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("dtype", list(STORED_DTYPES))
@pytest.mark.parametrize("bias", [True, False])
def test_compressed_model_exports_and_runs_in_onnxruntime(
        exporter: str, dtype: torch.dtype, bias: bool, tmp_path: Path) -> None:
    """CompressedLayer: standard operators; the large weights stay compressed in the file.

    Except 16-bit weights with the TorchScript exporter, whose constant folding widens
    ``Cast(weight)`` to a float32 initializer (eml_ops/_onnx.py).
    """
    compressed = compressed_mlp(dtype, bias)
    assert all(type(compressed[i]) is eml_ops.CompressedLayer for i in (0, 2, 4))
    path = tmp_path / "compressed.onnx"
    export(compressed, torch.randn(input_shape(3, EXPORT_BATCH)), exporter, path)
    op_types = assert_standard_onnx(path)
    assert "MatMul" in op_types and ("Add" in op_types) == bias
    dequantize = "DequantizeLinear" if exporter == "torchscript" and dtype == torch.int8 else "Cast"
    large = [t.data_type for t in onnx.load(str(path)).graph.initializer
             if np.prod(t.dims) == 128 * 128]
    if exporter == "torchscript" and dtype != torch.int8:
        assert large == [onnx.TensorProto.FLOAT] * 2  # folded, see the docstring
    else:
        assert dequantize in op_types
        assert large == [STORED_DTYPES[dtype]] * 2  # the weights are not widened
    for batch in (EXPORT_BATCH, OTHER_BATCH):
        x = torch.randn(input_shape(3, batch))
        with torch.no_grad():
            expected = compressed(x)
        torch.testing.assert_close(run_onnx(path, x), expected, rtol=1e-5, atol=1e-5)
