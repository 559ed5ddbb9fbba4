"""examples/cpp: a TorchScript model trained and run by C++ programs, checked against Python.

The CMake project is built once into build/cpp-example (incremental: a rebuild after a change
of libeml_ops.so only relinks), under a lock shared by the pytest workers.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from filelock import FileLock

import eml_ops
from tests.helpers import child_environment

REPO = Path(__file__).resolve().parents[1]


def load_demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cpp_demo", REPO / "examples" / "cpp" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


demo = load_demo()


@pytest.fixture(scope="module")
def programs() -> Path:
    """The built programs (train_mlp, infer, infer_without_eml_ops)."""
    build_dir = REPO / "build" / "cpp-example"
    build_dir.parent.mkdir(exist_ok=True)
    with FileLock(str(build_dir) + ".lock"):
        return demo.build(build_dir)


def one_thread() -> dict[str, str]:
    return child_environment(OMP_NUM_THREADS="1")


def test_cpp_training_matches_python(programs: Path, tmp_path: Path) -> None:
    training = demo.Training()
    demo.write_inputs(tmp_path)
    result = demo.train_in_cpp(programs, tmp_path, training, env=one_thread())
    assert f"eml_ops {eml_ops.__version__}" in result.stdout
    assert "backend blocked" in result.stdout  # the default
    losses = demo.compare_training(tmp_path, training)  # asserts losses and parameters agree
    assert losses < 1e-5


def test_cpp_training_learns(programs: Path, tmp_path: Path) -> None:
    training = demo.Training()
    demo.write_inputs(tmp_path, seed=5)
    demo.train_in_cpp(programs, tmp_path, training, env=one_thread())
    losses = torch.load(tmp_path / "losses.pt")
    steps_per_epoch = 256 // training.batch_size
    assert len(losses) == training.epochs * steps_per_epoch
    assert losses[-steps_per_epoch:].mean() < 0.7 * losses[:steps_per_epoch].mean()


def test_environment_selects_backend_and_isa_in_cpp(programs: Path, tmp_path: Path) -> None:
    training = demo.Training(epochs=1)
    demo.write_inputs(tmp_path)
    env = dict(one_thread(), EML_OPS_BACKEND="reference", EML_OPS_ISA="generic")
    result = demo.train_in_cpp(programs, tmp_path, training, env=env)
    assert "backend reference, isa generic" in result.stdout
    demo.compare_training(tmp_path, training)


def test_cpp_inference_matches_python_forward(programs: Path, tmp_path: Path) -> None:
    training = demo.Training(epochs=1)
    demo.write_inputs(tmp_path)
    demo.train_in_cpp(programs, tmp_path, training, env=one_thread())
    assert demo.compare_inference(programs, tmp_path) < 1e-5


def assert_cpp_infers_like_python(programs: Path, tmp_path: Path, model: torch.nn.Module,
                                  scripted: torch.jit.ScriptModule) -> None:
    """infer (C++, no grad) on the saved ``scripted`` model gives ``model``'s output."""
    scripted.save(str(tmp_path / "scripted.pt"))
    inputs = demo.make_data(samples=64, seed=2)["inputs"]
    torch.save(inputs, tmp_path / "input.pt")
    demo.run_program(programs / "infer", tmp_path / "scripted.pt", tmp_path / "input.pt",
                     tmp_path / "output.pt", env=one_thread())
    with torch.no_grad():
        expected = model(inputs)
    torch.testing.assert_close(torch.load(tmp_path / "output.pt"), expected)


@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16])
def test_cpp_inference_of_a_scripted_compressed_model(programs: Path, tmp_path: Path,
                                                      dtype: torch.dtype) -> None:
    """A scripted model of CompressedLayers (eml::compressed_linear) runs in C++ alone."""
    model = eml_ops.compress_weights(demo.make_model(), dtype).eval()
    assert all(isinstance(m, eml_ops.CompressedLayer) for m in model if not isinstance(
        m, torch.nn.ReLU))
    assert_cpp_infers_like_python(programs, tmp_path, model, torch.jit.script(model))


def test_aoti_package_calls_our_op_from_cpp(programs: Path, tmp_path: Path) -> None:
    demo.write_inputs(tmp_path)
    demo.train_in_cpp(programs, tmp_path, demo.Training(epochs=1), env=one_thread())
    assert demo.compare_aoti(programs, tmp_path) < 1e-5
    # The package really goes through eml::linear: without the library it cannot run.
    result = demo.run_program(programs / "infer_without_eml_ops", tmp_path / "trained.pt2",
                              tmp_path / "input.pt", tmp_path / "out.pt", check=False)
    assert result.returncode == 1
    assert "eml::linear" in result.stderr


def test_program_without_the_library_reports_the_unknown_op(programs: Path,
                                                            tmp_path: Path) -> None:
    demo.write_inputs(tmp_path)
    torch.save(torch.ones(2, 16), tmp_path / "x.pt")
    result = demo.run_program(programs / "infer_without_eml_ops", tmp_path / "model.pt",
                              tmp_path / "x.pt", tmp_path / "out.pt", check=False)
    assert result.returncode == 1  # caught and reported, not a crash
    assert "Unknown builtin op: eml::linear" in result.stderr


def test_cpp_programs_report_bad_files(programs: Path, tmp_path: Path) -> None:
    torch.save(torch.ones(2, 16), tmp_path / "x.pt")
    result = demo.run_program(programs / "infer", tmp_path / "missing.pt", tmp_path / "x.pt",
                              tmp_path / "y.pt", check=False)
    assert result.returncode == 1
    assert result.stderr.startswith("infer: ") and "missing.pt" in result.stderr
    result = demo.run_program(programs / "train_mlp", "too", "few", check=False)
    assert result.returncode == 1 and "usage:" in result.stderr


def test_cpp_inference_of_a_scripted_frozen_model(programs: Path, tmp_path: Path) -> None:
    """A scripted model of FrozenLayers runs eml::linear_packed in C++ alone (infer: no grad)."""
    model = eml_ops.freeze(demo.make_model()).eval()
    scripted = torch.jit.script(model)
    assert "linear_packed" in getattr(scripted, "0").code
    assert_cpp_infers_like_python(programs, tmp_path, model, scripted)
