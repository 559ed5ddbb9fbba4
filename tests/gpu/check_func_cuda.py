"""GPU check of issue 9: opcheck, autograd, forward AD, torch.func and vmap on CUDA tensors.

Plain python3 (no pytest needed), run from the repository root after building eml_ops:

    MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps -e .
    python3 tests/gpu/check_func_cuda.py

Prints one PASS/FAIL line per check and a summary; exits 1 if any check failed (or there is
no CUDA device), 0 otherwise. On CUDA the eml:: ops run their ATen kernels
(CompositeExplicitAutograd); the autograd kernel (a C++ torch::autograd::Node), the forward
AD formulas and the vmap rules are the same as on CPU.
"""

from __future__ import annotations

import copy
import gc
import os
import sys
import time
import traceback
import weakref
from collections.abc import Callable

import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, vjp, vmap

import eml_ops

OPS = torch.ops.eml
# EML_OPS_CHECK_DEVICE=cpu runs the same checks on CPU (a dry run of this script).
DEVICE = os.environ.get("EML_OPS_CHECK_DEVICE", "cuda")
TOL64 = {"rtol": 1e-9, "atol": 1e-9}
MASKS = [[True, True, True], [True, False, False], [False, True, True], [False, False, True]]
# (input shape, out_features, bias): 1-D, 2-D, N-D, zero rows, zero in/out features.
SAMPLES = [((5,), 3, False), ((4, 5), 3, True), ((2, 3, 5), 4, True), ((0, 5), 3, True),
           ((4, 0), 3, True), ((4, 5), 0, False)]

results: list[tuple[str, bool, str]] = []


def check(name: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Run the decorated function right away as one check; record and print PASS/FAIL."""
    def decorate(body: Callable[[], None]) -> Callable[[], None]:
        start = time.perf_counter()
        try:
            body()
        except Exception as error:  # noqa: BLE001  (every failure is reported, none stops us)
            detail = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
            results.append((name, False, detail))
            print(f"FAIL  {name}: {detail}", flush=True)
            traceback.print_exc(limit=3)
        else:
            results.append((name, True, ""))
            print(f"PASS  {name} ({time.perf_counter() - start:.1f} s)", flush=True)
        return body
    return decorate


def sample(shape: tuple[int, ...], out: int, bias: bool, dtype: torch.dtype = torch.float64,
           requires_grad: bool = False) -> tuple[torch.Tensor, ...]:
    tensors = [torch.randn(shape, dtype=dtype, device=DEVICE),
               torch.randn(out, shape[-1], dtype=dtype, device=DEVICE)]
    if bias:
        tensors.append(torch.randn(out, dtype=dtype, device=DEVICE))
    return tuple(t.requires_grad_(requires_grad) for t in tensors)


def opcheck_all(op: object, args: tuple) -> None:
    outcome = torch.library.opcheck(op, args)
    failed = {test: status for test, status in outcome.items() if status != "SUCCESS"}
    assert not failed, f"{op}: {failed}"


def main() -> int:
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("FAIL  no CUDA device")
        return 1
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE
    print(f"torch {torch.__version__}, {name}, eml_ops from "
          f"{eml_ops.__file__}, backends {eml_ops.available_backends()}")
    torch.manual_seed(0)
    torch._C._functorch._set_vmap_fallback_enabled(False)  # a missing vmap rule must fail

    for requires_grad in (False, True):
        tag = "requires_grad" if requires_grad else "no grad"

        @check(f"opcheck eml::linear, {DEVICE}, {tag}")
        def _(requires_grad: bool = requires_grad) -> None:
            for shape, out, bias in SAMPLES:
                opcheck_all(OPS.linear, sample(shape, out, bias, torch.float32, requires_grad))

        @check(f"opcheck eml::linear_forward, {DEVICE}, {tag}")
        def _(requires_grad: bool = requires_grad) -> None:
            for shape, out, bias in SAMPLES:
                opcheck_all(OPS.linear_forward,
                            sample(shape, out, bias, torch.float32, requires_grad))

        @check(f"opcheck eml::linear_backward, {DEVICE}, {tag}")
        def _(requires_grad: bool = requires_grad) -> None:
            for shape, out, _ in SAMPLES:
                x, w = sample(shape, out, False, torch.float32, requires_grad)
                g = torch.randn(*shape[:-1], out, device=DEVICE, requires_grad=requires_grad)
                for mask in MASKS:
                    opcheck_all(OPS.linear_backward, (g, x, w, mask))

    @check("forward and backward equal F.linear (float32, float64, bfloat16)")
    def _() -> None:
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            for shape, out, bias in SAMPLES:
                args = sample(shape, out, bias, dtype, requires_grad=True)
                y, expected = OPS.linear(*args), F.linear(*args)
                assert y.device.type == DEVICE and y.dtype == dtype
                torch.testing.assert_close(y, expected)
                g = torch.randn_like(expected)
                torch.testing.assert_close(torch.autograd.grad(y, args, g),
                                           torch.autograd.grad(expected, args, g))

    @check("gradcheck (forward AD, batched grads) and gradgradcheck (fwd-over-rev), float64")
    def _() -> None:
        for shape, out, bias in SAMPLES:
            args = sample(shape, out, bias, requires_grad=True)
            for op in (OPS.linear, OPS.linear_forward):
                assert torch.autograd.gradcheck(op, args, check_forward_ad=True,
                                                check_batched_grad=True,
                                                check_batched_forward_grad=True)
                assert torch.autograd.gradgradcheck(op, args, check_fwd_over_rev=True)

    @check("gradcheck and gradgradcheck of eml::linear_backward, float64")
    def _() -> None:
        x, w = sample((2, 3, 5), 4, False, requires_grad=True)
        g = torch.randn(2, 3, 4, dtype=torch.float64, device=DEVICE, requires_grad=True)
        for mask in MASKS:
            def backward(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                         mask: list[bool] = mask) -> tuple:
                return tuple(t for t in OPS.linear_backward(g, x, w, mask) if t is not None)
            assert torch.autograd.gradcheck(backward, (g, x, w), check_forward_ad=True,
                                            check_batched_grad=True)
            assert torch.autograd.gradgradcheck(backward, (g, x, w), check_fwd_over_rev=True)

    @check("torch.func vjp, jvp, jacrev, jacfwd, hessian equal F.linear's")
    def _() -> None:
        for shape, out, bias in SAMPLES:
            args = sample(shape, out, bias)
            argnums = tuple(range(len(args)))
            tangents = tuple(torch.randn_like(t) for t in args)
            torch.testing.assert_close(jvp(OPS.linear, args, tangents),
                                       jvp(F.linear, args, tangents), **TOL64)
            (_, pull), (y_ref, pull_ref) = vjp(OPS.linear, *args), vjp(F.linear, *args)
            cotangent = torch.randn_like(y_ref)
            torch.testing.assert_close(pull(cotangent), pull_ref(cotangent), **TOL64)
            expected = jacrev(F.linear, argnums=argnums)(*args)
            torch.testing.assert_close(jacrev(OPS.linear, argnums=argnums)(*args), expected,
                                       **TOL64)
            torch.testing.assert_close(jacfwd(OPS.linear, argnums=argnums)(*args), expected,
                                       **TOL64)
            losses = [lambda *a, f=f: f(*a).tanh().sum() for f in (OPS.linear, F.linear)]
            torch.testing.assert_close(hessian(losses[0], argnums=argnums)(*args),
                                       hessian(losses[1], argnums=argnums)(*args), **TOL64)

    @check("dual tensors (forward-mode AD) and reverse-over-forward")
    def _() -> None:
        x, w, b = sample((3, 5), 4, True, requires_grad=True)
        dx, dw, db = (torch.randn_like(t) for t in (x, w, b))
        tangents = []
        for op in (OPS.linear, F.linear):
            with fwAD.dual_level():
                out = op(fwAD.make_dual(x, dx), fwAD.make_dual(w, dw), fwAD.make_dual(b, db))
                tangent = fwAD.unpack_dual(out).tangent
            tangents.append((tangent, torch.autograd.grad(tangent.square().sum(), (x, w))))
        torch.testing.assert_close(tangents[0], tangents[1], **TOL64)

    @check("vmap: in_dims over input, weight, bias (all combinations), nested, out_dims")
    def _() -> None:
        x, w, b = sample((2, 5), 4, True)

        def stacked(t: torch.Tensor, dim: int | None) -> torch.Tensor:
            return t if dim is None else torch.stack([t + i for i in range(3)], dim)

        for x_dim in (None, 0, 1, -1):
            for w_dim in (None, 0, 2):
                for b_dim in (None, 0):
                    if x_dim is w_dim is b_dim is None:
                        continue
                    args = (stacked(x, x_dim), stacked(w, w_dim), stacked(b, b_dim))
                    dims = (x_dim, w_dim, b_dim)
                    for op in (OPS.linear, OPS.linear_forward):
                        torch.testing.assert_close(vmap(op, in_dims=dims, out_dims=1)(*args),
                                                   vmap(F.linear, in_dims=dims, out_dims=1)(*args),
                                                   **TOL64)
        xs, ws = stacked(stacked(x, 0), 1), stacked(stacked(w, 0), 0)
        nested = [vmap(vmap(f, in_dims=(0, 0)), in_dims=(1, 0))(xs, ws)
                  for f in (OPS.linear, F.linear)]
        torch.testing.assert_close(nested[0], nested[1], **TOL64)

    @check("per-sample gradients vmap(grad) of a converted MLP, and functional_call + jacrev")
    def _() -> None:
        reference = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
        reference = reference.to(DEVICE, torch.float64)
        model = eml_ops.replace_linear(copy.deepcopy(reference))
        params = {k: v.detach() for k, v in model.named_parameters()}
        x = torch.randn(6, 5, dtype=torch.float64, device=DEVICE)
        t = torch.randn(6, 3, dtype=torch.float64, device=DEVICE)

        def per_sample(module: nn.Module) -> dict:
            def loss(p: dict, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
                return (functional_call(module, p, (x,)) - t).square().sum()
            return vmap(grad(loss), in_dims=(None, 0, 0))(params, x, t)

        torch.testing.assert_close(per_sample(model), per_sample(reference), **TOL64)
        jac = [jacrev(lambda p, m=m: functional_call(m, p, (x,)))(params)
               for m in (model, reference)]
        torch.testing.assert_close(jac[0], jac[1], **TOL64)

    @check("saved tensors: frozen weight keeps no input; second backward raises")
    def _() -> None:
        layer = eml_ops.Layer(5, 3, bias=True, device=DEVICE)
        layer.weight.requires_grad_(False)
        x = torch.randn(4, 5, device=DEVICE, requires_grad=True) * 2
        alive = weakref.ref(x)
        y = layer(x)
        del x
        gc.collect()
        assert alive() is None, "input kept alive although the weight is frozen"
        y.sum().backward()
        try:
            y.sum().backward()
        except RuntimeError as error:
            assert "second time" in str(error)
        else:
            raise AssertionError("a second backward without retain_graph did not raise")

    @check("compiled autograd (torch._dynamo.compiled_autograd) through both Nodes")
    def _() -> None:
        from torch._dynamo import compiled_autograd

        x, w, b = sample((6, 5), 3, True, requires_grad=True)
        g = torch.randn(6, 3, dtype=torch.float64, device=DEVICE, requires_grad=True)

        def loss() -> torch.Tensor:
            grads = OPS.linear_backward(g, x, w, [True, True, True])
            return OPS.linear(x, w, b).tanh().sum() + sum(t.square().sum() for t in grads)

        expected = torch.autograd.grad(loss(), (g, x, w, b))
        with compiled_autograd._enable(torch.compile(backend="eager")):
            loss().backward()
        torch.testing.assert_close([g.grad, x.grad, w.grad, b.grad], list(expected), **TOL64)

    @check("autocast (bfloat16): forward and backward")
    def _() -> None:
        layer = eml_ops.Layer(8, 4, bias=True, device=DEVICE)
        x = torch.randn(3, 8, device=DEVICE, requires_grad=True)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            y = layer(x)
        assert y.dtype == torch.bfloat16
        y.float().sum().backward()
        assert x.grad is not None and layer.weight.grad is not None

    passed = sum(ok for _, ok, _ in results)
    print(f"\nSUMMARY: {passed}/{len(results)} checks passed")
    for name, ok, detail in results:
        if not ok:
            print(f"  FAILED: {name}: {detail}")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
