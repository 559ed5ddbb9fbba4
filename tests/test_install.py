"""A real install: the wheel of this tree, installed into a fresh venv with the same torch.

The wheel is built from this tree's build/ folder (`pip wheel --no-build-isolation`): the
object files of the editable build are reused, so building it only links. The fresh venv
gets torch and the benchmark's extras (`eml_ops[bench]`, at the versions requirements-dev.txt
pins) through pip's usual sources, then runs the package outside the source tree: the
editable install of the other tests would hide a module or a file left out of the wheel.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import cmake  # the pinned cmake of requirements-dev.txt
import pytest
import torch
from filelock import FileLock

import eml_ops

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "eml_ops"
TORCH_VERSION = torch.__version__.split("+")[0]


def run(*command: str | Path, cwd: Path | None = None) -> str:
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True,
                            cwd=cwd, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    with FileLock(str(REPO / "build" / "wheel.lock")):
        run(sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
            "--wheel-dir", out, REPO, cwd=REPO)
    (found,) = out.glob("eml_ops-*.whl")
    return found


def test_wheel_holds_library_headers_and_cmake_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next(archive.read(name).decode() for name in names
                        if name.endswith(".dist-info/METADATA"))
    for required in ("eml_ops/libeml_ops.so", "eml_ops/include/eml_ops/eml_ops.h",
                     "eml_ops/share/cmake/eml_ops/eml_opsConfig.cmake",
                     "eml_ops/share/cmake/eml_ops/eml_opsConfigVersion.cmake",
                     "eml_ops/_build_info.json", "eml_ops/__init__.py"):
        assert required in names
    assert any(name.startswith("eml_ops/_C.") and name.endswith(".so") for name in names)
    assert f"Requires-Dist: torch=={TORCH_VERSION}\n" in metadata
    assert "License-Expression: MIT\n" in metadata


def test_wheel_holds_every_module_of_the_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    packages = [PACKAGE, *(init.parent for init in PACKAGE.rglob("*/__init__.py"))]
    modules = {module.relative_to(REPO).as_posix() for package in packages
               for module in package.glob("*.py")}
    assert "eml_ops/bench/cli.py" in modules  # a subpackage, which a flat package list misses
    assert not modules - names, f"left out of the wheel: {sorted(modules - names)}"


def test_wheel_holds_the_license(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (license_name,) = [name for name in archive.namelist()
                           if name.endswith(".dist-info/licenses/LICENSE")]
        license_text = archive.read(license_name).decode()
    assert license_text == (REPO / "LICENSE").read_text()
    assert license_text.startswith("MIT License") and "the eml_ops authors" in license_text


def test_wheel_installs_into_a_fresh_venv_and_works(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    # torch==<built with> comes along; the extras at the versions the project pins.
    run(python, "-m", "pip", "install", "--quiet", "--constraint", REPO / "requirements-dev.txt",
        f"{wheel}[bench]")
    outside = tmp_path / "elsewhere"  # not the source tree: the installed package only
    outside.mkdir()
    report = run(python, "-c", textwrap.dedent("""
        import os, subprocess, sys
        import torch, torch.nn.functional as F
        import eml_ops
        x, w, b = torch.randn(4, 6), torch.randn(3, 6), torch.randn(3)
        torch.testing.assert_close(eml_ops.Layer(6, 3)(x).shape, torch.Size([4, 3]))
        torch.testing.assert_close(torch.ops.eml.linear(x, w, b), F.linear(x, w, b))
        assert os.path.isfile(eml_ops.library_path())
        # torch.ops.load_library alone, in a process that never imports eml_ops
        code = ("import torch, sys; torch.ops.load_library(sys.argv[1]); "
                "print(torch.ops.eml.linear(torch.ones(2, 3), torch.ones(4, 3)).sum().item())")
        alone = subprocess.run([sys.executable, "-c", code, eml_ops.library_path()],
                               capture_output=True, text=True, check=True).stdout
        assert alone.strip() == "24.0", alone
        print(eml_ops.__file__)
        print(eml_ops.library_path())
        print(eml_ops.cmake_prefix_path)
    """), cwd=outside)
    package_file, library, cmake_prefix = report.strip().splitlines()
    assert package_file.startswith(str(venv)) and library.startswith(str(venv))
    assert cmake_prefix.startswith(str(venv))
    assert run(python, "-m", "eml_ops", "cmake-prefix", cwd=outside).strip() == cmake_prefix
    check_cmake_package(python, Path(cmake_prefix), Path(library), tmp_path / "cmake")
    check_commands(python, outside)


def check_commands(python: Path, outside: Path) -> None:
    """``python -m eml_ops demo`` and a short ``bench`` of the installed package."""
    demo = run(python, "-m", "eml_ops", "demo", cwd=outside)
    assert "Hello World!" in demo
    assert re.search(r"all \d+ implementations agree: True", demo), demo
    # One small shape, one thread, one backend: what is checked is that it runs, not a time.
    run(python, "-m", "eml_ops", "bench", "--quick", "--shapes", "32x64x16", "--threads", "1",
        "--backends", "blocked", "--no-overhead", "--out", "bench", cwd=outside)
    table = (outside / "bench" / "bench.md").read_text()
    for mode in ("forward", "train"):
        assert f"## {mode}, 1 thread" in table
    assert "blocked speed-up" in table
    assert (outside / "bench" / "bench.png").read_bytes()[:4] == b"\x89PNG"


def check_cmake_package(python: Path, prefix: Path, library: Path, work: Path) -> None:
    """find_package(eml_ops) of the installed package, which finds Torch (configure only)."""
    source = work / "source"
    source.mkdir(parents=True)
    (source / "CMakeLists.txt").write_text(textwrap.dedent("""
        cmake_minimum_required(VERSION 3.18)
        project(find_eml_ops LANGUAGES CXX)
        find_package(eml_ops 0.1 REQUIRED)
        message(STATUS "Torch ${Torch_VERSION}: ${TORCH_LIBRARIES}")
        get_target_property(location eml_ops::eml_ops IMPORTED_LOCATION)
        get_target_property(includes eml_ops::eml_ops INTERFACE_INCLUDE_DIRECTORIES)
        message(STATUS "eml_ops ${eml_ops_VERSION} for torch ${eml_ops_TORCH_VERSION}")
        message(STATUS "eml_ops library: ${location}")
        message(STATUS "eml_ops include: ${includes}")
    """))
    torch_prefix = run(python, "-c", "import torch; print(torch.utils.cmake_prefix_path)").strip()
    output = run(Path(cmake.CMAKE_BIN_DIR) / "cmake", "-S", source, "-B", work / "build",
                 f"-DCMAKE_PREFIX_PATH={torch_prefix};{prefix}")
    assert f"eml_ops {eml_ops.__version__} for torch {TORCH_VERSION}" in output
    assert f"eml_ops library: {library}" in output
    assert f"Torch {TORCH_VERSION}: torch;" in output
    assert (prefix.parents[1] / "include" / "eml_ops" / "eml_ops.h").is_file()
