"""Shared fixtures: every backend, hypothesis profiles (helpers are in tests/helpers.py)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

import eml_ops
from tests.helpers import BACKENDS

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
eml_ops._C.set_bf16_policy("own")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Run the test once per available backend."""
    with eml_ops.use_backend(request.param):
        yield request.param

