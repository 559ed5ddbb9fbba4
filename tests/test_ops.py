"""The eml:: operators: opcheck, gradcheck/gradgradcheck, backward masks, devices."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import eml_ops
from tests.helpers import intra_op_threads, tolerance

OPS = torch.ops.eml


def sample_inputs(dtype: torch.dtype = torch.float32, requires_grad: bool = False) -> list[tuple]:
    """(input, weight, bias) triples covering 1-D, 2-D, N-D, zero-size, strided and no bias."""
    def make(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, dtype=dtype, requires_grad=requires_grad)

    return [
        (make(5), make(3, 5), None),
        (make(4, 5), make(3, 5), make(3)),
        (make(2, 3, 5), make(4, 5), make(4)),
        (make(0, 5), make(3, 5), make(3)),
        (make(4, 0), make(3, 0), make(3)),
        (make(4, 5), make(0, 5), None),
        (make(5, 4).t(), make(5, 3).t(), None),
    ]


# All three ops have autograd kernels: opcheck runs its autograd-registration test whenever
# an input requires grad, so both cases run for each.
REQUIRES_GRAD = pytest.mark.parametrize("requires_grad", [False, True], ids=["nograd", "grad"])


@REQUIRES_GRAD
@pytest.mark.parametrize("case", range(len(sample_inputs())))
def test_opcheck_linear(backend: str, case: int, requires_grad: bool) -> None:
    args = sample_inputs(requires_grad=requires_grad)[case]
    torch.library.opcheck(OPS.linear, args)


@REQUIRES_GRAD
@pytest.mark.parametrize("case", range(len(sample_inputs())))
def test_opcheck_linear_forward(backend: str, case: int, requires_grad: bool) -> None:
    torch.library.opcheck(OPS.linear_forward, sample_inputs(requires_grad=requires_grad)[case])


@REQUIRES_GRAD
@pytest.mark.parametrize("mask", [(True, True, True), (True, False, False), (False, True, True),
                                  (False, False, True)])
@pytest.mark.parametrize("case", range(len(sample_inputs())))
def test_opcheck_linear_backward(backend: str, case: int, mask: tuple[bool, bool, bool],
                                 requires_grad: bool) -> None:
    x, w, _ = sample_inputs(requires_grad=requires_grad)[case]
    grad = torch.randn(*x.shape[:-1], w.shape[0], requires_grad=requires_grad)
    torch.library.opcheck(OPS.linear_backward, (grad, x, w, list(mask)))


@REQUIRES_GRAD
@pytest.mark.parametrize("case", range(len(sample_inputs())))
def test_opcheck_on_meta(case: int, requires_grad: bool) -> None:
    x, w, b = (None if t is None else t.detach().to("meta").requires_grad_(requires_grad)
               for t in sample_inputs()[case])
    grad = torch.empty(*x.shape[:-1], w.shape[0], device="meta", requires_grad=requires_grad)
    for op, args in [(OPS.linear, (x, w, b)), (OPS.linear_forward, (x, w, b)),
                     (OPS.linear_backward, (grad, x, w, [True, True, True]))]:
        results = torch.library.opcheck(op, args)
        assert set(results.values()) == {"SUCCESS"}, (op, results)


def test_gradcheck_and_gradgradcheck(backend: str) -> None:
    for x, w, b in sample_inputs(torch.float64, requires_grad=True):
        args = (x, w) if b is None else (x, w, b)
        assert torch.autograd.gradcheck(OPS.linear, args)
        assert torch.autograd.gradgradcheck(OPS.linear, args)


def test_backward_mask_gives_none(backend: str) -> None:
    x, w, grad = torch.randn(4, 5), torch.randn(3, 5), torch.randn(4, 3)
    grad_x, grad_w, grad_b = OPS.linear_backward(grad, x, w, [True, False, False])
    assert grad_w is None and grad_b is None
    torch.testing.assert_close(grad_x, grad @ w)
    grad_x, grad_w, grad_b = OPS.linear_backward(grad, x, w, [False, True, True])
    assert grad_x is None
    torch.testing.assert_close(grad_w, grad.t() @ x)
    torch.testing.assert_close(grad_b, grad.sum(0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_and_backward_match_f_linear(backend: str, dtype: torch.dtype) -> None:
    for x, w, b in sample_inputs(dtype, requires_grad=True):
        expected = F.linear(x, w, b)
        actual = eml_ops.linear(x, w, b)
        tol = tolerance(dtype, x.shape[-1])
        torch.testing.assert_close(actual, expected, **tol)
        grad = torch.randn_like(expected)
        params = [t for t in (x, w, b) if t is not None]
        expected_grads = torch.autograd.grad(expected, params, grad)
        actual_grads = torch.autograd.grad(actual, params, grad)
        for a, e in zip(actual_grads, expected_grads, strict=True):
            torch.testing.assert_close(a, e, **tolerance(dtype, max(x.numel(), 1)))


# Shapes (batch, in, out) that take each of blocked's forward paths with AVX2 (path.cpp): dot
# (8 rows of float, 24 rows), transposed (16 to 64 rows of float, 8 of double, at least 256
# deep), packed (more rows or a shallower product), broadcast (a narrow weight, many rows).
PATH_SHAPES = [(8, 300, 40), (16, 256, 70), (32, 700, 33), (64, 512, 250), (24, 512, 64),
               (200, 300, 90), (128, 64, 64)]


def random_operands(shape: tuple[int, int, int],
                    dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """An input (batch x in) and a weight (out x in) for a (batch, in, out) shape."""
    batch, in_features, out_features = shape
    return (torch.randn(batch, in_features, dtype=dtype),
            torch.randn(out_features, in_features, dtype=dtype))


def random_backward_operands(
    shape: tuple[int, int, int], dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """random_operands and a gradient of the output (batch x out)."""
    x, w = random_operands(shape, dtype)
    return x, w, torch.randn(x.shape[0], w.shape[0], dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", PATH_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_paths_match_float64(backend: str, dtype: torch.dtype,
                                     shape: tuple[int, int, int]) -> None:
    x, w = random_operands(shape, dtype)
    b = torch.randn(w.shape[0], dtype=dtype)
    tol = tolerance(dtype, x.shape[1])
    for bias in (b, None):
        expected = F.linear(x.double(), w.double(), None if bias is None else bias.double())
        torch.testing.assert_close(eml_ops.linear(x, w, bias), expected.to(dtype), **tol)


# Shapes (batch, in, out) whose dL/dW = G^T·X has a narrow side (path.cpp's narrow_side: at
# most 64, whole tile widths, k = batch from 128): out narrow (computed as dL/dW^T), in
# narrow, both 64; and a wide side of 1024 floats, which stays packed.
WEIGHT_GRADIENT_SHAPES = [(1000, 128, 32), (300, 48, 100), (512, 64, 64), (256, 1024, 16)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", WEIGHT_GRADIENT_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_weight_gradient_paths_match_float64(backend: str, dtype: torch.dtype,
                                             shape: tuple[int, int, int]) -> None:
    x, w, grad_output = random_backward_operands(shape, dtype)
    _, grad_weight, grad_bias = OPS.linear_backward(grad_output, x, w, [False, True, True])
    expected = grad_output.double().T @ x.double()
    tol = tolerance(dtype, x.shape[0])
    torch.testing.assert_close(grad_weight, expected.to(dtype), **tol)
    torch.testing.assert_close(grad_bias, grad_output.sum(0), **tol)


# Shapes (batch, in, out) whose dL/dX = G·W takes the strip path where AVX-512's FMAs run whole
# (path.cpp: 33 to 256 rows, 192 (float) or 96 (double) to 768 inputs; elsewhere the few-rows
# tiles or the packed path): the edges of its rows, strips of inputs and blocks of depth (out),
# and just outside it.
INPUT_GRADIENT_SHAPES = [(33, 768, 3072), (128, 192, 193), (256, 770, 500), (97, 500, 1000),
                         (32, 768, 300), (257, 768, 200)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", INPUT_GRADIENT_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_input_gradient_paths_match_float64(backend: str, dtype: torch.dtype,
                                            shape: tuple[int, int, int]) -> None:
    assert_input_gradient_matches_float64(shape, dtype, threads=torch.get_num_threads())


def assert_input_gradient_matches_float64(shape: tuple[int, int, int], dtype: torch.dtype,
                                          threads: int) -> None:
    """dL/dX of random operands of ``shape`` on ``threads`` intra-op threads against float64."""
    x, w, grad_output = random_backward_operands(shape, dtype)
    with intra_op_threads(threads):
        grad_input, _, _ = OPS.linear_backward(grad_output, x, w, [True, False, False])
    expected = grad_output.double() @ w.double()
    torch.testing.assert_close(grad_input, expected.to(dtype), **tolerance(dtype, w.shape[0]))


# Shapes (batch, in, out) whose dL/dX = G·W splits its depth (out) between two or three
# threads (blocked_gemm.cpp: a small C whose parts would not take the strip path): mid-size
# batches whose whole C takes the strip path where AVX-512's FMAs run whole (float; double at
# 64 x 100 x 1024), and few rows.
SPLIT_DEPTH_SHAPES = [(64, 256, 4096), (41, 200, 999), (64, 100, 1024), (8, 256, 4096),
                      (2, 512, 2048)]


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SPLIT_DEPTH_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_input_gradient_split_between_threads_matches_float64(
        backend: str, dtype: torch.dtype, shape: tuple[int, int, int], threads: int) -> None:
    assert_input_gradient_matches_float64(shape, dtype, threads)


def test_grad_without_bias_skips_bias(backend: str) -> None:
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(2, 4)
    eml_ops.linear(x, w).sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(3, 2) @ w)


def test_meta_tensors_give_shapes() -> None:
    x = torch.empty(7, 2, 5, device="meta")
    w = torch.empty(3, 5, device="meta")
    assert OPS.linear(x, w, torch.empty(3, device="meta")).shape == (7, 2, 3)
    grads = OPS.linear_backward(torch.empty(7, 2, 3, device="meta"), x, w, [True, True, True])
    assert [tuple(g.shape) for g in grads] == [(7, 2, 5), (3, 5), (3,)]
    with torch.device("meta"):
        layer = eml_ops.Layer(5, 3, bias=True)
    assert layer.weight.is_meta and layer(x).shape == (7, 2, 3)


def test_no_grad_and_inference_mode(backend: str) -> None:
    x, w = torch.randn(4, 5, requires_grad=True), torch.randn(3, 5, requires_grad=True)
    with torch.no_grad():
        y = eml_ops.linear(x, w)
    assert not y.requires_grad
    with torch.inference_mode():
        torch.testing.assert_close(eml_ops.linear(x, w), F.linear(x, w))


def test_output_is_fresh_memory(backend: str) -> None:
    x, w = torch.randn(4, 5), torch.randn(3, 5)
    y = eml_ops.linear(x, w)
    assert y.is_contiguous() and y.data_ptr() not in (x.data_ptr(), w.data_ptr())
