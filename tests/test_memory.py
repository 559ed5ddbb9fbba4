"""Resident memory stays flat over tens of thousands of training steps on eml_ops.Layer.

Each backend trains in a fresh process, so allocations of other tests do not disturb the
measurement: resident set size (RSS, /proc/self/statm) after a warm-up, then after many more
steps; the growth must stay under a generous bound. A leak of even one small buffer per step
(e.g. a packing workspace, a bias-gradient scratch, a JIT kernel per call) would exceed it:
20,000 steps x 3 ops x >= 2 KiB is already more than 64 MiB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import eml_ops
from tests.helpers import PACKAGE_ROOT, child_environment

WARMUP_STEPS = 2_000
MEASURED_STEPS = 20_000
MAX_GROWTH_MIB = 64

# The child: a small MLP of eml_ops.Layer trained with SGD on batches of a few sizes (so the
# kernels see several shapes, including 1-row and N-D inputs); its middle layer has a frozen
# weight (the autograd kernel then saves no input). Every 50th step also a bad input whose
# exception is caught (error paths must not leak either), a forward-mode jvp and per-sample
# gradients with vmap(grad) (the forward-AD formula and the vmap rules).
CHILD = """
import gc, json, os, sys
import torch
import eml_ops

backend, warmup, measured = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
eml_ops.set_backend(backend)
# One intra-op thread: the step time then does not depend on how busy the machine is
# (spinning pool threads on an oversubscribed machine make steps 10x slower).
torch.set_num_threads(1)
torch.manual_seed(0)
frozen = eml_ops.Layer(48, 48, bias=True)
frozen.weight.requires_grad_(False)
model = torch.nn.Sequential(eml_ops.Layer(32, 48, bias=True), torch.nn.Tanh(), frozen,
                            torch.nn.Tanh(), eml_ops.Layer(48, 10))
optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)
params = dict(model.named_parameters())

def per_sample_loss(params, x, t):
    y = torch.func.functional_call(model, params, (x.unsqueeze(0),))
    return torch.nn.functional.mse_loss(y, t.unsqueeze(0))

batches = [torch.randn(*shape, 32) for shape in [(16,), (1,), (33,), (4, 8), (64,)]]
targets = [torch.randn(*b.shape[:-1], 10) for b in batches]
page = os.sysconf("SC_PAGE_SIZE")

def rss():
    gc.collect()
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * page

def train(steps, offset):
    loss = None
    for step in range(offset, offset + steps):
        x, t = batches[step % len(batches)], targets[step % len(targets)]
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), t)
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            try:
                torch.ops.eml.linear(x, torch.randn(3, 31))
            except RuntimeError as error:
                assert "in_features mismatch" in str(error)
            else:
                raise AssertionError("bad input accepted")
            torch.func.jvp(model, (x,), (torch.ones_like(x),))
            torch.func.vmap(torch.func.grad(per_sample_loss), in_dims=(None, 0, 0))(
                {k: v.detach() for k, v in params.items()}, x.reshape(-1, 32),
                t.reshape(-1, 10))
    return float(loss.detach())

first_loss = train(warmup, 0)
before = rss()
last_loss = train(measured, warmup)
after = rss()
print(json.dumps({"file": eml_ops.__file__, "backend": eml_ops.get_backend(), "before": before,
                  "after": after, "first_loss": first_loss, "last_loss": last_loss}))
"""

MEMORY_BACKENDS = [name for name in ("blocked", "tpp") if name in eml_ops.available_backends()]


@pytest.mark.slow
@pytest.mark.parametrize("backend", MEMORY_BACKENDS)
def test_rss_is_flat_over_training_steps(backend: str) -> None:
    env = child_environment()
    result = subprocess.run(
        [sys.executable, "-c", CHILD, backend, str(WARMUP_STEPS), str(MEASURED_STEPS)],
        cwd=PACKAGE_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    # A negative code is the signal that killed the child (e.g. -11: a segfault in the error
    # path of the bad inputs below, as on the device machine when our library exported a
    # static libstdc++): say so, since stderr is then empty.
    assert result.returncode == 0, (f"child exited with {result.returncode}: "
                                    f"{result.stderr[-4000:]}")
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["file"] == eml_ops.__file__ and report["backend"] == backend
    growth_mib = (report["after"] - report["before"]) / 2**20
    assert growth_mib < MAX_GROWTH_MIB, f"RSS grew by {growth_mib:.1f} MiB: {report}"
    # The steps really trained (the model is fitting random targets: the loss went down).
    assert report["last_loss"] < report["first_loss"], report


def _vm_flags_at(address: int) -> list[str]:
    """The VmFlags of the mapping of this process that holds ``address`` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        first = line.split(maxsplit=1)[0]
        if "-" in first and all(c in "0123456789abcdef-" for c in first):
            start, end = (int(part, 16) for part in first.split("-"))
            inside = start <= address < end
        elif inside and first == "VmFlags:":
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


THP_CONTROL = Path("/sys/kernel/mm/transparent_hugepage")


@pytest.mark.skipif(sys.platform != "linux", reason="transparent huge pages are Linux's")
@pytest.mark.skipif(not THP_CONTROL.exists(),
                    reason=f"no transparent huge pages in this kernel ({THP_CONTROL} is absent)")
@pytest.mark.parametrize("backend", ["blocked", "reference"])
def test_large_fresh_outputs_are_advised_onto_huge_pages(backend: str) -> None:
    """A 64 MiB output and dL/dW (beyond glibc's mmap threshold) get MADV_HUGEPAGE ("hg").

    The flag is set on the mapping whether or not the kernel then finds huge pages, so this
    holds on every Linux kernel built with transparent huge pages (skipped on the others);
    values are checked too.
    """
    import torch

    x, w = torch.randn(4096, 1), torch.randn(4096, 1)
    grad_y, row = torch.randn(1, 4096), torch.randn(1, 4096)
    weight = torch.randn(4096, 4096)
    with eml_ops.use_backend(backend):
        y = eml_ops.linear(x, w)  # 4096 x 4096 from k = 1
        _, grad_w, _ = torch.ops.eml.linear_backward(grad_y, row, weight, [False, True, False])
    torch.testing.assert_close(y, x @ w.t())
    torch.testing.assert_close(grad_w, grad_y.t() @ row)
    for tensor in (y, grad_w):
        assert tensor.nbytes >= 64 << 20
        inside = (tensor.data_ptr() + (4 << 20)) & ~((2 << 20) - 1)  # an aligned 2 MiB page in it
        flags = _vm_flags_at(inside)
        assert "hg" in flags, flags
