"""bfloat16 and float16 on our own GEMM: every result is the float32 product of the upcast
inputs rounded once, to within one ulp of the 16-bit type (plus float32's own accumulation
error), and no further from a float64 reference than F.linear's in the same dtype. Outputs
and gradients, over hypothesis-drawn shapes (zero-size too), layouts (transposed, sliced,
expanded), bias, our backends (aten is F.linear itself), ISAs and thread counts; NaN, Inf,
overflow and autocast."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import eml_ops
from tests.helpers import OWN_BACKENDS, child_environment
from tests.test_properties import ISAS, build, linear_problems, running_on

HALF_DTYPES = [torch.bfloat16, torch.float16]
FLOAT32_EPS = torch.finfo(torch.float32).eps


def ulp(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One unit in the last place of `dtype` at each of `values` (float64)."""
    info = torch.finfo(dtype)
    mantissa_bits = {torch.bfloat16: 7, torch.float16: 10}[dtype]
    smallest_normal_exponent = int(torch.tensor(info.tiny).log2().item())
    exponent = torch.frexp(values.abs())[1].double() - 1  # floor(log2 |v|) for v != 0
    exponent = exponent.clamp(min=smallest_normal_exponent)
    return torch.pow(2.0, exponent - mantissa_bits)


def rounding_bound(reference: torch.Tensor, magnitude: torch.Tensor, reduction: int,
                   dtype: torch.dtype) -> torch.Tensor:
    """How far a float32 sum of `reduction` terms, rounded once to `dtype`, may be from the
    exact `reference`: float32's accumulation error plus one ulp of `dtype`."""
    return (reduction + 4) * FLOAT32_EPS * magnitude + ulp(reference, dtype) + 1e-300


def assert_rounded_once(actual: torch.Tensor, expected_from_f_linear: torch.Tensor,
                        reference: torch.Tensor, magnitude: torch.Tensor, reduction: int
                        ) -> None:
    """`actual` (16-bit) is within the bound of the float64 `reference`, and its error is no
    worse than F.linear's, except where it is within half an ulp (the best rounding there is).
    """
    dtype = actual.dtype
    assert actual.shape == reference.shape
    ours = (actual.double() - reference).abs()
    theirs = (expected_from_f_linear.double() - reference).abs()
    bound = rounding_bound(reference, magnitude, reduction, dtype)
    assert bool((ours <= bound).all()), f"max error {(ours - bound).max()} over the bound"
    best_possible = ulp(reference, dtype) / 2 + (reduction + 4) * FLOAT32_EPS * magnitude
    assert bool((ours <= torch.maximum(theirs, best_possible)).all())


def half_problems() -> st.SearchStrategy[dict]:
    """linear_problems in the 16-bit dtypes on our own backends, with smaller sizes."""
    return linear_problems(dtypes=HALF_DTYPES, backends=OWN_BACKENDS, batch_dims=2,
                           small_batch=6, large_batch=40, features=48)


def float64_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact product of the upcast inputs, and the sum of its terms' magnitudes."""
    exact = F.linear(x.double(), w.double(), None if b is None else b.double())
    magnitude = F.linear(x.double().abs(), w.double().abs(),
                         None if b is None else b.double().abs())
    return exact, magnitude


@given(half_problems())
def test_forward_is_the_float32_product_rounded_once(problem: dict) -> None:
    x, w, b = build(problem)
    with running_on(problem):
        actual = eml_ops.linear(x, w, b)
    assert actual.dtype == problem["dtype"]
    reference, magnitude = float64_linear(x, w, b)
    assert_rounded_once(actual, F.linear(x, w, b), reference, magnitude,
                        problem["in_features"])


@given(half_problems())
def test_gradients_are_float32_sums_rounded_once(problem: dict) -> None:
    x, w, b = build(problem)
    dtype = problem["dtype"]
    params = [t.detach().requires_grad_(True) for t in (x, w, b) if t is not None]
    generator = torch.Generator().manual_seed(problem["seed"] + 1)
    grad = (torch.rand([*problem["batch"], problem["out_features"]], generator=generator) * 2
            - 1).to(dtype)
    with running_on(problem):
        actual = torch.autograd.grad(eml_ops.linear(*params), params, grad)
    expected = torch.autograd.grad(F.linear(*params), params, grad)
    rows = 1
    for size in problem["batch"]:
        rows *= size
    g = grad.double().reshape(rows, problem["out_features"])
    x2 = x.double().reshape(rows, problem["in_features"])
    references = [
        ((g @ w.double()).reshape(x.shape), (g.abs() @ w.double().abs()).reshape(x.shape),
         problem["out_features"]),
        (g.T @ x2, g.abs().T @ x2.abs(), rows),
    ]
    if b is not None:
        references.append((g.sum(0), g.abs().sum(0), rows))
    for ours, theirs, (reference, magnitude, reduction) in zip(actual, expected, references,
                                                              strict=True):
        assert ours.dtype == dtype
        assert_rounded_once(ours, theirs, reference, magnitude, reduction)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("backend", OWN_BACKENDS)
@pytest.mark.parametrize("isa", ISAS)
def test_single_products_round_to_nearest_even_bit_for_bit(dtype: torch.dtype, backend: str,
                                                           isa: str) -> None:
    """With in_features = 1, x*w is exact in float32: the result must be exactly the float32
    x*w + b rounded once, ties to even (values drawn near the 16-bit midpoints)."""
    generator = torch.Generator().manual_seed(5)
    x = (torch.randn(37, 1, generator=generator) * 3).to(dtype)
    w = (torch.randn(70, 1, generator=generator) * 3).to(dtype)
    b = torch.randn(70, generator=generator).to(dtype)
    problem = {"backend": backend, "isa": isa, "threads": 1}
    for bias in (None, b):
        with running_on(problem):
            actual = eml_ops.linear(x, w, bias)
        float32 = x.float() * w.float().T
        expected = (float32 if bias is None else float32 + bias.float()).to(dtype)
        assert torch.equal(actual.view(torch.int16), expected.view(torch.int16))


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("isa", ISAS)
def test_nan_inf_and_overflow_as_float32_rounded(dtype: torch.dtype, isa: str) -> None:
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(9, 40, generator=generator).to(dtype)
    w = torch.randn(30, 40, generator=generator).to(dtype)
    b = torch.randn(30, generator=generator).to(dtype)
    x[2, 5] = float("nan")
    w[7, 3] = float("inf")
    w[8, 3] = -float("inf")
    if dtype == torch.float16:  # a row whose sums overflow float16 (not float32): Inf
        x[4] = torch.finfo(dtype).max
    with running_on({"backend": "blocked", "isa": isa, "threads": 1}):
        actual = eml_ops.linear(x, w, b)
    expected = F.linear(x.float(), w.float(), b.float()).to(dtype)
    assert torch.equal(actual.isnan(), expected.isnan())
    finite_or_inf = ~expected.isnan()
    assert torch.equal(actual[finite_or_inf].isinf(), expected[finite_or_inf].isinf())
    assert torch.equal(actual[expected.isinf()], expected[expected.isinf()])


def random_half(*shape: int, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    return (torch.rand(*shape, generator=generator) * 2 - 1).to(dtype)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_outputs_beyond_the_float_buffer_are_computed_in_chunks(dtype: torch.dtype) -> None:
    """Results beyond the GEMM's 8 MiB float buffer are computed in chunks of rows: the
    forward (700 x 3100 outputs), and dL/dW (800 x 3000) with the bias gradient's row sums."""
    generator = torch.Generator().manual_seed(4)
    x = random_half(700, 3, dtype=dtype, generator=generator)
    w = random_half(3100, 3, dtype=dtype, generator=generator)
    b = random_half(3100, dtype=dtype, generator=generator)
    with eml_ops.use_backend("blocked"):
        output = eml_ops.linear(x, w, b)
    reference, magnitude = float64_linear(x, w, b)
    assert_rounded_once(output, F.linear(x, w, b), reference, magnitude, 3)

    x = random_half(5, 3000, dtype=dtype, generator=generator)
    w = random_half(800, 3000, dtype=dtype, generator=generator)
    grad = random_half(5, 800, dtype=dtype, generator=generator)
    with eml_ops.use_backend("blocked"):
        _, grad_w, grad_b = torch.ops.eml.linear_backward(grad, x, w, [False, True, True])
    g, x64 = grad.double(), x.double()
    assert_rounded_once(grad_w, grad_w, g.T @ x64, g.abs().T @ x64.abs(), 5)
    assert_rounded_once(grad_b, grad_b, g.sum(0), g.abs().sum(0), 5)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_autocast_casts_like_f_linear_then_runs_the_half_path(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(16, 32, generator=generator)
    w = torch.randn(8, 32, generator=generator) / 32**0.5
    b = torch.randn(8, generator=generator)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    with eml_ops.use_backend("blocked"):
        with torch.autocast("cpu", dtype=dtype):
            output = eml_ops.linear(*leaves)
            expected_dtype = F.linear(x, w, b).dtype
        direct = eml_ops.linear(*(t.to(dtype) for t in (x, w, b)))
    assert output.dtype == expected_dtype == dtype
    # The cast inputs went through exactly the op that 16-bit inputs take.
    assert torch.equal(output, direct)
    output.float().sum().backward()
    for leaf in leaves:
        assert leaf.grad is not None and leaf.grad.dtype == torch.float32
    g = torch.ones(16, 8, dtype=torch.float64)
    torch.testing.assert_close(leaves[2].grad.double(), g.sum(0))
    reference = g @ w.to(dtype).double()
    bound = rounding_bound(reference, g @ w.to(dtype).double().abs(), 8, dtype)
    assert bool(((leaves[0].grad.double() - reference).abs() <= bound).all())


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("backend", OWN_BACKENDS)
def test_opcheck_half(dtype: torch.dtype, backend: str) -> None:
    """Schemas, fake tensors, autograd registration and AOT dispatch with 16-bit inputs."""
    generator = torch.Generator().manual_seed(6)
    x, w, b, grad = (random_half(*shape, dtype=dtype, generator=generator)
                     for shape in ((3, 5, 7), (4, 7), (4,), (3, 5, 4)))
    with eml_ops.use_backend(backend):
        torch.library.opcheck(torch.ops.eml.linear.default,
                              (x.requires_grad_(), w.requires_grad_(), b.requires_grad_()))
        torch.library.opcheck(torch.ops.eml.linear_forward.default,
                              (x.detach(), w.detach(), b.detach()))
        torch.library.opcheck(torch.ops.eml.linear_backward.default,
                              (grad, x.detach(), w.detach(), [True, True, True]))


BF16_POLICY = """
import eml_ops
print(eml_ops._C.cpu_has_native_bf16(), eml_ops._C.get_bf16_policy())
"""


@pytest.mark.parametrize("setting", [None, "own", "aten", "auto"])
def test_bf16_policy_is_auto_by_default_only_where_the_cpu_has_bf16_dot_products(
        setting: str | None) -> None:
    env = child_environment(**({} if setting is None else {"EML_OPS_BF16": setting}))
    run = subprocess.run([sys.executable, "-c", BF16_POLICY], capture_output=True, text=True,
                         env=env, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    native, policy = run.stdout.split()
    assert policy == (setting or ("auto" if native == "True" else "own"))


def test_unknown_bf16_policy_raises_value_error() -> None:
    run = subprocess.run([sys.executable, "-c", "import eml_ops"], capture_output=True,
                         text=True, env=child_environment(EML_OPS_BF16="ours"), timeout=120,
                         check=False)
    assert run.returncode == 1
    assert ("ValueError: EML_OPS_BF16='ours': eml_ops: unknown bfloat16 policy 'ours'; "
            "choose one of: own, aten, auto") in run.stderr, run.stderr
    before = eml_ops._C.get_bf16_policy()
    with pytest.raises(ValueError, match="unknown bfloat16 policy 'fast'"):
        eml_ops._C.set_bf16_policy("fast")
    assert eml_ops._C.get_bf16_policy() == before


@contextlib.contextmanager
def bf16_policy(policy: str) -> Iterator[None]:
    """Set the process-wide bfloat16 policy for a block, then restore the one before."""
    before = eml_ops._C.get_bf16_policy()
    eml_ops._C.set_bf16_policy(policy)
    try:
        yield
    finally:
        eml_ops._C.set_bf16_policy(before)


def bf16_layer_results(policy: str, backend: str, rows: int, depth: int) -> list[torch.Tensor]:
    """Output and gradients of a bfloat16 layer (depth -> 128) on `rows` rows, seeded by
    `depth`, through eml_ops.linear under `policy` ("torch": F.linear itself)."""
    generator = torch.Generator().manual_seed(depth)
    x, w, b, grad = (torch.randn(*shape, dtype=torch.bfloat16, generator=generator)
                     for shape in ((rows, depth), (128, depth), (128,), (rows, 128)))
    inputs = [t.requires_grad_() for t in (x, w, b)]
    if policy == "torch":
        y = F.linear(*inputs)
        return [y.detach(), *torch.autograd.grad(y, inputs, grad)]
    with bf16_policy(policy), eml_ops.use_backend(backend):
        y = eml_ops.linear(*inputs)
        return [y.detach(), *torch.autograd.grad(y, inputs, grad)]


def all_equal(first: list[torch.Tensor], second: list[torch.Tensor]) -> bool:
    return all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


# Rows of a layer that ATen runs under every policy at the depths below (>= 1000).
ATEN_SIZED_ROWS = 128


def depth_where_ours_and_aten_round_differently(backend: str) -> int:
    """A depth at which our bfloat16 output and some gradient of ATEN_SIZED_ROWS rows differ
    from ATen's bits (our float sums, in another order than ATen's kernel, round differently
    somewhere), so that equality with ATen's shows that it ran. Which depths do depends on
    the CPU (with bf16 dot products oneDNN matched ours at depth 1024 on Zen 4): search a
    few."""
    for depth in (1024, 4096, 1000, 3000):
        own = bf16_layer_results("own", backend, ATEN_SIZED_ROWS, depth)
        aten = bf16_layer_results("aten", backend, ATEN_SIZED_ROWS, depth)
        if not torch.equal(own[0], aten[0]) and not all_equal(own[1:], aten[1:]):
            return depth
    pytest.fail("no input found on which our bf16 GEMM and ATen's round differently")


ATEN_MATMULS = {"aten::linear", "aten::addmm", "aten::mm", "aten::matmul"}


def aten_matmul_ran(policy: str, rows: int, depth: int,
                    width: int) -> tuple[bool, bool, bool]:
    """Whether ATen's matmul ran in the forward, in dL/dX, and in dL/dW (with dL/db) of a
    bfloat16 layer (depth -> width, `rows` rows) through eml_ops.linear under `policy`. The
    profiler sees the ops our CPU kernels call: at::linear / at::mm where they hand the call to
    ATen."""
    x, w, b = (torch.randn(*shape, dtype=torch.bfloat16).requires_grad_()
               for shape in ((rows, depth), (width, depth), (width,)))
    grad = torch.randn(rows, width, dtype=torch.bfloat16)
    activities = [torch.profiler.ProfilerActivity.CPU]
    with bf16_policy(policy), eml_ops.use_backend("blocked"):
        with torch.profiler.profile(activities=activities) as forward:
            y = eml_ops.linear(x, w, b)
        with torch.profiler.profile(activities=activities) as input_gradient:
            torch.autograd.grad(y, [x], grad, retain_graph=True)
        with torch.profiler.profile(activities=activities) as weight_gradient:
            torch.autograd.grad(y, [w, b], grad)
    return tuple(any(event.name in ATEN_MATMULS for event in run.events())
                 for run in (forward, input_gradient, weight_gradient))


# Not `reference`: its plain float loops happen to round like oneDNN on these inputs, so it
# could not show which one ran (the routing is the same function for every backend).
@pytest.mark.parametrize("backend", [name for name in OWN_BACKENDS if name != "reference"])
def test_bf16_sent_to_aten_is_f_linear_bit_for_bit(backend: str) -> None:
    depth = depth_where_ours_and_aten_round_differently(backend)
    expected = bf16_layer_results("torch", backend, ATEN_SIZED_ROWS, depth)
    for policy in ("aten", "auto"):
        results = bf16_layer_results(policy, backend, ATEN_SIZED_ROWS, depth)
        assert all_equal(results, expected), policy


# (rows, depth, width): which of the forward, dL/dX and dL/dW ATen runs under "auto". Up to
# OWN_ROWS rows at depth 4096 (more with bfloat16 dot tiles of our own) the forward is ours
# at any size, and dL/dX up to INPUT_ROWS.
OWN_ROWS = eml_ops._C.bf16_own_max_rows(4096)
INPUT_ROWS = eml_ops._C.bf16_auto_limits()["input_gradient_rows"]
AUTO_ROUTING = [
    ((1, 4096, 1024), (False, False, True)),   # our forward and dL/dX; a dL/dW above 2^16
    ((OWN_ROWS, 4096, 1024), (False, OWN_ROWS > INPUT_ROWS, True)),
    ((OWN_ROWS + 1, 4096, 1024), (True, True, True)),  # 2^22 multiply-adds or more: ATen's
    ((INPUT_ROWS, 64, 4096), (False, False, True)),
    ((INPUT_ROWS + 1, 64, 4096), (False, True, True)),
    ((255, 64, 64), (False, True, True)),      # a forward below 2^20 (a backward above 2^16)
    ((256, 64, 64), (True, True, True)),       # 2^20
    ((16, 64, 64), (False, False, False)),     # a backward of 2^16
    ((17, 64, 64), (False, True, True)),
]


@pytest.mark.parametrize(("size", "aten_runs"), AUTO_ROUTING)
def test_bf16_auto_policy_runs_small_products_on_ours(
        size: tuple[int, int, int], aten_runs: tuple[bool, bool, bool]) -> None:
    assert aten_matmul_ran("auto", *size) == aten_runs
    assert aten_matmul_ran("own", *size) == (False, False, False)
    assert aten_matmul_ran("aten", *size) == (True, True, True)


def test_bf16_auto_policy_splits_the_backward_correctly() -> None:
    # dL/dX of few rows on ours, dL/dW and dL/db on ATen's, in one call of linear_backward:
    # each against float64, rounded to bfloat16 (through the casts), one unit in the last place.
    rows, depth, width = INPUT_ROWS, 300, 700
    assert aten_matmul_ran("auto", rows, depth, width) == (False, False, True)
    x, w, b = (torch.randn(*shape, dtype=torch.bfloat16, requires_grad=True)
               for shape in ((rows, depth), (width, depth), (width,)))
    grad = torch.randn(rows, width, dtype=torch.bfloat16)
    with bf16_policy("auto"), eml_ops.use_backend("blocked"):
        got = torch.autograd.grad(eml_ops.linear(x, w, b), [x, w, b], grad)
    expected = torch.autograd.grad(F.linear(x.double(), w.double(), b.double()), [x, w, b],
                                   grad.double())
    for name, value, want in zip("xwb", got, expected, strict=True):
        torch.testing.assert_close(value, want, rtol=2**-7, atol=1e-2, msg=name)


def test_bf16_dot_tiles_flush_subnormal_inputs_only_where_native() -> None:
    # vdpbf16ps treats subnormal inputs as zero (as oneDNN's bfloat16 GEMM does on such
    # CPUs); the widening tiles compute the exact float32 product. Every ISA of this CPU.
    x = torch.full((2, 64), 1e-39, dtype=torch.bfloat16)  # subnormal in bfloat16
    w = torch.full((4, 64), 1e30, dtype=torch.bfloat16)
    exact = F.linear(x.double(), w.double())
    active = eml_ops._C.get_isa()
    try:
        for isa in ISAS:
            eml_ops._C.set_isa(isa)
            with bf16_policy("own"), eml_ops.use_backend("blocked"):
                y = eml_ops.linear(x, w).double()
            if eml_ops._C.bf16_dot_tiles_are_native():
                assert torch.equal(y, torch.zeros_like(y)), isa
            else:
                torch.testing.assert_close(y, exact, rtol=1e-2, atol=0, msg=isa)
    finally:
        eml_ops._C.set_isa(active)
