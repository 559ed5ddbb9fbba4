"""Hypothesis: every backend against F.linear and a float64 reference, outputs and gradients,
over shapes (1-D, N-D, zero-size), layouts (transposed, sliced, expanded) and bias."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import eml_ops
from tests.helpers import BACKENDS, intra_op_threads, tolerance

# The blocked GEMM's micro-kernels: every one this CPU runs (generic, avx2, avx512).
ISAS = eml_ops._C.supported_isas()


@contextlib.contextmanager
def running_on(problem: dict) -> Iterator[None]:
    """Select the problem's backend, ISA and thread count; restore them afterwards."""
    isa = eml_ops._C.get_isa()
    eml_ops._C.set_isa(problem["isa"])
    try:
        with intra_op_threads(problem["threads"]), eml_ops.use_backend(problem["backend"]):
            yield
    finally:
        eml_ops._C.set_isa(isa)

LAYOUTS = ["contiguous", "transposed", "sliced", "expanded"]


def make(shape: list[int], layout: str, dtype: torch.dtype, generator: torch.Generator
         ) -> torch.Tensor:
    """A tensor of `shape` whose memory layout is `layout` (values in [-1, 1])."""
    def rand(*size: int) -> torch.Tensor:
        return torch.rand(*size, generator=generator, dtype=dtype) * 2 - 1

    if layout == "transposed" and len(shape) >= 2:  # last dim not innermost
        return rand(*reversed(shape)).permute(*reversed(range(len(shape))))
    if layout == "sliced":  # every other element along each dim, with an offset
        return rand(*[2 * n + 1 for n in shape])[tuple(slice(1, None, 2) for _ in shape)]
    if layout == "expanded" and len(shape) >= 2:  # leading dims of stride 0
        return rand(*([1] * (len(shape) - 1)), shape[-1]).expand(*shape)
    return rand(*shape)


@st.composite
def linear_problems(
    draw: st.DrawFn,
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64),
    backends: tuple[str, ...] | list[str] = tuple(BACKENDS),
    batch_dims: int = 3,
    small_batch: int = 9,
    large_batch: int = 70,
    features: int = 80,
) -> dict:
    """A problem for build(): sizes up to the bounds, layouts, bias, dtype, backend, ISA."""
    batch = draw(st.lists(st.integers(0, small_batch), min_size=0, max_size=batch_dims))
    if draw(st.booleans()) and batch:  # now and then a larger batch
        batch[0] = draw(st.integers(small_batch + 1, large_batch))
    return {
        "batch": batch,
        "in_features": draw(st.integers(0, features)),
        "out_features": draw(st.integers(0, features)),
        "input_layout": draw(st.sampled_from(LAYOUTS)),
        "weight_layout": draw(st.sampled_from(LAYOUTS)),
        "bias": draw(st.sampled_from([None, "contiguous", "sliced"])),
        "dtype": draw(st.sampled_from(dtypes)),
        "backend": draw(st.sampled_from(backends)),
        "isa": draw(st.sampled_from(ISAS)),
        "threads": draw(st.sampled_from([1, 2])),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


def build(problem: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    generator = torch.Generator().manual_seed(problem["seed"])
    dtype = problem["dtype"]
    x = make([*problem["batch"], problem["in_features"]], problem["input_layout"], dtype,
             generator)
    w = make([problem["out_features"], problem["in_features"]], problem["weight_layout"], dtype,
             generator)
    b = None
    if problem["bias"] is not None:
        b = make([problem["out_features"]], problem["bias"], dtype, generator)
    return x, w, b


@given(linear_problems())
def test_forward_matches_f_linear_and_float64(problem: dict) -> None:
    x, w, b = build(problem)
    with running_on(problem):
        actual = eml_ops.linear(x, w, b)
    expected = F.linear(x, w, b)
    reference = F.linear(x.double(), w.double(), None if b is None else b.double())
    tol = tolerance(problem["dtype"], problem["in_features"])
    assert actual.dtype == x.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, **tol)
    torch.testing.assert_close(actual.double(), reference, **tol)


@given(linear_problems())
def test_gradients_match_f_linear_and_float64(problem: dict) -> None:
    x, w, b = build(problem)
    params = [t.detach().requires_grad_(True) for t in (x, w, b) if t is not None]
    reference_params = [t.detach().double().requires_grad_(True) for t in params]
    generator = torch.Generator().manual_seed(problem["seed"] + 1)
    out_shape = [*problem["batch"], problem["out_features"]]
    grad = torch.randn(out_shape, generator=generator, dtype=problem["dtype"])
    with running_on(problem):
        actual = torch.autograd.grad(eml_ops.linear(*params), params, grad, allow_unused=True)
    expected = torch.autograd.grad(F.linear(*params), params, grad, allow_unused=True)
    reference = torch.autograd.grad(F.linear(*reference_params), reference_params,
                                    grad.double(), allow_unused=True)
    rows = max(1, x.numel() // max(1, problem["in_features"]))
    tol = tolerance(problem["dtype"], max(rows, problem["out_features"]))
    for a, e, r in zip(actual, expected, reference, strict=True):
        torch.testing.assert_close(a, e, **tol)
        torch.testing.assert_close(a.double(), r, **tol)


# --- gradcheck-based validation: every drawn case, in float64, reverse and forward mode ---

SMALL_LAYOUTS = ["contiguous", "transposed", "sliced"]


@st.composite
def small_float64_problems(draw: st.DrawFn) -> dict:
    """Small shapes (gradcheck perturbs every element): N-D, 1-D and zero-size."""
    return {
        "batch": draw(st.lists(st.integers(0, 3), min_size=0, max_size=3)),
        "in_features": draw(st.integers(0, 4)),
        "out_features": draw(st.integers(0, 4)),
        "input_layout": draw(st.sampled_from(SMALL_LAYOUTS)),
        "weight_layout": draw(st.sampled_from(SMALL_LAYOUTS)),
        "bias": draw(st.sampled_from([None, "contiguous", "sliced"])),
        "dtype": torch.float64,
        "backend": draw(st.sampled_from(BACKENDS)),
        "isa": draw(st.sampled_from(ISAS)),
        "threads": 1,
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


@given(small_float64_problems())
def test_gradcheck_and_gradgradcheck_with_forward_ad(problem: dict) -> None:
    x, w, b = build(problem)
    args = tuple(t.requires_grad_(True) for t in (x, w, b) if t is not None)
    with running_on(problem):
        assert torch.autograd.gradcheck(eml_ops.linear, args, check_forward_ad=True,
                                        check_batched_grad=True)
        assert torch.autograd.gradgradcheck(eml_ops.linear, args, check_fwd_over_rev=True)
