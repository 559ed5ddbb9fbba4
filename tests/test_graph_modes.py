"""TorchScript, torch.compile and torch.export of models built from eml_ops.Layer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch
import torch._dynamo
from torch import nn

import eml_ops
from tests.helpers import child_environment


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(eml_ops.Layer(6, 8, bias=True), nn.ReLU(), eml_ops.Layer(8, 3))


def forward_backward(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    x = x.detach().clone().requires_grad_(True)
    y = model(x)
    y.pow(2).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return [y.detach(), x.grad, *grads]


LOAD_AND_RUN = """
import sys, torch, eml_ops
model = torch.jit.load(sys.argv[1])
x = torch.load(sys.argv[2]).requires_grad_(True)
y = model(x)
y.pow(2).sum().backward()
torch.save([y.detach(), x.grad, *[p.grad for p in model.parameters()]], sys.argv[3])
"""


def test_script_save_and_load_in_a_fresh_process(tmp_path: Path, backend: str) -> None:
    model = make_model()
    scripted = torch.jit.script(model)
    assert "eml::linear" in str(scripted.inlined_graph)
    x = torch.randn(5, 6)
    expected = forward_backward(model, x)
    torch.testing.assert_close(forward_backward(scripted, x), expected)
    scripted.save(str(tmp_path / "model.pt"))
    torch.save(x, tmp_path / "x.pt")
    run = subprocess.run(
        [sys.executable, "-c", LOAD_AND_RUN, str(tmp_path / "model.pt"), str(tmp_path / "x.pt"),
         str(tmp_path / "out.pt")],
        capture_output=True, text=True, timeout=300, check=False,
        env=child_environment(EML_OPS_BACKEND=backend),
    )
    assert run.returncode == 0, run.stderr
    for actual, wanted in zip(torch.load(tmp_path / "out.pt"), expected, strict=True):
        torch.testing.assert_close(actual, wanted)


def test_compile_fullgraph_dynamic_forward_and_backward(backend: str) -> None:
    torch._dynamo.reset()
    model = make_model()
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for batch in (3, 7, 11):
        x = torch.randn(batch, 6)
        for actual, wanted in zip(forward_backward(compiled, x), forward_backward(model, x),
                                  strict=True):
            torch.testing.assert_close(actual, wanted)
    explanation = torch._dynamo.explain(model)(torch.randn(4, 6))
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


def test_compile_functional_with_graph_ops() -> None:
    @torch.compile(fullgraph=True, dynamic=True)
    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(eml_ops.linear(x * 2, w, b)).sum(-1)

    x, w, b = torch.randn(4, 3, 5), torch.randn(2, 5), torch.randn(2)
    torch.testing.assert_close(f(x, w, b), torch.relu(nn.functional.linear(x * 2, w, b)).sum(-1))


def test_export_a_model_of_layers() -> None:
    model = make_model()
    x = torch.randn(4, 6)
    batch = torch.export.Dim("batch")
    exported = torch.export.export(model, (x,), dynamic_shapes={"input": {0: batch}})
    graph_code = str(exported.graph_module.code)
    assert "eml.linear" in graph_code
    for n in (4, 9):
        x = torch.randn(n, 6)
        torch.testing.assert_close(exported.module()(x), model(x))
