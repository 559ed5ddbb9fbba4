"""Build of eml_ops: the op library libeml_ops.so, and the Python module eml_ops._C over it.

    csrc/ops, csrc/gemm, csrc/api  ->  eml_ops/libeml_ops.so   (libtorch only: no Python)
    csrc/python, csrc/course       ->  eml_ops/_C*.so          (pybind11; links libeml_ops.so)

Each source is compiled once, into one of the two. Besides the binaries, the build writes
into the package folder what a C++ user needs: the public headers (include/eml_ops/), the
CMake package (share/cmake/eml_ops/) and _build_info.json (the torch it was built with).

Build with torch already installed and without build isolation:
    pip install --no-build-isolation -e .      (or `.`, or `pip wheel --no-build-isolation .`)
LIBXSMM (Debian: libxsmm-dev) adds the `tpp` backend when found; EML_OPS_WITH_LIBXSMM=0
turns it off. EML_OPS_SANITIZE=1 builds with AddressSanitizer and UBSan.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError as error:  # an isolated build env has no torch
    raise SystemExit(
        "eml_ops builds against the installed torch: install torch first, then run "
        "`pip install --no-build-isolation -e .`"
    ) from error

ROOT = Path(__file__).parent
CSRC = ROOT / "csrc"
TPP_SOURCES = CSRC / "gemm" / "tpp"
LIBRARY = "eml_ops.libeml_ops"  # the extension entry whose file is eml_ops/libeml_ops.so
LIBRARY_FILE = "libeml_ops.so"
# pyproject.toml holds the version; the library gets it as numbers (-D values with quotes
# would not survive ninja's shell).
VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
VERSION_MACROS = [
    f"-DEML_OPS_VERSION_{part}={number}"
    for part, number in zip(("MAJOR", "MINOR", "PATCH"), VERSION.split("."), strict=True)
]
# The ABI ties the binaries to this torch release (the local label, e.g. +cpu, aside).
TORCH_VERSION = torch.__version__.split("+")[0]


def find_libxsmm() -> dict[str, list[str]] | None:
    """Compile and link flags for LIBXSMM, or None when it is absent or disabled."""
    if os.environ.get("EML_OPS_WITH_LIBXSMM", "1") == "0":
        return None
    if shutil.which("pkg-config"):
        probe = subprocess.run(["pkg-config", "--exists", "libxsmm"], check=False)
        if probe.returncode == 0:
            cflags = subprocess.check_output(["pkg-config", "--cflags", "libxsmm"], text=True)
            return {"cflags": cflags.split(), "libs": ["-lxsmm", "-lxsmmnoblas", "-ldl"]}
    for prefix in ("/usr", "/usr/local"):
        if (Path(prefix) / "include" / "libxsmm.h").exists():
            return {"cflags": [f"-I{prefix}/include"], "libs": [f"-L{prefix}/lib", "-lxsmm",
                                                                "-lxsmmnoblas", "-ldl"]}
    return None


def sources(*folders: str, with_tpp: bool = False) -> list[str]:
    """Every .cpp under csrc/<folder>/, the tpp backend only when LIBXSMM is there."""
    found = sorted(path for folder in folders for path in (CSRC / folder).rglob("*.cpp"))
    if not with_tpp:
        found = [path for path in found if TPP_SOURCES not in path.parents]
    return [str(path.relative_to(ROOT)) for path in found]


def fill_template(template: Path, target: Path, values: dict[str, str]) -> None:
    """Copy ``template`` to ``target`` with every ``@KEY@`` replaced by its value."""
    text = template.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


class BuildExtensionKeepingObjects(BuildExtension):
    """torch's BuildExtension (ninja): the library first, then _C linked against it.

    Object files are kept in build/temp-{release,sanitize}/<extension>/ between builds
    (editable installs otherwise compile in a fresh temporary directory each time), so ninja
    rebuilds only the translation units that changed, and `pip wheel`/`pip install .` from a
    built tree only link.
    """

    def finalize_options(self) -> None:
        """Pin build_temp to build/temp-{release,sanitize}."""
        super().finalize_options()
        flavour = "sanitize" if os.environ.get("EML_OPS_SANITIZE") == "1" else "release"
        self.build_temp = str(ROOT / "build" / f"temp-{flavour}")

    def get_ext_filename(self, fullname: str) -> str:
        """``libeml_ops.so`` for the library (a plain shared library, no ABI tag).

        distutils asks with the last part of the name, setuptools with the full name.
        """
        if fullname == LIBRARY:
            return os.path.join("eml_ops", LIBRARY_FILE)
        if fullname == LIBRARY.rsplit(".", 1)[-1]:
            return LIBRARY_FILE
        return super().get_ext_filename(fullname)

    def build_extension(self, ext: object) -> None:
        """Build one extension in its own object folder; _C links the library just built."""
        package_dir = os.path.dirname(self.get_ext_fullpath(LIBRARY))
        if ext.name == LIBRARY:
            # BuildExtension defines these for Python modules: with them <torch/torch.h> would
            # pull in <torch/extension.h> (pybind11, Python.h) into the library.
            ext.extra_compile_args["cxx"] = [
                arg for arg in ext.extra_compile_args["cxx"]
                if arg != "-DTORCH_API_INCLUDE_EXTENSION_H"
                and not arg.startswith("-DTORCH_EXTENSION_NAME=")
            ]
        else:
            ext.library_dirs = [package_dir, *ext.library_dirs]
        build_temp = self.build_temp
        self.build_temp = os.path.join(build_temp, ext.name.rsplit(".", 1)[-1])
        try:
            super().build_extension(ext)
        finally:
            self.build_temp = build_temp

    def run(self) -> None:
        """Build both binaries, then put headers, CMake package and build info beside them."""
        super().run()
        self.write_package_files(Path(self.get_ext_fullpath(LIBRARY)).parent)

    @staticmethod
    def write_package_files(package_dir: Path) -> None:
        """Public headers, the CMake package and _build_info.json, into ``package_dir``."""
        include = package_dir / "include"
        shutil.rmtree(include, ignore_errors=True)
        shutil.copytree(CSRC / "include", include)
        values = {"EML_OPS_VERSION": VERSION, "TORCH_VERSION": TORCH_VERSION}
        cmake_dir = package_dir / "share" / "cmake" / "eml_ops"
        for name in ("eml_opsConfig.cmake", "eml_opsConfigVersion.cmake"):
            fill_template(CSRC / "cmake" / f"{name}.in", cmake_dir / name, values)
        shutil.copy2(CSRC / "cmake" / "eml_opsFindTorch.cmake", cmake_dir)
        info = {"version": VERSION, "torch_version": TORCH_VERSION}
        (package_dir / "_build_info.json").write_text(json.dumps(info, indent=2) + "\n")


libxsmm = find_libxsmm()
compile_args = ["-O3", "-Wall", "-Wno-unused-parameter"]
link_args: list[str] = []
if sys.platform != "darwin":
    # at::parallel_for is an inline `#pragma omp parallel` in ATen's headers: without
    # -fopenmp it silently runs on one thread in our translation units.
    compile_args.append("-fopenmp")
    link_args.append("-fopenmp")
    # Whatever a static archive brings stays inside our binaries: static LIBXSMM, and the
    # libstdc++.a of a compiler that links it statically. Exported, that copy of libstdc++
    # had some calls bound to the process's libstdc++.so and others to itself, and
    # streaming a number into an ostringstream segfaulted (g++ of /opt/gcc, torch 2.11).
    link_args.append("-Wl,--exclude-libs,ALL")
if os.environ.get("EML_OPS_SANITIZE") == "1":
    sanitizers = [
        "-fsanitize=address,undefined",
        "-fno-omit-frame-pointer",
        "-fno-sanitize-recover=undefined",
    ]
    compile_args = [arg for arg in compile_args if arg != "-O3"] + ["-O1", "-g", *sanitizers]
    link_args += sanitizers

library_compile_args = [*compile_args, *VERSION_MACROS]
library_link_args = [*link_args, f"-Wl,-soname,{LIBRARY_FILE}"]
if libxsmm is not None:
    library_compile_args += [*libxsmm["cflags"], "-DEML_OPS_WITH_LIBXSMM=1"]
    library_link_args += libxsmm["libs"]

op_library = CppExtension(
    name=LIBRARY,
    sources=sources("ops", "gemm", "api", with_tpp=libxsmm is not None),
    include_dirs=[str(CSRC), str(CSRC / "include")],
    extra_compile_args={"cxx": library_compile_args},
    extra_link_args=library_link_args,
)
# libtorch only: CppExtension adds torch_python, which would tie the library to Python.
op_library.libraries = [name for name in op_library.libraries if name != "torch_python"]

python_module = CppExtension(
    name="eml_ops._C",
    sources=sources("python", "course"),
    include_dirs=[str(CSRC), str(CSRC / "include")],
    libraries=["eml_ops"],  # found in the package folder (BuildExtensionKeepingObjects)
    extra_compile_args={"cxx": compile_args},
    # The library sits beside _C in the package, wherever that is installed.
    extra_link_args=[*link_args, "-Wl,-rpath,$ORIGIN"],
)

setup(
    install_requires=[f"torch=={TORCH_VERSION}"],
    ext_modules=[op_library, python_module],
    cmdclass={"build_ext": BuildExtensionKeepingObjects.with_options(use_ninja=True)},
)
