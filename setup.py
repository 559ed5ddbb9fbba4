"""Build of eml_ops: one C++ extension, eml_ops._C, from everything under csrc/.

Build with torch already installed and without build isolation:
    pip install --no-build-isolation -e .
LIBXSMM (Debian: libxsmm-dev) adds the `tpp` backend when found; EML_OPS_WITH_LIBXSMM=0
turns it off. EML_OPS_SANITIZE=1 builds with AddressSanitizer and UBSan.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup

try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError as error:  # an isolated build env has no torch
    raise SystemExit(
        "eml_ops builds against the installed torch: install torch first, then run "
        "`pip install --no-build-isolation -e .`"
    ) from error

ROOT = Path(__file__).parent
CSRC = ROOT / "csrc"
TPP_SOURCES = CSRC / "gemm" / "tpp"


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


def sources(with_tpp: bool) -> list[str]:
    """Every .cpp under csrc/, the tpp backend only when LIBXSMM is there."""
    found = sorted(CSRC.rglob("*.cpp"))
    if not with_tpp:
        found = [path for path in found if TPP_SOURCES not in path.parents]
    return [str(path.relative_to(ROOT)) for path in found]


class BuildExtensionKeepingObjects(BuildExtension):
    """torch's BuildExtension (ninja), with object files kept in build/ between builds.

    Editable installs otherwise compile in a fresh temporary directory each time; with a fixed
    directory ninja rebuilds only the translation units that changed.
    """

    def finalize_options(self) -> None:
        """Pin build_temp to build/temp-{release,sanitize}."""
        super().finalize_options()
        flavour = "sanitize" if os.environ.get("EML_OPS_SANITIZE") == "1" else "release"
        self.build_temp = str(ROOT / "build" / f"temp-{flavour}")


libxsmm = find_libxsmm()
compile_args = ["-O3", "-Wall", "-Wno-unused-parameter"]
link_args: list[str] = []
if sys.platform != "darwin":
    # at::parallel_for is an inline `#pragma omp parallel` in ATen's headers: without
    # -fopenmp it silently runs on one thread in our translation units.
    compile_args.append("-fopenmp")
    link_args.append("-fopenmp")
macros: list[tuple[str, str | None]] = []
if libxsmm is not None:
    compile_args += libxsmm["cflags"]
    # Static LIBXSMM inside our .so: keep its symbols from leaking to other libraries.
    link_args += ["-Wl,--exclude-libs,ALL", *libxsmm["libs"]]
    macros.append(("EML_OPS_WITH_LIBXSMM", "1"))
if os.environ.get("EML_OPS_SANITIZE") == "1":
    sanitizers = [
        "-fsanitize=address,undefined",
        "-fno-omit-frame-pointer",
        "-fno-sanitize-recover=undefined",
    ]
    compile_args = [arg for arg in compile_args if arg != "-O3"] + ["-O1", "-g", *sanitizers]
    link_args += sanitizers

setup(
    ext_modules=[
        CppExtension(
            name="eml_ops._C",
            sources=sources(with_tpp=libxsmm is not None),
            include_dirs=[str(CSRC)],
            define_macros=macros,
            extra_compile_args={"cxx": compile_args},
            extra_link_args=link_args,
        )
    ],
    cmdclass={"build_ext": BuildExtensionKeepingObjects.with_options(use_ninja=True)},
)
