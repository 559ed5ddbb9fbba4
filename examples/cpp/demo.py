"""Deploy without Python, end to end: Python saves, C++ trains and infers, Python checks.

1. Python scripts an MLP of ``eml_ops.Layer`` (``torch.jit.script``) and saves it and its
   training data;
2. ``train_mlp`` (C++, no Python) trains it for a few epochs and saves it and its losses;
3. Python trains the same model the same way and checks losses and parameters against C++;
4. ``infer`` (C++) runs the trained model; Python checks the output against its forward;
5. Python exports the trained model (``torch.export``) and compiles it with AOTInductor
   (``aoti_compile_and_package``); ``infer`` runs the package, whose compiled code calls
   ``eml::linear`` from libeml_ops.so, and Python checks its output;
6. ``infer_without_eml_ops`` (the same program, not linked with libeml_ops.so) fails with
   libtorch's "Unknown builtin op: eml::linear".

    python examples/cpp/demo.py [--build-dir build/cpp-example] [--workdir DIR]

(``make cpp-demo``.) Builds the CMake project in examples/cpp/ first (cmake and ninja from
the venv).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

import eml_ops

SOURCE_DIR = Path(__file__).resolve().parent
DEFAULT_BUILD_DIR = SOURCE_DIR.parents[1] / "build" / "cpp-example"
SIZES = (16, 32, 32, 4)  # in, hidden, hidden, classes


@dataclass
class Training:
    """How the model is trained, the same in C++ and Python."""

    epochs: int = 5
    batch_size: int = 32
    lr: float = 0.5

    def arguments(self) -> list[str]:
        """The trainer's optional arguments: EPOCHS BATCH_SIZE LR."""
        return [str(self.epochs), str(self.batch_size), repr(self.lr)]


def tool(name: str) -> str:
    """``cmake`` or ``ninja``: the pinned one installed in this Python's environment, else PATH."""
    try:  # the PyPI packages keep the real binaries in their own folders
        module = __import__(name)
        found = Path(module.CMAKE_BIN_DIR if name == "cmake" else module.BIN_DIR) / name
        if found.exists():
            return str(found)
    except ImportError:
        pass
    on_path = shutil.which(name)
    if on_path is None:
        raise RuntimeError(f"{name} not found: pip install -r requirements-dev.txt")
    return on_path


def build(build_dir: Path = DEFAULT_BUILD_DIR) -> Path:
    """Configure and build examples/cpp into ``build_dir``; returns the folder of the programs."""
    prefix_path = ";".join([torch.utils.cmake_prefix_path, eml_ops.cmake_prefix_path])
    subprocess.run(
        [tool("cmake"), "-S", str(SOURCE_DIR), "-B", str(build_dir), "-G", "Ninja",
         f"-DCMAKE_MAKE_PROGRAM={tool('ninja')}", f"-DCMAKE_PREFIX_PATH={prefix_path}"],
        check=True, stdout=subprocess.DEVNULL,
    )
    jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 1))
    subprocess.run([tool("cmake"), "--build", str(build_dir), "-j", jobs], check=True)
    return build_dir


def make_model(seed: int = 0) -> nn.Sequential:
    """The MLP: eml_ops.Layer's with biases, ReLUs in between."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(SIZES[:-1], SIZES[1:], strict=True)):
        if index:
            layers.append(nn.ReLU())
        layers.append(eml_ops.Layer(fan_in, fan_out, bias=True))
    return nn.Sequential(*layers)


def make_data(samples: int = 256, seed: int = 1) -> dict[str, torch.Tensor]:
    """A classification task: the classes of a random linear teacher."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, SIZES[0], generator=generator)
    teacher = torch.randn(SIZES[-1], SIZES[0], generator=generator)
    return {"inputs": inputs, "targets": (inputs @ teacher.T).argmax(dim=1)}


def train_in_python(
    model: nn.Module, data: dict[str, torch.Tensor], training: Training
) -> list[float]:
    """What train_mlp.cpp does, in Python: SGD on the batches in order; the step losses."""
    optimizer = torch.optim.SGD(model.parameters(), lr=training.lr)
    losses = []
    for _ in range(training.epochs):
        for start in range(0, len(data["inputs"]), training.batch_size):
            end = start + training.batch_size
            optimizer.zero_grad()
            logits = model(data["inputs"][start:end])
            loss = nn.functional.cross_entropy(logits, data["targets"][start:end])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def write_inputs(workdir: Path, seed: int = 0) -> None:
    """model.pt (scripted, untrained) and data.pt for the trainer."""
    torch.jit.script(make_model(seed)).save(str(workdir / "model.pt"))
    torch.save(make_data(), workdir / "data.pt")


def run_program(program: Path, *arguments: Path | str, env: dict[str, str] | None = None,
                check: bool = True) -> subprocess.CompletedProcess:
    """Run one of the C++ programs, output captured."""
    return subprocess.run([str(program), *map(str, arguments)], capture_output=True, text=True,
                          env=env, check=check)


def train_in_cpp(programs: Path, workdir: Path, training: Training,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """train_mlp on workdir's model.pt and data.pt -> trained.pt and losses.pt."""
    return run_program(programs / "train_mlp", workdir / "model.pt", workdir / "data.pt",
                       workdir / "trained.pt", workdir / "losses.pt", *training.arguments(),
                       env=env)


def compare_training(workdir: Path, training: Training, seed: int = 0) -> float:
    """Largest difference between C++'s and Python's losses and trained parameters.

    Python trains the eager model from the same initial weights on the same batches.
    """
    reference = make_model(seed)
    reference.load_state_dict(torch.jit.load(str(workdir / "model.pt")).state_dict())
    python_losses = torch.tensor(train_in_python(reference, torch.load(workdir / "data.pt"),
                                                 training), dtype=torch.float64)
    cpp_losses = torch.load(workdir / "losses.pt")
    torch.testing.assert_close(cpp_losses, python_losses, rtol=1e-5, atol=1e-6)
    trained = torch.jit.load(str(workdir / "trained.pt")).state_dict()
    differences = [(cpp_losses - python_losses).abs().max().item()]
    for name, parameter in reference.state_dict().items():
        torch.testing.assert_close(trained[name], parameter, rtol=1e-5, atol=1e-6)
        differences.append((trained[name] - parameter).abs().max().item())
    return max(differences)


def compare_inference(programs: Path, workdir: Path) -> float:
    """infer on trained.pt vs the Python forward of the same scripted model."""
    inputs = make_data(samples=64, seed=2)["inputs"]
    torch.save(inputs, workdir / "input.pt")
    run_program(programs / "infer", workdir / "trained.pt", workdir / "input.pt",
                workdir / "output.pt")
    with torch.no_grad():
        expected = torch.jit.load(str(workdir / "trained.pt"))(inputs)
    output = torch.load(workdir / "output.pt")
    torch.testing.assert_close(output, expected)
    return (output - expected).abs().max().item()


def compare_aoti(programs: Path, workdir: Path, seed: int = 0) -> float:
    """infer on an AOTInductor package of the trained model vs its Python forward."""
    model = make_model(seed)
    model.load_state_dict(torch.jit.load(str(workdir / "trained.pt")).state_dict())
    inputs = make_data(samples=64, seed=2)["inputs"]
    torch.save(inputs, workdir / "input.pt")
    exported = torch.export.export(model, (inputs,))
    package = torch._inductor.aoti_compile_and_package(
        exported, package_path=str(workdir / "trained.pt2")
    )
    run_program(programs / "infer", package, workdir / "input.pt", workdir / "output_aoti.pt")
    with torch.no_grad():
        expected = model(inputs)
    output = torch.load(workdir / "output_aoti.pt")
    torch.testing.assert_close(output, expected)
    return (output - expected).abs().max().item()


def main(argv: list[str] | None = None) -> int:
    """Build, train in C++ and Python, infer, and report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR)
    parser.add_argument("--workdir", type=Path, help="where the .pt files go (default: a temp dir)")
    args = parser.parse_args(argv)
    programs = build(args.build_dir)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="eml_ops_cpp_demo_"))
    workdir.mkdir(parents=True, exist_ok=True)
    training = Training()
    write_inputs(workdir)
    print(train_in_cpp(programs, workdir, training).stdout, end="")
    print(f"C++ training == Python training: max |diff| of losses and parameters "
          f"{compare_training(workdir, training):.3g}")
    print(f"C++ inference == Python forward: max |diff| {compare_inference(programs, workdir):.3g}")
    print(f"C++ inference of the AOTInductor package == Python forward: max |diff| "
          f"{compare_aoti(programs, workdir):.3g}")
    failure = run_program(programs / "infer_without_eml_ops", workdir / "trained.pt",
                          workdir / "input.pt", workdir / "unused.pt", check=False)
    lines = [line for line in failure.stderr.splitlines() if line.strip()]
    reason = next((line for line in lines if "Unknown builtin op" in line), lines[0])
    print(f"without libeml_ops.so (exit code {failure.returncode}): {reason}")
    print(f"files in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
