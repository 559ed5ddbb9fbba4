"""The examples run and show what they claim: eml_ops trains like nn.Linear, also under DDP."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import eml_ops

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
    env = dict(os.environ, OMP_NUM_THREADS="1")
    package_root = str(Path(eml_ops.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    return env


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
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny steps: one thread is fastest, and immune to a busy machine
    try:
        float32 = train_mlp.main([*common, "--out", str(tmp_path / "f32.png")])
        bf16 = train_mlp.main([*common, "--autocast", "bf16", "--out", str(tmp_path / "bf16.png")])
    finally:
        torch.set_num_threads(threads)
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
