"""libeml_ops.so on its own: no Python in it, loadable without eml_ops, readable failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import eml_ops
from tests.helpers import child_environment

LIBRARY = eml_ops.library_path()


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python (one thread), output captured."""
    environment = child_environment(OMP_NUM_THREADS="1", **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=environment, timeout=300)


def dynamic_dependencies(path: str) -> str:
    """ldd's list, torch's libraries found as a program linking libtorch would find them."""
    torch_lib = str(Path(torch.__file__).parent / "lib")
    env = dict(os.environ, LD_LIBRARY_PATH=torch_lib)
    return subprocess.run(["ldd", path], capture_output=True, text=True, check=True,
                          env=env).stdout


def test_library_path_is_the_library_beside_the_package() -> None:
    path = Path(LIBRARY)
    assert path.is_absolute() and path.is_file()
    assert path.name == "libeml_ops.so"
    assert path.parent == Path(eml_ops.__file__).resolve().parent


def test_library_links_libtorch_but_not_python() -> None:
    dependencies = dynamic_dependencies(LIBRARY)
    assert "libtorch_cpu.so" in dependencies and "libc10.so" in dependencies
    assert "libpython" not in dependencies
    assert "libtorch_python" not in dependencies
    assert "not found" not in dependencies


def test_python_module_uses_the_library_instead_of_its_own_copy() -> None:
    dependencies = dynamic_dependencies(eml_ops._C.__file__)
    assert f"libeml_ops.so => {os.path.realpath(LIBRARY)}" in dependencies
    defined = subprocess.run(["nm", "-DC", "--defined-only", eml_ops._C.__file__],
                             capture_output=True, text=True, check=True).stdout
    # The operators and the GEMM are compiled into the library only.
    assert "eml::ops::linear(" not in defined
    assert "eml::gemm::" not in defined


@pytest.mark.parametrize("binary", ["library", "python module"])
def test_no_copy_of_libstdcxx_is_exported(binary: str) -> None:
    """A compiler that links libstdc++.a puts a copy in our binaries; exported, some of its
    calls bound to the process's libstdc++.so instead, and `info` segfaulted."""
    path = LIBRARY if binary == "library" else eml_ops._C.__file__
    defined = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                             text=True, check=True).stdout
    assert "_ZNSt6locale7classicEv" not in defined  # std::locale::classic()
    assert "_ZNSo9_M_insertIlEERSoT_" not in defined  # std::ostream::_M_insert<long>


def test_load_library_alone_gives_differentiable_ops() -> None:
    result = run_python(f"""
        import sys
        import torch
        import torch.nn.functional as F
        torch.ops.load_library({LIBRARY!r})
        assert "eml_ops" not in sys.modules, "eml_ops was imported"
        torch.manual_seed(0)
        x = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
        w = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
        b = torch.randn(3, dtype=torch.float64, requires_grad=True)
        y = torch.ops.eml.linear(x, w, b)
        torch.testing.assert_close(y, F.linear(x, w, b))
        grads = torch.autograd.grad(y.square().sum(), (x, w, b))
        expected = torch.autograd.grad(F.linear(x, w, b).square().sum(), (x, w, b))
        torch.testing.assert_close(grads, expected)
        assert torch.autograd.gradcheck(torch.ops.eml.linear, (x, w, b))
        assert torch.autograd.gradgradcheck(torch.ops.eml.linear, (x, w, b))
        print("modules:", sorted(name for name in sys.modules if name.startswith("eml")))
    """)
    assert result.returncode == 0, result.stderr
    assert "modules: []" in result.stdout


@pytest.mark.parametrize(("variable", "value", "getter"), [
    ("EML_OPS_BACKEND", "reference", "get_backend"),
    ("EML_OPS_ISA", "generic", "get_isa"),
])
def test_load_library_alone_reads_the_environment(variable: str, value: str, getter: str) -> None:
    # The library reads the variable at its first op call, before eml_ops exists in the
    # process; the variable is then removed, so eml_ops' import cannot be what applies it.
    result = run_python(f"""
        import os
        import torch
        torch.ops.load_library({LIBRARY!r})
        torch.ops.eml.linear(torch.randn(64, 64), torch.randn(64, 64))
        del os.environ[{variable!r}]
        import eml_ops
        print("selected:", eml_ops._C.{getter}())
    """, **{variable: value})
    assert result.returncode == 0, result.stderr
    assert f"selected: {value}" in result.stdout


def test_load_library_after_import_is_the_same_library() -> None:
    # The file _C already loaded: dlopen hands back the same library, nothing registers twice.
    torch.ops.load_library(LIBRARY)
    x, w = torch.randn(2, 3), torch.randn(4, 3)
    torch.testing.assert_close(torch.ops.eml.linear(x, w), torch.nn.functional.linear(x, w))


def test_load_library_alone_runs_a_scripted_model(tmp_path: Path) -> None:
    model = torch.nn.Sequential(eml_ops.Layer(4, 8), torch.nn.ReLU(), eml_ops.Layer(8, 2))
    torch.jit.script(model).save(str(tmp_path / "model.pt"))
    x = torch.randn(3, 4)
    torch.save(x, tmp_path / "x.pt")
    with torch.no_grad():
        torch.save(model(x), tmp_path / "expected.pt")
    result = run_python(f"""
        import sys
        import torch
        torch.ops.load_library({LIBRARY!r})
        model = torch.jit.load({str(tmp_path / "model.pt")!r})
        x = torch.load({str(tmp_path / "x.pt")!r})
        with torch.no_grad():
            torch.testing.assert_close(model(x), torch.load({str(tmp_path / "expected.pt")!r}))
        assert "eml_ops" not in sys.modules
    """)
    assert result.returncode == 0, result.stderr


def test_scripted_model_without_the_library_names_the_unknown_op(tmp_path: Path) -> None:
    torch.jit.script(eml_ops.Layer(4, 2)).save(str(tmp_path / "model.pt"))
    result = run_python(f"""
        import torch
        torch.jit.load({str(tmp_path / "model.pt")!r})
    """)
    assert result.returncode == 1  # an exception, not a crash
    assert "Unknown builtin op: eml::linear" in result.stderr


@pytest.mark.parametrize("kind", ["missing", "not_a_library"])
def test_load_library_of_a_wrong_path_raises_oserror(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "libeml_ops.so"
    if kind == "not_a_library":
        path.write_text("not an ELF file")
    with pytest.raises(OSError, match="libeml_ops.so"):
        torch.ops.load_library(str(path))


def test_other_torch_version_is_a_readable_import_error() -> None:
    built_with = json.loads((Path(LIBRARY).parent / "_build_info.json").read_text())
    result = run_python("""
        import torch
        torch.__version__ = "2.99.1+cpu"  # as if another torch were installed
        import eml_ops
    """)
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ImportError: eml_ops was built against torch")
    assert built_with["torch_version"] in last_line and "2.99.1" in last_line


def test_built_with_this_torch() -> None:
    built_with = json.loads((Path(LIBRARY).parent / "_build_info.json").read_text())
    assert built_with == {"version": eml_ops.__version__,
                          "torch_version": torch.__version__.split("+")[0]}


def test_cmake_prefix_command_points_at_the_cmake_package() -> None:
    result = subprocess.run([sys.executable, "-m", "eml_ops", "cmake-prefix"], capture_output=True,
                            text=True, check=True)
    prefix = Path(result.stdout.strip())
    assert prefix == Path(eml_ops.cmake_prefix_path)
    config = prefix / "eml_ops" / "eml_opsConfig.cmake"
    assert f'set(eml_ops_VERSION "{eml_ops.__version__}")' in config.read_text()
    assert (prefix / "eml_ops" / "eml_opsConfigVersion.cmake").is_file()
    header = Path(eml_ops.__file__).parent / "include" / "eml_ops" / "eml_ops.h"
    assert "at::Tensor linear(" in header.read_text()
    path = subprocess.run([sys.executable, "-m", "eml_ops", "library-path"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert path == LIBRARY


def test_cmake_package_rejects_another_torch(tmp_path: Path) -> None:
    import cmake

    (tmp_path / "CMakeLists.txt").write_text(textwrap.dedent("""
        cmake_minimum_required(VERSION 3.18)
        project(other_torch LANGUAGES NONE)
        # As if find_package(Torch) had found another release.
        add_library(torch INTERFACE IMPORTED)
        set(Torch_VERSION 2.99.1)
        find_package(eml_ops REQUIRED)
    """))
    result = subprocess.run(
        [Path(cmake.CMAKE_BIN_DIR) / "cmake", "-S", tmp_path, "-B", tmp_path / "build",
         f"-DCMAKE_PREFIX_PATH={eml_ops.cmake_prefix_path}"],
        capture_output=True, text=True)
    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert f"was built against torch {torch.__version__.split('+')[0]}" in message
    assert "found 2.99.1" in message
