"""The examples run and show what they claim: eml_ops trains like nn.Linear, also under DDP."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import eml_ops
from tests.helpers import child_environment, intra_op_threads

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def subprocess_env() -> dict[str, str]:
    """Environment for example subprocesses: one thread each, and this test's eml_ops first."""
    return child_environment(OMP_NUM_THREADS="1")


@pytest.mark.parametrize("backend", eml_ops.available_backends())
def test_train_mlp_runs_agree(backend: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    train_mlp = load_example("train_mlp")
    plot = tmp_path / "plots" / "losses.png"
    result = train_mlp.main(
        ["--epochs", "2", "--hidden", "32", "--backend", backend, "--out", str(plot), "--seed", "3"]
    )
    assert result["backend"] == backend
    assert len(result["losses_linear"]) == len(result["losses_eml"]) == 2
    for a, b in zip(result["losses_linear"], result["losses_eml"], strict=True):
        assert a == pytest.approx(b, rel=1e-3)
    # It really learned something (10 classes: chance is a loss of ln 10 and 10% accuracy).
    assert result["losses_eml"][1] < result["losses_eml"][0] < 2.3
    assert result["accuracy_linear"] > 0.5 and result["accuracy_eml"] > 0.5
    assert result["accuracy_eml"] == pytest.approx(result["accuracy_linear"], abs=0.02)
    assert plot.read_bytes().startswith(PNG_SIGNATURE)
    printed = capsys.readouterr().out
    assert "test accuracy" in printed and f"eml/{backend}" in printed


def test_train_mlp_under_bf16_autocast_reaches_float32_accuracy(tmp_path: Path) -> None:
    """Mixed precision (autocast bf16: eml_ops on its bfloat16 GEMM) trains the digits MLP to
    the float32 run's test accuracy, within one point."""
    train_mlp = load_example("train_mlp")
    common = ["--epochs", "8", "--hidden", "64", "--seed", "1", "--backend", "blocked"]
    with intra_op_threads(1):  # tiny steps: one thread is fastest, and immune to a busy machine
        float32 = train_mlp.main([*common, "--out", str(tmp_path / "f32.png")])
        bf16 = train_mlp.main([*common, "--autocast", "bf16", "--out", str(tmp_path / "bf16.png")])
    assert float32["autocast"] is None and bf16["autocast"] == "bf16"
    assert float32["accuracy_eml"] > 0.9
    assert bf16["accuracy_eml"] == pytest.approx(float32["accuracy_eml"], abs=0.01)
    assert bf16["accuracy_eml"] == pytest.approx(bf16["accuracy_linear"], abs=0.01)
    assert bf16["losses_eml"][-1] < 0.5 * bf16["losses_eml"][0]


def test_train_mlp_rejects_unknown_backend() -> None:
    train_mlp = load_example("train_mlp")
    with pytest.raises(SystemExit):
        train_mlp.main(["--backend", "no-such-backend"])


def run_ddp(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(EXAMPLES / "ddp.py"), *args,
    ]
    return subprocess.run(
        command, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=180
    )


def test_ddp_gradients_equal_single_process_step(tmp_path: Path) -> None:
    result_path = tmp_path / "ddp.json"
    completed = run_ddp(tmp_path, "--verify", "--result", str(result_path), "--batch-size", "48")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    result = json.loads(result_path.read_text())
    assert result["world_size"] == 2 and result["batch_size"] == 48
    assert result["match"] is True, result["failures"]
    assert result["ranks_agree"] is True
    assert result["max_abs_grad_diff"] < 1e-5
    assert "match" in completed.stdout


def test_ddp_training_reduces_the_loss(tmp_path: Path) -> None:
    result_path = tmp_path / "train.json"
    completed = run_ddp(tmp_path, "--steps", "20", "--result", str(result_path))
    assert completed.returncode == 0, completed.stdout + completed.stderr
    losses = json.loads(result_path.read_text())["losses"]
    assert len(losses) == 20
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("backend", eml_ops.available_backends())
def test_per_sample_grads_match_the_loop(backend: str, capsys: pytest.CaptureFixture) -> None:
    per_sample_grads = load_example("per_sample_grads")
    enabled = torch._C._functorch._is_vmap_fallback_enabled()
    torch._C._functorch._set_vmap_fallback_enabled(False)  # a missing vmap rule would raise
    try:
        result = per_sample_grads.main(["--batch-size", "9", "--backend", backend, "--seed", "2"])
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(enabled)
    assert result["backend"] == backend and result["match"] is True
    assert result["shapes"] == {"0.weight": [9, 64, 20], "0.bias": [9, 64],
                                "2.weight": [9, 5, 64], "2.bias": [9, 5]}
    assert max(result["max_abs_diff"].values()) < 1e-5
    assert "match" in capsys.readouterr().out


def test_per_sample_grads_equal_nn_linear_and_sum_to_the_batch_gradient() -> None:
    per_sample_grads = load_example("per_sample_grads")
    torch.manual_seed(0)
    model = per_sample_grads.make_model(6, 8, 3)
    reference = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    reference.load_state_dict(model.state_dict())
    params = {name: p.detach() for name, p in model.named_parameters()}
    x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
    grads = per_sample_grads.per_sample_grads_vmap(model, params, x, y)
    expected = per_sample_grads.per_sample_grads_vmap(reference, params, x, y)
    mean_loss = torch.nn.functional.cross_entropy(model(x), y)
    batch_grads = torch.autograd.grad(mean_loss, list(model.parameters()))
    for (name, _), batch_grad in zip(model.named_parameters(), batch_grads, strict=True):
        torch.testing.assert_close(grads[name], expected[name], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(grads[name].mean(0), batch_grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("mode", "placements"),
    [("tp", [["S(0)"], ["S(1)"], ["S(0)"]]), ("fsdp", [["S(0)"]] * 3)],
)
def test_tensor_parallel_and_fsdp2_steps_equal_single_process(
    mode: str, placements: list[list[str]], tmp_path: Path
) -> None:
    result_path = tmp_path / f"{mode}.json"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(EXAMPLES / "tensor_parallel.py"), "--mode", mode, "--verify", "--steps", "3",
        "--result", str(result_path),
    ]
    completed = subprocess.run(
        command, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=180
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    result = json.loads(result_path.read_text())
    assert result["mode"] == mode and result["world_size"] == 2
    assert all(name.endswith("Layer") for name in result["layers"])  # FSDP2 renames the class
    assert result["weight_placements"] == placements  # really sharded over the two ranks
    assert result["match"] is True, result["failures"]
    assert len(result["losses"]) == len(result["reference_losses"]) == 3
    assert result["losses"] == pytest.approx(result["reference_losses"], rel=1e-5)
    assert result["max_abs_grad_diff"] < 1e-5
    assert "match" in completed.stdout
