"""torch.func, forward-mode AD and vmap on the eml:: ops, against F.linear, on every backend.

The vmap fallback (one call per sample) is disabled in every test here, so an op reached
without a batching rule raises instead of passing slowly.
"""

from __future__ import annotations

import copy
import gc
import weakref
from collections.abc import Iterator

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, vjp, vmap

import eml_ops

OPS = torch.ops.eml
DTYPE = torch.float64
TOL = {"rtol": 1e-10, "atol": 1e-10}


@pytest.fixture(autouse=True)
def no_vmap_fallback() -> Iterator[None]:
    """Make a missing batching rule an error instead of a slow per-sample loop."""
    enabled = torch._C._functorch._is_vmap_fallback_enabled()
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        yield
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(enabled)


# (input shape, out_features, bias): the shapes of PyTorch's OpInfo samples for
# nn.functional.linear (batch [], [0], [8], [2, 3]; features (3, 4) and (8, 8)) and more:
# zero in/out features and a 3-D batch.
SAMPLES = [
    ((3,), 4, True), ((3,), 4, False), ((0, 3), 4, True), ((8, 3), 4, False),
    ((2, 3, 3), 4, True), ((8,), 8, False), ((2, 3, 8), 8, False), ((8, 8), 8, True),
    ((4, 0), 3, True), ((4, 5), 0, True), ((2, 1, 2, 5), 3, True),
]
SAMPLE_IDS = [f"{'x'.join(map(str, s))}-out{o}-{'bias' if b else 'nobias'}" for s, o, b in SAMPLES]


def make_sample(shape: tuple[int, ...], out: int, bias: bool, seed: int = 0,
                requires_grad: bool = False) -> tuple[torch.Tensor, ...]:
    """(input, weight[, bias]) in float64."""
    generator = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(shape, generator=generator, dtype=DTYPE),
               torch.randn(out, shape[-1], generator=generator, dtype=DTYPE)]
    if bias:
        tensors.append(torch.randn(out, generator=generator, dtype=DTYPE))
    return tuple(t.requires_grad_(requires_grad) for t in tensors)


@pytest.fixture(params=SAMPLES, ids=SAMPLE_IDS)
def sample(request: pytest.FixtureRequest) -> tuple[torch.Tensor, ...]:
    return make_sample(*request.param)


def assert_trees_close(actual: object, expected: object) -> None:
    torch.testing.assert_close(actual, expected, **TOL)


def smooth_loss(linear: object) -> object:
    """A scalar function of (input, weight[, bias]) with non-zero second derivatives."""
    def loss(*args: torch.Tensor) -> torch.Tensor:
        return linear(*args).tanh().sum()
    return loss


def test_vjp(backend: str, sample: tuple[torch.Tensor, ...]) -> None:
    out, pullback = vjp(OPS.linear, *sample)
    expected_out, expected_pullback = vjp(F.linear, *sample)
    cotangent = torch.randn_like(expected_out)
    assert_trees_close(out, expected_out)
    assert_trees_close(pullback(cotangent), expected_pullback(cotangent))


def test_jvp(backend: str, sample: tuple[torch.Tensor, ...]) -> None:
    tangents = tuple(torch.randn_like(t) for t in sample)
    assert_trees_close(jvp(OPS.linear, sample, tangents), jvp(F.linear, sample, tangents))


def test_jvp_with_some_tangents(backend: str) -> None:
    """Tangents for only some arguments: each term of the forward formula on its own."""
    x, w, b = make_sample((2, 3, 5), 4, True)
    for which in [(0,), (1,), (2,), (0, 2), (1, 2)]:
        def restricted(*args: torch.Tensor, linear: object, which: tuple = which) -> torch.Tensor:
            full = [x, w, b]
            for index, arg in zip(which, args, strict=True):
                full[index] = arg
            return linear(*full)
        primals = tuple([x, w, b][i] for i in which)
        tangents = tuple(torch.randn_like(p) for p in primals)
        assert_trees_close(jvp(lambda *a: restricted(*a, linear=OPS.linear), primals, tangents),
                           jvp(lambda *a: restricted(*a, linear=F.linear), primals, tangents))


def test_jacrev_and_jacfwd(backend: str, sample: tuple[torch.Tensor, ...]) -> None:
    argnums = tuple(range(len(sample)))
    expected = jacrev(F.linear, argnums=argnums)(*sample)
    assert_trees_close(jacrev(OPS.linear, argnums=argnums)(*sample), expected)
    assert_trees_close(jacfwd(OPS.linear, argnums=argnums)(*sample), expected)


def test_hessian(backend: str, sample: tuple[torch.Tensor, ...]) -> None:
    argnums = tuple(range(len(sample)))
    actual = hessian(smooth_loss(OPS.linear), argnums=argnums)(*sample)
    expected = hessian(smooth_loss(F.linear), argnums=argnums)(*sample)
    assert_trees_close(actual, expected)


def test_grad_and_grad_of_grad(backend: str, sample: tuple[torch.Tensor, ...]) -> None:
    argnums = tuple(range(len(sample)))
    for transform in [lambda f: grad(f, argnums=argnums),
                      lambda f: grad(lambda *a: grad(f)(*a).sum(), argnums=argnums)]:
        assert_trees_close(transform(smooth_loss(OPS.linear))(*sample),
                           transform(smooth_loss(F.linear))(*sample))


def test_gradcheck_forward_and_batched(backend: str) -> None:
    for shape, out, bias in SAMPLES:
        args = make_sample(shape, out, bias, requires_grad=True)
        assert torch.autograd.gradcheck(OPS.linear, args, check_forward_ad=True,
                                        check_batched_grad=True, check_batched_forward_grad=True)
        assert torch.autograd.gradgradcheck(OPS.linear, args, check_fwd_over_rev=True,
                                            check_rev_over_rev=True, check_batched_grad=True)


def test_gradcheck_linear_forward(backend: str) -> None:
    for shape, out, bias in SAMPLES[:5]:
        args = make_sample(shape, out, bias, requires_grad=True)
        assert torch.autograd.gradcheck(OPS.linear_forward, args, check_forward_ad=True,
                                        check_batched_grad=True, check_batched_forward_grad=True)
        assert torch.autograd.gradgradcheck(OPS.linear_forward, args, check_fwd_over_rev=True)


MASKS = [(True, True, True), (True, False, False), (False, True, False), (False, True, True),
         (False, False, True), (True, True, False)]


@pytest.mark.parametrize("mask", MASKS, ids=lambda m: "".join("1" if v else "0" for v in m))
def test_gradcheck_linear_backward(backend: str, mask: tuple[bool, bool, bool]) -> None:
    """linear_backward's own derivatives, reverse and forward mode, also second order."""
    for shape, out, _ in [((3,), 4, False), ((2, 3, 5), 4, False), ((0, 3), 2, False)]:
        x, w = make_sample(shape, out, False, requires_grad=True)
        g = torch.randn(*shape[:-1], out, dtype=DTYPE, requires_grad=True)

        def backward(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> tuple:
            return tuple(t for t in OPS.linear_backward(g, x, w, list(mask)) if t is not None)

        assert torch.autograd.gradcheck(backward, (g, x, w), check_forward_ad=True,
                                        check_batched_grad=True, check_batched_forward_grad=True)
        assert torch.autograd.gradgradcheck(backward, (g, x, w), check_fwd_over_rev=True)


def test_dual_tensors(backend: str) -> None:
    x, w, b = make_sample((2, 3, 5), 4, True)
    tangents = [torch.randn_like(t) for t in (x, w, b)]
    with fwAD.dual_level():
        duals = [fwAD.make_dual(p, t) for p, t in zip((x, w, b), tangents, strict=True)]
        primal, tangent = fwAD.unpack_dual(OPS.linear(*duals))
    expected = tangents[0] @ w.T + x @ tangents[1].T + tangents[2]
    assert_trees_close(primal, F.linear(x, w, b))
    assert_trees_close(tangent, expected)


def test_reverse_over_forward(backend: str) -> None:
    """The tangent is built from differentiable ops: it can be backpropagated."""
    x, w, b = make_sample((3, 5), 4, True, requires_grad=True)
    dx, dw = torch.randn_like(x), torch.randn_like(w)

    def tangent_sum(linear: object) -> tuple[torch.Tensor, ...]:
        with fwAD.dual_level():
            out = linear(fwAD.make_dual(x, dx), fwAD.make_dual(w, dw), b)
            tangent = fwAD.unpack_dual(out).tangent
        return torch.autograd.grad(tangent.pow(2).sum(), (x, w))

    assert_trees_close(tangent_sum(OPS.linear), tangent_sum(F.linear))


# --- vmap -----------------------------------------------------------------------------------


def batched(tensor: torch.Tensor | None, dim: int | None, size: int) -> torch.Tensor | None:
    """`size` different samples of `tensor` stacked along `dim` (or `tensor` if dim is None)."""
    if tensor is None or dim is None:
        return tensor
    return torch.stack([tensor + i for i in range(size)], dim=dim)


X_DIMS = [None, 0, 1, -1]
W_DIMS = [None, 0, 2]
B_DIMS = [None, 0, "absent"]


@pytest.mark.parametrize("op", [OPS.linear, OPS.linear_forward], ids=["linear", "linear_forward"])
@pytest.mark.parametrize("b_dim", B_DIMS, ids=str)
@pytest.mark.parametrize("w_dim", W_DIMS, ids=str)
@pytest.mark.parametrize("x_dim", X_DIMS, ids=str)
def test_vmap_in_dims(backend: str, op: object, x_dim: int | None, w_dim: int | None,
                      b_dim: int | str | None) -> None:
    for shape in [(5,), (2, 5), (2, 3, 5), (0, 5)]:
        x, w, b = make_sample(shape, 4, True)
        size = 3
        args = [batched(x, x_dim, size), batched(w, w_dim, size)]
        in_dims: list[int | None] = [x_dim, w_dim]
        if b_dim != "absent":
            args.append(batched(b, b_dim, size))
            in_dims.append(b_dim)
        if all(d is None for d in in_dims):
            in_dims[0], args[0] = 0, batched(x, 0, size)
        expected = vmap(F.linear, in_dims=tuple(in_dims))(*args)
        actual = vmap(op, in_dims=tuple(in_dims))(*args)
        assert_trees_close(actual, expected)


@pytest.mark.parametrize("out_dims", [0, 1, -1])
def test_vmap_out_dims_and_nested(backend: str, out_dims: int) -> None:
    x, w, b = make_sample((2, 5), 4, True)
    xs, ws, bs = batched(x, 0, 3), batched(w, 1, 2), batched(b, 0, 2)
    for linear in [OPS.linear, F.linear]:
        inner = vmap(linear, in_dims=(0, None, None), out_dims=out_dims)  # over xs
        outer = vmap(inner, in_dims=(None, 1, 0), out_dims=out_dims)      # over ws and bs
        result = outer(xs, ws, bs)
        if linear is OPS.linear:
            actual = result
        else:
            expected = result
    assert_trees_close(actual, expected)
    # Nested over the same arguments: both levels batch input and weight.
    xss, wss = batched(batched(x, 0, 2), 1, 3), batched(batched(w, 0, 2), 0, 3)
    nested = [vmap(vmap(linear, in_dims=(0, 0)), in_dims=(1, 0))(xss, wss)
              for linear in (OPS.linear, F.linear)]
    assert_trees_close(nested[0], nested[1])


@pytest.mark.parametrize("mask", MASKS, ids=lambda m: "".join("1" if v else "0" for v in m))
@pytest.mark.parametrize("dims", [(0, None, None), (None, 0, None), (None, None, 0), (1, 0, None),
                                  (0, None, 1), (None, 0, 0), (0, 1, 0)], ids=str)
def test_vmap_linear_backward(backend: str, dims: tuple, mask: tuple[bool, bool, bool]) -> None:
    for shape in [(5,), (2, 3, 5), (0, 5)]:
        x, w = make_sample(shape, 4, False)
        g = torch.randn(*shape[:-1], 4, dtype=DTYPE)
        g_dim, x_dim, w_dim = dims
        if len(shape) == 1 and 1 in (g_dim, x_dim):
            g_dim, x_dim = (0 if g_dim == 1 else g_dim), (0 if x_dim == 1 else x_dim)
        args = (batched(g, g_dim, 3), batched(x, x_dim, 3), batched(w, w_dim, 3))
        in_dims = (g_dim, x_dim, w_dim)

        def computed(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> tuple:
            grads = OPS.linear_backward(g, x, w, list(mask))
            assert [t is not None for t in grads] == list(mask)
            return tuple(t for t in grads if t is not None)  # vmap cannot return None

        def reference(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> tuple:
            g2, x2 = g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1])
            grads = (g @ w, g2.T @ x2, g2.sum(0))
            return tuple(t for t, wanted in zip(grads, mask, strict=True) if wanted)

        actual = vmap(computed, in_dims=in_dims)(*args)

        expected = vmap(reference, in_dims=in_dims)(*args)
        assert_trees_close(actual, expected)


def test_vmap_of_bad_input_names_the_op(backend: str) -> None:
    x, w = torch.randn(3, 2, 5), torch.randn(4, 6)
    with pytest.raises(RuntimeError, match=r"eml::linear: in_features mismatch: input of shape "
                                           r"\[2, 5\]"):
        vmap(OPS.linear, in_dims=(0, None))(x, w)
    with pytest.raises(RuntimeError, match=r"eml::linear_backward: grad_output must have shape"):
        vmap(lambda g, x, w: OPS.linear_backward(g, x, w, [True, True, True]),
             in_dims=(0, 0, None))(torch.randn(3, 2, 5), torch.randn(3, 2, 5), torch.randn(4, 5))


def test_vmap_of_grad_is_per_sample_gradients(backend: str) -> None:
    x, w, b = make_sample((6, 5), 4, True)
    targets = torch.randn(6, 4, dtype=DTYPE)

    def loss(w: torch.Tensor, b: torch.Tensor, x: torch.Tensor, t: torch.Tensor,
             linear: object) -> torch.Tensor:
        return (linear(x, w, b).tanh() - t).pow(2).sum()

    per_sample = [vmap(grad(loss, argnums=(0, 1)), in_dims=(None, None, 0, 0, None))(
        w, b, x, targets, linear) for linear in (OPS.linear, F.linear)]
    assert_trees_close(per_sample[0], per_sample[1])
    assert per_sample[0][0].shape == (6, 4, 5)


# An op without a batching rule. Its library lives as long as the process: one destroyed at the
# end of a test leaves torch.ops.eml_test_func.plain dangling, and torch 2.11 then fails to
# import inductor in this process ("'CustomDecompTable' object is not a mapping": building
# its decomposition table walks every op namespace and gets an AttributeError there).
_LIBRARY_WITHOUT_VMAP_RULE = torch.library.Library("eml_test_func", "FRAGMENT")
_LIBRARY_WITHOUT_VMAP_RULE.define("plain(Tensor x) -> Tensor")
_LIBRARY_WITHOUT_VMAP_RULE.impl("plain", lambda x: x.clone(), "CompositeExplicitAutograd")


def test_vmap_when_the_fallback_is_off_really_raises() -> None:
    """The fixture works: an op without a rule fails (so our tests would catch a missing one)."""
    assert not torch._C._functorch._is_vmap_fallback_enabled()
    with pytest.raises(RuntimeError, match="fallback"):
        vmap(torch.ops.eml_test_func.plain)(torch.randn(3, 2))


# --- models ----------------------------------------------------------------------------------


def test_functional_call_and_jacrev_on_converted_model(backend: str) -> None:
    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).double()
    model = eml_ops.replace_linear(copy.deepcopy(reference))
    params = {name: p.detach() for name, p in model.named_parameters()}
    x = torch.randn(4, 5, dtype=DTYPE)

    def jacobians(module: nn.Module) -> dict:
        return jacrev(lambda p: functional_call(module, p, (x,)))(params)

    assert_trees_close(jacobians(model), jacobians(reference))


def test_model_hessian_and_jvp(backend: str) -> None:
    torch.manual_seed(1)
    reference = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)).double()
    model = eml_ops.replace_linear(copy.deepcopy(reference))
    x = torch.randn(3, dtype=DTYPE)
    assert_trees_close(hessian(lambda v: model(v).sum())(x),
                       hessian(lambda v: reference(v).sum())(x))
    v = torch.randn(3, dtype=DTYPE)
    assert_trees_close(jvp(model, (x,), (v,)), jvp(reference, (x,), (v,)))


# --- saved tensors ----------------------------------------------------------------------------


@pytest.mark.parametrize("linear", [eml_ops.linear, F.linear], ids=["eml", "F.linear"])
def test_frozen_weight_does_not_keep_input_alive(backend: str, linear: object) -> None:
    """As with ATen's linear, the input is saved only when the weight needs a gradient."""
    layer = eml_ops.Layer(5, 3, bias=True)
    layer.weight.requires_grad_(False)
    leaf = torch.randn(4, 5, requires_grad=True)
    x = leaf * 2  # an activation: nothing else in the graph holds it
    x_alive = weakref.ref(x)
    y = linear(x, layer.weight, layer.bias)
    del x
    gc.collect()
    assert x_alive() is None  # dL/dX = G · W needs only the weight
    y.sum().backward()
    torch.testing.assert_close(leaf.grad, 2 * torch.ones(4, 3) @ layer.weight)
    torch.testing.assert_close(layer.bias.grad, torch.full((3,), 4.0))


def test_input_saved_only_until_backward(backend: str) -> None:
    layer = eml_ops.Layer(5, 3, bias=True)
    x = torch.randn(4, 5)
    x_alive = weakref.ref(x)
    y = layer(x)
    del x
    gc.collect()
    assert x_alive() is not None  # dL/dW = G^T · X needs it
    y.sum().backward()
    gc.collect()
    assert x_alive() is None  # released after backward


def test_second_backward_needs_retain_graph(backend: str) -> None:
    x, w, b = make_sample((4, 5), 3, True, requires_grad=True)
    y = OPS.linear(x, w, b)
    assert y.grad_fn.name() == "EmlLinearBackward"
    y.sum().backward(retain_graph=True)
    y.sum().backward()
    torch.testing.assert_close(w.grad, 2 * torch.ones(4, 3, dtype=DTYPE).T @ x)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.sum().backward()


def test_frozen_weight_gradients(backend: str) -> None:
    """Each saving pattern gives F.linear's gradients: x only, w only, b only, all."""
    for needs in [(True, False, False), (False, True, False), (False, False, True),
                  (False, True, True), (True, False, True), (True, True, True)]:
        args = [t.detach().requires_grad_(n) for t, n in zip(make_sample((2, 3, 5), 4, True),
                                                              needs, strict=True)]
        g = torch.randn(2, 3, 4, dtype=DTYPE)
        wanted = [t for t in args if t.requires_grad]
        actual = torch.autograd.grad(OPS.linear(*args), wanted, g)
        expected = torch.autograd.grad(F.linear(*args), wanted, g)
        assert_trees_close(actual, expected)


# --- compiled autograd -------------------------------------------------------------------------


@pytest.mark.parametrize("needs", [(True, True, True), (False, True, True), (True, False, True),
                                   (True, True, False), (False, False, True)], ids=str)
def test_compiled_autograd(backend: str, needs: tuple[bool, bool, bool]) -> None:
    """torch._dynamo.compiled_autograd traces our Node into its backward graph."""
    from torch._dynamo import compiled_autograd

    torch._dynamo.reset()
    args = [t.detach().requires_grad_(n)
            for t, n in zip(make_sample((6, 5), 3, True), needs, strict=True)]
    graphs: list[str] = []

    def record(graph_module: torch.fx.GraphModule, *_: object) -> torch.fx.GraphModule:
        graphs.append(graph_module.code)
        return graph_module

    with compiled_autograd._enable(torch.compile(backend=record)):
        OPS.linear(*args).tanh().sum().backward()
    actual = [t.grad for t in args if t.requires_grad]
    wanted = [t for t in args if t.requires_grad]
    expected = torch.autograd.grad(F.linear(*args).tanh().sum(), wanted)
    assert_trees_close(actual, list(expected))
    assert any("EmlLinearBackward" in code for code in graphs)


def test_compiled_autograd_through_linear_backward(backend: str) -> None:
    from torch._dynamo import compiled_autograd

    torch._dynamo.reset()
    x, w = make_sample((6, 5), 3, False, requires_grad=True)
    g = torch.randn(6, 3, dtype=DTYPE, requires_grad=True)

    def loss() -> torch.Tensor:
        return sum(t.square().sum() for t in OPS.linear_backward(g, x, w, [True, True, True]))

    expected = torch.autograd.grad(loss(), (g, x, w))
    with compiled_autograd._enable(torch.compile(backend="eager")):
        loss().backward()
    assert_trees_close([g.grad, x.grad, w.grad], list(expected))
