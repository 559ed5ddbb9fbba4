"""Reliability: bad input in processes of their own, odd but valid input against F.linear.

Bad input: every case runs in a separate process (forked from a server that has imported torch
once, so a case costs a fraction of a second, not a Python start-up), loops over every
backend inside, and reports each backend's exception. A crash (segfault, abort, sanitizer
report) fails that one case, never the run.

Odd but valid input (strided, expanded, permuted, zero-size, NaN/Inf, very long reductions,
non-contiguous gradients) runs in this process on every backend, and on both ISAs of the
blocked backend, and must give what torch.nn.functional.linear gives.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F

import eml_ops
from tests.helpers import BACKENDS, run_in_own_process, tolerance

OPS = torch.ops.eml

# --------------------------------------------------------------------------------------------
# Bad input, one process per case
# --------------------------------------------------------------------------------------------

def assert_raise_everywhere(calls: list[str], patterns: list[str],
                            exception: str = "RuntimeError") -> None:
    """Each call raised `exception` with a message matching its pattern, on every backend."""
    for name, outcomes in run_in_own_process(calls).items():
        for call, pattern, (kind, message) in zip(calls, patterns, outcomes, strict=True):
            assert kind == exception, f"{name}: {call} gave {kind}: {message}"
            assert re.search(pattern, message), f"{name}: {call}: {message!r} !~ {pattern!r}"


# (id, arguments of linear / linear_forward as Python source, expected message after "op: ")
FORWARD_CASES = [
    ("in_features", "torch.randn(4, 5), torch.randn(3, 6)",
     r"in_features mismatch: input of shape \[4, 5\] has 5 features, "
     r"weight of shape \[3, 6\] expects 6"),
    ("in_features_1d", "torch.randn(4), torch.randn(3, 5)",
     r"in_features mismatch: input of shape \[4\] has 4 features, weight of shape \[3, 5\]"),
    ("in_features_nd", "torch.randn(2, 3, 5), torch.randn(4, 6), torch.randn(4)",
     r"in_features mismatch: input of shape \[2, 3, 5\] has 5 features, "
     r"weight of shape \[4, 6\] expects 6"),
    ("in_features_f64", "torch.randn(4, 5).double(), torch.randn(3, 6).double()",
     r"in_features mismatch: input of shape \[4, 5\]"),
    ("input_0d", "torch.tensor(1.0), torch.randn(3, 5)",
     r"input must have at least 1 dimension .*got 0-D input of shape \[\]"),
    ("weight_1d", "torch.randn(4, 5), torch.randn(5)",
     r"weight must be 2-D \[out_features, in_features\], got 1-D weight of shape \[5\]"),
    ("weight_3d", "torch.randn(4, 5), torch.randn(2, 3, 5)",
     r"weight must be 2-D .*got 3-D weight of shape \[2, 3, 5\]"),
    ("bias_length", "torch.randn(4, 5), torch.randn(3, 5), torch.randn(4)",
     r"bias must be 1-D \[out_features\] = \[3\] for weight of shape \[3, 5\], "
     r"got bias of shape \[4\]"),
    ("bias_2d", "torch.randn(4, 5), torch.randn(3, 5), torch.randn(1, 3)",
     r"bias must be 1-D .*got bias of shape \[1, 3\]"),
    ("bias_0d", "torch.randn(4, 5), torch.randn(3, 5), torch.tensor(0.5)",
     r"bias must be 1-D .*got bias of shape \[\]"),
    ("dtype_f32_f64", "torch.randn(4, 5), torch.randn(3, 5, dtype=torch.float64)",
     r"input and weight must have the same dtype, got input Float \[4, 5\] "
     r"and weight Double \[3, 5\]"),
    ("dtype_f64_f32", "torch.randn(4, 5, dtype=torch.float64), torch.randn(3, 5)",
     r"input and weight must have the same dtype, got input Double \[4, 5\] "
     r"and weight Float \[3, 5\]"),
    ("dtype_f16_f32", "torch.randn(4, 5).half(), torch.randn(3, 5)",
     r"input and weight must have the same dtype, got input Half \[4, 5\] "
     r"and weight Float \[3, 5\]"),
    ("dtype_bias", "torch.randn(4, 5), torch.randn(3, 5), torch.randn(3, dtype=torch.float64)",
     r"bias must have the dtype of weight, got bias Double and weight Float"),
    ("device_weight_meta", "torch.randn(4, 5), torch.randn(3, 5, device='meta')",
     r"input and weight must be on the same device, got input on cpu and weight on meta"),
    ("device_input_meta", "torch.randn(4, 5, device='meta'), torch.randn(3, 5)",
     r"input and weight must be on the same device, got input on meta and weight on cpu"),
    ("device_bias_meta", "torch.randn(4, 5), torch.randn(3, 5), torch.randn(3, device='meta')",
     r"bias must be on the device of weight, got bias on meta and weight on cpu"),
]

# (id, arguments of linear_backward as Python source, expected message after "op: ")
BACKWARD_CASES = [
    ("grad_columns", "torch.randn(4, 2), torch.randn(4, 5), torch.randn(3, 5)",
     r"grad_output must have shape \[4, 3\] \(input \[4, 5\] with the last dim replaced by "
     r"out_features of weight \[3, 5\]\), got \[4, 2\]"),
    ("grad_rows", "torch.randn(6, 3), torch.randn(4, 5), torch.randn(3, 5)",
     r"grad_output must have shape \[4, 3\] .*got \[6, 3\]"),
    ("grad_rank", "torch.randn(12), torch.randn(4, 5), torch.randn(3, 5)",
     r"grad_output must have shape \[4, 3\] .*got \[12\]"),
    ("grad_nd", "torch.randn(2, 2, 3), torch.randn(2, 3, 5), torch.randn(3, 5)",
     r"grad_output must have shape \[2, 3, 3\] .*got \[2, 2, 3\]"),
    ("in_features", "torch.randn(4, 3), torch.randn(4, 5), torch.randn(3, 6)",
     r"in_features mismatch: input of shape \[4, 5\] has 5 features, "
     r"weight of shape \[3, 6\] expects 6"),
    ("weight_1d", "torch.randn(4, 3), torch.randn(4, 5), torch.randn(5)",
     r"weight must be 2-D .*got 1-D weight of shape \[5\]"),
    ("input_0d", "torch.randn(3), torch.tensor(1.0), torch.randn(3, 5)",
     r"input must have at least 1 dimension .*0-D input"),
    ("dtype_grad", "torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 5), torch.randn(3, 5)",
     r"grad_output must have the dtype of input, got Double and Float"),
    ("dtype_weight", "torch.randn(4, 3), torch.randn(4, 5), torch.randn(3, 5).double()",
     r"input and weight must have the same dtype, got input Float \[4, 5\] "
     r"and weight Double \[3, 5\]"),
    ("device_grad_meta", "torch.randn(4, 3, device='meta'), torch.randn(4, 5), torch.randn(3, 5)",
     r"grad_output must be on the device of input, got meta and cpu"),
]


@pytest.mark.parametrize(("args", "message"), [c[1:] for c in FORWARD_CASES],
                         ids=[c[0] for c in FORWARD_CASES])
def test_bad_forward_input_raises_in_own_process(args: str, message: str) -> None:
    # One process per case; inside it, both ops (inputs with and without grad) on every backend.
    grad_args = args.replace(")", ").requires_grad_()", 1)
    assert_raise_everywhere(
        [f"OPS.linear({args})", f"OPS.linear({grad_args})", f"OPS.linear_forward({args})",
         f"eml_ops.linear({args})"],
        [f"^eml::linear: {message}", f"^eml::linear: {message}",
         f"^eml::linear_forward: {message}", f"^eml::linear: {message}"])


@pytest.mark.parametrize(("args", "message"), [c[1:] for c in BACKWARD_CASES],
                         ids=[c[0] for c in BACKWARD_CASES])
def test_bad_backward_input_raises_in_own_process(args: str, message: str) -> None:
    masks = ["[True, True, True]", "[True, False, False]", "[False, True, False]",
             "[False, False, True]"]
    assert_raise_everywhere([f"OPS.linear_backward({args}, {mask})" for mask in masks],
                            [f"^eml::linear_backward: {message}"] * len(masks))


# --------------------------------------------------------------------------------------------
# Odd but valid input: same as F.linear on every backend and both ISAs of blocked
# --------------------------------------------------------------------------------------------


def _configs() -> list[tuple[str, str | None]]:
    configs: list[tuple[str, str | None]] = []
    for name in BACKENDS:
        if name == "blocked":
            configs.extend(("blocked", isa) for isa in eml_ops._C.supported_isas())
        else:
            configs.append((name, None))
    return configs


CONFIGS = _configs()


@pytest.fixture(params=CONFIGS, ids=[f"{n}-{i}" if i else n for n, i in CONFIGS])
def config(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every backend; the blocked one once per ISA (restored afterwards)."""
    name, isa = request.param
    previous_isa = eml_ops._C.get_isa()
    try:
        if isa is not None:
            eml_ops._C.set_isa(isa)
            assert eml_ops._C.get_isa() == isa
        with eml_ops.use_backend(name):
            yield request.param
    finally:
        eml_ops._C.set_isa(previous_isa)


def _leaf(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """The same memory and strides as a leaf that requires grad."""
    return None if tensor is None else tensor.detach().requires_grad_(True)


def _dense_leaf(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """A contiguous copy as a leaf that requires grad (F.linear's independent inputs)."""
    return None if tensor is None else tensor.detach().contiguous().clone().requires_grad_(True)


def check_matches_f_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                           grad: torch.Tensor | None = None) -> None:
    """Forward and every gradient of eml_ops.linear on (x, w, b) as strided equal F.linear's
    on contiguous copies; inputs are left untouched."""
    originals = [t.clone() for t in (x, w, b) if t is not None]
    leaves = [_leaf(t) for t in (x, w, b)]
    dense = [_dense_leaf(t) for t in (x, w, b)]
    actual = eml_ops.linear(*leaves)
    expected = F.linear(*dense)
    dtype, k = x.dtype, x.shape[-1]
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, **tolerance(dtype, k))
    if grad is None:
        grad = torch.randn(expected.shape, dtype=dtype)
    params = [t for t in leaves if t is not None]
    actual_grads = torch.autograd.grad(actual, params, grad)
    expected_grads = torch.autograd.grad(expected, [t for t in dense if t is not None], grad)
    rows = max(1, math.prod(x.shape[:-1]))
    reductions = [w.shape[0], rows, rows]  # grad_input sums over out, grad_weight/bias over rows
    names = ["input", "weight", "bias"][: len(params)]
    for name, a, e, n in zip(names, actual_grads, expected_grads, reductions[: len(params)],
                             strict=True):
        assert a.shape == e.shape, name
        torch.testing.assert_close(a, e, **tolerance(dtype, n), msg=lambda m, nm=name: f"{nm}: {m}")
    for before, after in zip(originals, [t for t in (x, w, b) if t is not None], strict=True):
        assert torch.equal(before, after), "an input was modified"


def _big(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype)


# Each builds (x, w, b); x and w are non-contiguous unless said otherwise.
STRIDED_CASES: dict[str, Callable[[torch.dtype], tuple]] = {
    "x_transposed": lambda d: (_big(5, 4, dtype=d).t(), _big(3, 5, dtype=d), _big(3, dtype=d)),
    "w_transposed": lambda d: (_big(4, 5, dtype=d), _big(5, 3, dtype=d).t(), None),
    "both_transposed_big": lambda d: (_big(131, 67, dtype=d).t(), _big(131, 45, dtype=d).t(),
                                      _big(45, dtype=d)),
    "x_sliced": lambda d: (_big(8, 12, dtype=d)[::2, 1::2], _big(3, 6, dtype=d), None),
    "w_sliced": lambda d: (_big(4, 6, dtype=d), _big(9, 13, dtype=d)[::3, 2::2],
                           _big(6, dtype=d)[::2]),
    "sliced_big": lambda d: (_big(150, 301, dtype=d)[1::2, ::3], _big(200, 101, dtype=d)[::2],
                             _big(200, dtype=d)[1::2]),
    "x_expanded_rows": lambda d: (_big(1, 5, dtype=d).expand(4, 5), _big(3, 5, dtype=d),
                                  _big(3, dtype=d)),
    "x_expanded_cols": lambda d: (_big(4, 1, dtype=d).expand(4, 5), _big(3, 5, dtype=d), None),
    "x_scalar_expanded": lambda d: (_big(dtype=d).expand(70, 90), _big(40, 90, dtype=d), None),
    "w_expanded": lambda d: (_big(4, 5, dtype=d), _big(1, 5, dtype=d).expand(3, 5),
                             _big(1, dtype=d).expand(3)),
    "w_expanded_big": lambda d: (_big(65, 130, dtype=d), _big(77, 1, dtype=d).expand(77, 130),
                                 None),
    "overlapping": lambda d: (_big(40, dtype=d).as_strided((9, 7), (1, 1)),
                              _big(30, dtype=d).as_strided((5, 7), (2, 1)), None),
    "permuted_nd": lambda d: (_big(2, 5, 4, 3, dtype=d).permute(0, 2, 3, 1), _big(7, 5, dtype=d),
                              _big(7, dtype=d)),
    "permuted_nd_big": lambda d: (_big(3, 64, 9, 11, dtype=d).permute(0, 2, 3, 1),
                                  _big(48, 64, dtype=d), _big(48, dtype=d)),
    "nd_expanded": lambda d: (_big(1, 3, 5, dtype=d).expand(2, 3, 5), _big(4, 5, dtype=d), None),
    "nd_strided_view": lambda d: (_big(2, 3, 10, dtype=d)[..., ::2], _big(4, 5, dtype=d), None),
    "nd_sliced_rows": lambda d: (_big(2, 6, 5, dtype=d)[:, ::2], _big(4, 5, dtype=d),
                                 _big(4, dtype=d)),
    "input_1d_strided": lambda d: (_big(10, dtype=d)[::2], _big(3, 5, dtype=d), _big(3, dtype=d)),
    "storage_offset": lambda d: (_big(50, 40, dtype=d)[7:40, 3:36], _big(60, 40, dtype=d)[5:, 3:36],
                                 None),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(STRIDED_CASES))
def test_strided_input_matches_f_linear(config: tuple, case: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x, w, b = STRIDED_CASES[case](dtype)
    assert not (x.is_contiguous() and w.is_contiguous()), "case must be strided"
    check_matches_f_linear(x, w, b)


ZERO_SIZE_CASES = {
    "no_rows": ((0, 5), (3, 5), True),
    "no_features": ((4, 0), (3, 0), True),
    "no_outputs": ((4, 5), (0, 5), True),
    "no_rows_nd": ((2, 0, 5), (3, 5), True),
    "no_features_nd": ((2, 3, 0), (4, 0), False),
    "input_1d_empty": ((0,), (3, 0), True),
    "all_empty": ((0, 0), (0, 0), True),
    "rows_and_outputs": ((0, 5), (0, 5), False),
    "big_no_features": ((70, 0), (90, 0), True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(ZERO_SIZE_CASES))
def test_zero_size_matches_f_linear(config: tuple, case: str, dtype: torch.dtype) -> None:
    x_shape, w_shape, with_bias = ZERO_SIZE_CASES[case]
    x, w = torch.randn(x_shape, dtype=dtype), torch.randn(w_shape, dtype=dtype)
    b = torch.randn(w_shape[0], dtype=dtype) if with_bias else None
    check_matches_f_linear(x, w, b)
    # And through linear_backward directly, every mask: masked entries are None, the others
    # have the shapes of input, weight and bias (zeros where the reduction is empty).
    grad = torch.randn(*x_shape[:-1], w_shape[0], dtype=dtype)
    for mask in ([True, True, True], [False, True, False], [False, False, True]):
        grads = OPS.linear_backward(grad, x, w, mask)
        bias_like = torch.empty(w_shape[0], dtype=dtype)
        for wanted, got, like in zip(mask, grads, (x, w, bias_like), strict=True):
            assert (got is not None) == wanted
            if wanted:
                assert got.shape == like.shape and got.dtype == dtype
        if mask[1] and x.numel() == 0:
            assert torch.equal(grads[1], torch.zeros_like(w))
        if mask[2] and grad.numel() == 0:
            assert torch.equal(grads[2], torch.zeros(w_shape[0], dtype=dtype))


def _assert_same_non_finite(actual: torch.Tensor, expected: torch.Tensor, tol: dict) -> None:
    assert torch.equal(actual.isnan(), expected.isnan()), "NaN positions differ"
    assert torch.equal(actual.isposinf(), expected.isposinf()), "+Inf positions differ"
    assert torch.equal(actual.isneginf(), expected.isneginf()), "-Inf positions differ"
    finite = expected.isfinite()
    torch.testing.assert_close(actual[finite], expected[finite], **tol)


def _with_specials(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    t = torch.randn(shape, generator=gen, dtype=dtype)
    flat = t.view(-1)
    picks = torch.randperm(flat.numel(), generator=gen)[: max(3, flat.numel() // 50)]
    specials = torch.tensor([math.nan, math.inf, -math.inf, 0.0], dtype=dtype)
    flat[picks] = specials[torch.arange(picks.numel()) % 4]
    return t


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("m", "k", "n"), [(4, 5, 3), (37, 70, 29), (130, 96, 66)])
@pytest.mark.parametrize("where", ["input", "weight", "bias", "grad_output"])
def test_nan_and_inf_propagate_as_f_linear(config: tuple, where: str, m: int, k: int, n: int,
                                           dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(m * k * n)
    x = torch.randn(m, k, generator=gen, dtype=dtype)
    w = torch.randn(n, k, generator=gen, dtype=dtype)
    b = torch.randn(n, generator=gen, dtype=dtype)
    grad = torch.randn(m, n, generator=gen, dtype=dtype)
    if where == "input":
        x = _with_specials((m, k), dtype, 1)
    elif where == "weight":
        w = _with_specials((n, k), dtype, 2)
    elif where == "bias":
        b = _with_specials((n,), dtype, 3)
    else:
        grad = _with_specials((m, n), dtype, 4)
    actual = OPS.linear(x, w, b)
    expected = F.linear(x, w, b)
    assert not expected.isfinite().all() or where == "grad_output"
    _assert_same_non_finite(actual, expected, tolerance(dtype, k))
    # The gradients: dL/dX = G W, dL/dW = G^T X, dL/db = column sums of G.
    grad_x, grad_w, grad_b = OPS.linear_backward(grad, x, w, [True, True, True])
    _assert_same_non_finite(grad_x, grad @ w, tolerance(dtype, n))
    _assert_same_non_finite(grad_w, grad.t() @ x, tolerance(dtype, m))
    _assert_same_non_finite(grad_b, grad.sum(0), tolerance(dtype, m))


def _bound(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, k: int) -> torch.Tensor:
    """Allowed error of a length-k reduction: 64 eps sqrt(k) (|x| |w|^T + |b|), as float64."""
    scale = x.double().abs() @ w.double().abs().t()
    if b is not None:
        scale = scale + b.double().abs()
    return tolerance(x.dtype, k)["atol"] * scale


def _fsum_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """x w^T (+ b) with each dot product summed exactly (math.fsum) in float64."""
    xs, ws = x.double(), w.double()
    out = torch.empty(x.shape[0], w.shape[0], dtype=torch.float64)
    for i in range(x.shape[0]):
        for j in range(w.shape[0]):
            out[i, j] = math.fsum((xs[i] * ws[j]).tolist()) + (0.0 if b is None else float(b[j]))
    return out


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("data", ["normal", "positive"])
def test_reduction_over_100000_features(config: tuple, dtype: torch.dtype, data: str) -> None:
    k = 100_000
    gen = torch.Generator().manual_seed(7)
    make = torch.rand if data == "positive" else torch.randn
    x = make(3, k, generator=gen, dtype=dtype)
    w = make(5, k, generator=gen, dtype=dtype)
    b = make(5, generator=gen, dtype=dtype)
    reference = _fsum_linear(x, w, b)
    bound = _bound(x, w, b, k)
    error = (OPS.linear(x, w, b).double() - reference).abs()
    assert (error <= bound).all(), f"max error {error.max():.3g}, bound {bound.min():.3g}"
    # 1-D input takes the same path as one row.
    error_1d = (OPS.linear(x[1], w, b).double() - reference[1]).abs()
    assert (error_1d <= bound[1]).all()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_backward_reduction_over_100000_rows(config: tuple, dtype: torch.dtype) -> None:
    # dL/dW = G^T X and dL/db sum over the 100,000 rows of the batch.
    m = 100_000
    gen = torch.Generator().manual_seed(8)
    x = torch.rand(m, 3, generator=gen, dtype=dtype)
    w = torch.randn(4, 3, generator=gen, dtype=dtype)
    grad = torch.rand(m, 4, generator=gen, dtype=dtype)
    _, grad_w, grad_b = OPS.linear_backward(grad, x, w, [False, True, True])
    reference_w = _fsum_linear(grad.t(), x.t(), None)
    error_w = (grad_w.double() - reference_w).abs()
    assert (error_w <= _bound(grad.t(), x.t(), None, m)).all(), error_w.max()
    reference_b = torch.tensor([math.fsum(c) for c in grad.double().t().tolist()],
                               dtype=torch.float64)
    bound_b = tolerance(dtype, m)["atol"] * grad.double().abs().sum(0)
    assert ((grad_b.double() - reference_b).abs() <= bound_b).all()


@pytest.mark.parametrize("out_features", [1, 3])
def test_backward_sums_over_2_pow_25_rows_are_exact(config: tuple, out_features: int) -> None:
    # One float32 running sum of 2^25 ones stalls at 2^24; blocked sums reach 2^25 exactly,
    # as nn.Linear's cascade does. dL/db is G's column sums; dL/dW = G^T X (X of ones)
    # is a sum over the same 2^25 rows on our backends.
    rows = 2**25
    grad = torch.ones(rows, out_features)
    x = torch.ones(rows, 1)
    w = torch.ones(out_features, 1)
    _, grad_w, grad_b = OPS.linear_backward(grad, x, w, [False, True, True])
    layer = torch.nn.Linear(1, out_features)
    layer(x).backward(grad)
    exact = torch.full((out_features,), float(rows))
    assert torch.equal(grad_b, exact), grad_b
    assert torch.equal(grad_b, layer.bias.grad)
    if config[0] != "aten":  # MKL's G^T X (nn.Linear's dL/dW too) stalls at 2^24 here
        assert torch.equal(grad_w, exact[:, None]), grad_w


def _weights(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    """Fixed unit-scale multipliers for a loss (so gradients stay unit-scale)."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(99), dtype=dtype)


# Losses whose gradient reaching eml::linear's backward is non-contiguous (checked by a hook).
GRAD_PATTERNS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "transposed": lambda y: (y.t() * _weights(*y.t().shape, dtype=y.dtype)).sum(),
    "expanded_scalar": lambda y: y.sum(),
    "expanded_rows": lambda y: (y.sum(0) * _weights(y.shape[1], dtype=y.dtype)).sum(),
    "expanded_cols": lambda y: (y.sum(1) * _weights(y.shape[0], dtype=y.dtype)).sum(),
    "t_sum0": lambda y: (y.t().sum(0) * _weights(y.shape[0], dtype=y.dtype)).sum(),
    "expand_sum": lambda y: y.expand(3, *y.shape).sum(),
    "sliced": lambda y: (y[:, ::2] * _weights(y.shape[0], (y.shape[1] + 1) // 2, dtype=y.dtype))
    .sum(),
}
CONTIGUOUS_OK = {"sliced", "expand_sum"}  # autograd hands these over densely


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(4, 5, 3), (67, 129, 35)])
@pytest.mark.parametrize("pattern", list(GRAD_PATTERNS))
def test_non_contiguous_grad_output_from_autograd(config: tuple, pattern: str, shape: tuple,
                                                  dtype: torch.dtype) -> None:
    m, k, n = shape
    torch.manual_seed(m + n)
    x = torch.randn(m, k, dtype=dtype, requires_grad=True)
    w = torch.randn(n, k, dtype=dtype, requires_grad=True)
    b = torch.randn(n, dtype=dtype, requires_grad=True)
    seen: list[torch.Tensor] = []
    y = OPS.linear(x, w, b)
    y.register_hook(lambda g: seen.append(g))
    actual = torch.autograd.grad(GRAD_PATTERNS[pattern](y), (x, w, b))
    expected = torch.autograd.grad(GRAD_PATTERNS[pattern](F.linear(x, w, b)), (x, w, b))
    assert len(seen) == 1
    if pattern not in CONTIGUOUS_OK:
        assert not seen[0].is_contiguous(), "the pattern no longer gives a strided gradient"
    for a, e, r in zip(actual, expected, (n, m, m), strict=True):
        torch.testing.assert_close(a, e, **tolerance(dtype, r))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_non_contiguous_grad_output_nd(config: tuple, dtype: torch.dtype) -> None:
    # Permuted N-D input, and a gradient that arrives permuted.
    torch.manual_seed(3)
    x = torch.randn(2, 5, 4, 3, dtype=dtype).permute(0, 2, 3, 1).detach().requires_grad_()
    w = torch.randn(6, 5, dtype=dtype, requires_grad=True)
    c = torch.randn(6, 2, 4, 3, dtype=dtype)
    seen: list[torch.Tensor] = []
    y = OPS.linear(x, w)
    y.register_hook(lambda g: seen.append(g))
    actual = torch.autograd.grad((y.permute(3, 0, 1, 2) * c).sum(), (x, w))
    expected = torch.autograd.grad((F.linear(x, w).permute(3, 0, 1, 2) * c).sum(), (x, w))
    assert not seen[0].is_contiguous()
    for a, e, r in zip(actual, expected, (6, 24), strict=True):
        torch.testing.assert_close(a, e, **tolerance(dtype, r))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["transposed", "expanded_rows", "expanded_cols", "sliced"])
def test_linear_backward_with_strided_grad_output(config: tuple, layout: str,
                                                  dtype: torch.dtype) -> None:
    m, k, n = 45, 70, 33
    torch.manual_seed(11)
    x, w = torch.randn(m, k, dtype=dtype), torch.randn(n, k, dtype=dtype)
    grad = {
        "transposed": lambda: torch.randn(n, m, dtype=dtype).t(),
        "expanded_rows": lambda: torch.randn(1, n, dtype=dtype).expand(m, n),
        "expanded_cols": lambda: torch.randn(m, 1, dtype=dtype).expand(m, n),
        "sliced": lambda: torch.randn(m, 3 * n, dtype=dtype)[:, 1::3],
    }[layout]()
    assert not grad.is_contiguous()
    dense = grad.contiguous()
    for mask in ([True, True, True], [True, False, False], [False, True, False],
                 [False, False, True]):
        got = OPS.linear_backward(grad, x, w, mask)
        want = (dense @ w, dense.t() @ x, dense.sum(0))
        for wanted, g, e, r in zip(mask, got, want, (n, m, m), strict=True):
            assert (g is not None) == wanted
            if wanted:
                torch.testing.assert_close(g, e, **tolerance(dtype, r))
