"""Shared fixtures: every backend, hypothesis profiles, float64 references."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

import eml_ops

# CI runs at least 500 examples per property; locally fewer keep `make test` quick.
settings.register_profile(
    "ci", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

# In-process tests check our own bfloat16 kernels also on CPUs where bfloat16 goes to ATen
# by default (bfloat16 dot products); tests/test_half.py checks that default itself.
eml_ops._C.set_bf16_on_own_gemm(True)

BACKENDS = eml_ops.available_backends()
# Backends that run our own GEMMs (all but aten).
OWN_BACKENDS = [name for name in BACKENDS if name != "aten"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Run the test once per available backend."""
    with eml_ops.use_backend(request.param):
        yield request.param


def tolerance(dtype: torch.dtype, reduction: int) -> dict[str, float]:
    """assert_close tolerances for a sum over `reduction` products in `dtype`."""
    eps = torch.finfo(dtype).eps
    scale = max(1, reduction) ** 0.5
    return {"rtol": 64 * eps * scale, "atol": 64 * eps * scale}
