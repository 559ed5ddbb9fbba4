"""Choosing the backend: API, context manager, environment variable, defaults."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import eml_ops
from tests.helpers import BACKENDS, PACKAGE_ROOT, child_environment, run_in_own_process


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter importing this eml_ops, with only `env` selecting."""
    return subprocess.run([sys.executable, "-c", code], cwd=PACKAGE_ROOT, capture_output=True,
                          text=True, timeout=300, check=False, env=child_environment(**env))


def test_expected_backends_are_built() -> None:
    backends = eml_ops.available_backends()
    assert backends[:3] == ["aten", "reference", "blocked"]
    if os.environ.get("CI"):  # CI installs LIBXSMM: a missing tpp backend is a failure there
        assert "tpp" in backends


def test_default_is_blocked() -> None:
    run = run_python("import eml_ops; print(eml_ops.get_backend())")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "blocked"


def test_set_and_use_backend_restore() -> None:
    before = eml_ops.get_backend()
    with eml_ops.use_backend("reference") as name:
        assert name == "reference" == eml_ops.get_backend()
        with eml_ops.use_backend("aten"):
            assert eml_ops.get_backend() == "aten"
        assert eml_ops.get_backend() == "reference"
    assert eml_ops.get_backend() == before


def test_use_backend_restores_after_exception() -> None:
    before = eml_ops.get_backend()
    with pytest.raises(KeyError), eml_ops.use_backend("reference"):
        raise KeyError("boom")
    assert eml_ops.get_backend() == before


def test_bad_names_raise_value_error() -> None:
    with pytest.raises(ValueError, match="unknown backend 'gpu'; choose one of: aten, reference"):
        eml_ops.set_backend("gpu")
    with pytest.raises(TypeError):
        eml_ops.set_backend(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["aten", "reference", "blocked", "tpp"])
def test_every_known_name_is_either_usable_or_refused_clearly(name: str) -> None:
    if name in eml_ops.available_backends():
        with eml_ops.use_backend(name):
            assert eml_ops.get_backend() == name
    else:
        with pytest.raises(ValueError, match=f"'{name}' is not available in this build; choose"):
            eml_ops.set_backend(name)


@pytest.mark.parametrize("call", ["eml_ops.set_backend('fastest')", "eml_ops.set_backend('')",
                                  "eml_ops.set_backend('BLOCKED')",
                                  "eml_ops.use_backend('mkl').__enter__()"])
def test_unknown_backend_name_raises_value_error(call: str) -> None:
    name = re.search(r"'(.*)'", call).group(1)
    pattern = (rf"^eml_ops: unknown backend '{name}'; choose one of: "
               + re.escape(", ".join(BACKENDS)) + "$")
    for backend, outcomes in run_in_own_process([call, "eml_ops.get_backend()"]).items():
        kind, message = outcomes[0]
        assert kind == "ValueError" and re.search(pattern, message), outcomes[0]
        assert outcomes[1] == ["ok", repr(backend)], "a failed switch changed the backend"


def test_unknown_backend_in_environment_raises_value_error_at_import() -> None:
    result = run_python("import eml_ops", EML_OPS_BACKEND="fastest")
    assert result.returncode == 1, result.stderr
    assert re.search(r"ValueError: EML_OPS_BACKEND='fastest': eml_ops: unknown backend 'fastest'; "
                     r"choose one of: aten, ", result.stderr), result.stderr


@pytest.mark.parametrize("name", BACKENDS)
def test_environment_selects_backend(name: str) -> None:
    # The backend chosen by EML_OPS_BACKEND at import computes, and rejects bad input by name.
    code = (
        "import torch, eml_ops\n"
        f"assert eml_ops.__file__ == {eml_ops.__file__!r}, eml_ops.__file__\n"
        "print(eml_ops.get_backend())\n"
        "x, w = torch.randn(9, 5, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)\n"
        "print(torch.allclose(eml_ops.linear(x, w), x @ w.t(), rtol=1e-12, atol=1e-12))\n"
        "try:\n"
        "    torch.ops.eml.linear_forward(torch.randn(4, 5), torch.randn(3, 6))\n"
        "except RuntimeError as error:\n"
        "    print(str(error).splitlines()[0])\n"
    )
    result = run_python(code, EML_OPS_BACKEND=name)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == [name, "True"], result.stdout
    assert lines[2].startswith("eml::linear_forward: in_features mismatch: input of shape [4, 5]")


def test_backend_changes_which_code_runs() -> None:
    # float32 sums in different orders differ in the last bits; the aten result must come
    # from at::linear exactly, the reference one from plain loops accumulating in order.
    x, w = torch.randn(64, 300), torch.randn(50, 300)
    with eml_ops.use_backend("aten"):
        assert torch.equal(eml_ops.linear(x, w), torch.nn.functional.linear(x, w))
    with eml_ops.use_backend("reference"):
        in_order = torch.zeros(64, 50)
        for p in range(300):
            in_order += x[:, p : p + 1] * w[:, p]
        assert torch.equal(eml_ops.linear(x, w), in_order)


def test_every_supported_isa_runs_and_others_are_refused() -> None:
    """Each ISA from generic up to the detected one computes F.linear; the rest raise."""
    supported = eml_ops._C.supported_isas()
    assert supported[0] == "generic"
    assert supported[-1] == eml_ops._C.detected_isa()
    x, w, b = torch.randn(50, 70), torch.randn(90, 70), torch.randn(90)
    before = eml_ops._C.get_isa()
    try:
        with eml_ops.use_backend("blocked"):
            for isa in ("generic", "avx2", "avx512"):
                if isa in supported:
                    eml_ops._C.set_isa(isa)
                    assert eml_ops._C.get_isa() == isa
                    torch.testing.assert_close(eml_ops.linear(x, w, b), F.linear(x, w, b))
                else:
                    with pytest.raises(ValueError, match=f"does not support {isa}"):
                        eml_ops._C.set_isa(isa)
            with pytest.raises(ValueError, match="unknown ISA 'bogus'"):
                eml_ops._C.set_isa("bogus")
    finally:
        eml_ops._C.set_isa(before)
