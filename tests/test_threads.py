"""Many Python threads in eml:: forward and backward at once; backend switches under load.

The ops release the GIL (torch.ops and the eager path eml_ops.linear / Layer alike), so the
threads really run the kernels concurrently (each also using torch's intra-op pool of 1 or 2
threads). Every result is compared with F.linear's, computed before the threads start.
use_backend is local to the thread: worker threads enter the test's backend themselves.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

import eml_ops
from tests.helpers import BACKENDS, intra_op_threads, tolerance

N_THREADS = 8

# (m, k, n, bias, dtype, input shape prefix): tiny to a few hundred, some N-D, some float64.
SHAPES = [
    (1, 1, 1, False, torch.float32),
    (1, 7, 3, True, torch.float32),
    (5, 16, 9, True, torch.float64),
    (33, 65, 17, False, torch.float32),
    (64, 128, 96, True, torch.float32),
    (3, 257, 2, True, torch.float64),
    (257, 3, 130, False, torch.float32),
    (200, 300, 150, True, torch.float32),
    (96, 111, 64, True, torch.float64),
]


@dataclass
class Case:
    """Inputs and the expected results, computed with F.linear before the threads start."""

    x: torch.Tensor
    w: torch.Tensor
    b: torch.Tensor | None
    grad: torch.Tensor
    expected: list[torch.Tensor]  # y, dL/dx, dL/dw (, dL/db)
    reductions: list[int]

    @property
    def params(self) -> list[torch.Tensor]:
        return [t for t in (self.x, self.w, self.b) if t is not None]


def make_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(1234)
    cases = []
    for index, (m, k, n, with_bias, dtype) in enumerate(SHAPES):
        # Every third case is N-D ([2, m, k]).
        prefix = (2, m) if index % 3 == 2 else (m,)
        x = torch.randn(*prefix, k, generator=gen, dtype=dtype, requires_grad=True)
        w = torch.randn(n, k, generator=gen, dtype=dtype, requires_grad=True)
        b = torch.randn(n, generator=gen, dtype=dtype, requires_grad=True) if with_bias else None
        grad = torch.randn(*prefix, n, generator=gen, dtype=dtype)
        y = F.linear(x, w, b)
        expected = [y.detach(), *torch.autograd.grad(y, [t for t in (x, w, b) if t is not None],
                                                     grad)]
        rows = x.numel() // k
        cases.append(Case(x, w, b, grad, expected, [k, n, rows, rows]))
    return cases


def check(case: Case, use_op: str) -> None:
    """One forward and backward through eml_ops, compared with the expected results."""
    if use_op == "module":
        y = torch.ops.eml.linear(case.x, case.w, case.b)
        got = [y.detach(), *torch.autograd.grad(y, case.params, case.grad)]
    else:  # the two ops directly, without autograd
        y = torch.ops.eml.linear_forward(case.x.detach(), case.w.detach(),
                                         None if case.b is None else case.b.detach())
        mask = [True, True, case.b is not None]
        grads = torch.ops.eml.linear_backward(case.grad, case.x.detach(), case.w.detach(), mask)
        got = [y, *(g for g in grads if g is not None)]
    assert len(got) == len(case.expected)
    reductions = case.reductions[: len(case.expected)]
    for actual, expected, reduction in zip(got, case.expected, reductions, strict=True):
        torch.testing.assert_close(actual, expected, **tolerance(expected.dtype, reduction))


def in_threads(body: Callable[[int], None], stop: threading.Event | None = None,
               n_threads: int = N_THREADS) -> None:
    """Run body(index) on n_threads threads released together; raise the first failure.

    The threads enter the calling thread's use_backend override, if it has one (the choice
    is per thread); otherwise they follow the process default.
    """
    barrier = threading.Barrier(n_threads)
    errors: list[BaseException] = []
    inherited = eml_ops._C.get_thread_backend()

    def worker(index: int) -> None:
        try:
            with eml_ops.use_backend(inherited) if inherited else contextlib.nullcontext():
                barrier.wait()
                body(index)
        except BaseException as error:  # reported to the main thread below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    if stop is not None:
        stop.set()
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    if errors:
        raise errors[0]


def run_threads(cases: list[Case], iterations: int, stop: threading.Event | None = None) -> int:
    """N_THREADS threads, each checking `iterations` cases (shifted per thread); raises the
    first failure of any thread. Returns the number of checks done."""
    done = [0] * N_THREADS

    def body(index: int) -> None:
        for step in range(iterations):
            case = cases[(index * 5 + step) % len(cases)]
            check(case, "module" if (index + step) % 2 else "ops")
            done[index] += 1

    in_threads(body, stop)
    return sum(done)


@pytest.fixture(params=[1, 2])
def num_threads(request: pytest.FixtureRequest) -> Iterator[int]:
    """torch's intra-op thread count during the test (restored afterwards)."""
    with intra_op_threads(request.param) as count:
        yield count


def test_concurrent_forward_and_backward(backend: str, num_threads: int) -> None:
    cases = make_cases()
    iterations = 2 * len(cases) if backend != "reference" else len(cases)
    assert run_threads(cases, iterations) == N_THREADS * iterations
    assert eml_ops.get_backend() == backend


def test_concurrent_training_of_shared_model(backend: str, num_threads: int) -> None:
    # Threads train their own copies of a model and a shared read-only one in parallel:
    # the same parameters read by many backward passes at once.
    torch.manual_seed(0)
    shared = eml_ops.Layer(40, 30, bias=True)
    inputs = [torch.randn(16, 40) for _ in range(N_THREADS)]
    expected_grads = []
    for x in inputs:
        y = F.linear(x, shared.weight, shared.bias)
        expected_grads.append(torch.autograd.grad(y.square().sum(), [shared.weight, shared.bias]))
    def body(index: int) -> None:
        for _ in range(20):
            grads = torch.autograd.grad(shared(inputs[index]).square().sum(),
                                        [shared.weight, shared.bias])
            for got, want in zip(grads, expected_grads[index], strict=True):
                torch.testing.assert_close(got, want, **tolerance(torch.float32, 40))

    in_threads(body)


@pytest.fixture
def restore_selection() -> Iterator[None]:
    """Put the backend and the ISA back as they were."""
    backend, isa = eml_ops.get_backend(), eml_ops._C.get_isa()
    try:
        yield
    finally:
        eml_ops.set_backend(backend)
        eml_ops._C.set_isa(isa)


def test_switching_backend_and_isa_while_threads_compute(num_threads: int,
                                                         restore_selection: None) -> None:
    # One thread keeps switching the backend (and the blocked GEMM's ISA) while eight compute;
    # whatever backend a call ran on, its results must be right, and nothing may crash.
    cases = make_cases()
    # The plain-loop reference backend is slow on the large cases: keep to the small ones.
    small = [c for c in cases if c.x.numel() * c.w.shape[0] <= 64 * 128 * 96]
    isas = eml_ops._C.supported_isas()
    stop = threading.Event()
    switches = [0]
    seen: set[str] = set()

    def switcher() -> None:
        for name, isa in itertools.cycle(itertools.product(BACKENDS, isas)):
            if stop.is_set():
                return
            eml_ops.set_backend(name)
            eml_ops._C.set_isa(isa)
            seen.add(eml_ops.get_backend())
            switches[0] += 1
            stop.wait(0.0005)

    thread = threading.Thread(target=switcher)
    # No use_backend here: the workers follow the process default the switcher keeps changing.
    assert eml_ops._C.get_thread_backend() is None
    thread.start()
    try:
        checks = run_threads(small, 6 * len(small), stop)
    finally:
        stop.set()
        thread.join(timeout=60)
    assert checks == N_THREADS * 6 * len(small)
    assert seen == set(BACKENDS), "the switcher did not visit every backend"
    assert switches[0] >= len(BACKENDS) * len(isas)


# --------------------------------------------------------------------------------------------
# use_backend is local to the thread

# Inputs on which the backends give different float32 results, computed exactly: the
# reference GEMM starts each sum at the bias and adds in order (1e8 + 1 + ... + 1 stays 1e8),
# the others add the bias last (1e8 + 64); in the backward, reference and blocked sum the
# bias gradient in row order (1e8 again), ATen's reduction does not.
SIGNATURE_BACKENDS = ["aten", "reference", "blocked"]


def backend_signature() -> tuple[float, float]:
    """(an output, a bias gradient) of a forward and backward through eml_ops.Layer and
    autograd on the calling thread: they tell the backend that ran apart."""
    layer = eml_ops.Layer(64, 64, bias=True)
    with torch.no_grad():
        layer.weight.fill_(1.0)
        layer.bias.fill_(1e8)
    y = layer(torch.ones(64, 64))
    grad = torch.ones(64, 64)
    grad[0] = 1e8
    y.backward(grad)
    return y[0, 0].item(), layer.bias.grad[1].item()


@pytest.fixture
def signatures(restore_selection: None) -> Iterator[dict[str, tuple[float, float]]]:
    """Each backend's signature, computed on this thread; they must all differ.

    One intra-op thread, so that no backend splits the sums (the result of a split sum would
    depend on the machine's core count).
    """
    with intra_op_threads(1):
        found = {}
        for name in SIGNATURE_BACKENDS:
            with eml_ops.use_backend(name):
                found[name] = backend_signature()
        assert len(set(found.values())) == len(found), f"backends not told apart: {found}"
        yield found


def test_use_backend_is_local_to_the_thread(signatures: dict[str, tuple[float, float]]) -> None:
    # Two threads nest use_backend in opposite orders, in lockstep (both are inside their
    # outer block, then both inside the inner one, ...); a third thread never enters one and
    # must see the process default throughout. Each checks get_backend and which backend
    # really ran its forward and its backward (autograd runs CPU backward on this thread).
    eml_ops.set_backend("blocked")
    orders = [["aten", "reference"], ["reference", "aten"], []]
    barrier = threading.Barrier(len(orders))
    seen: dict[int, list[str]] = {index: [] for index in range(len(orders))}

    def check_current(index: int, expected: str) -> None:
        barrier.wait()  # all threads are at the same nesting step now
        assert eml_ops.get_backend() == expected
        assert backend_signature() == signatures[expected], f"thread {index}: not {expected}"
        seen[index].append(expected)
        barrier.wait()

    def body(index: int) -> None:
        order = orders[index]
        check_current(index, "blocked")
        with eml_ops.use_backend(order[0]) if order else contextlib.nullcontext():
            check_current(index, order[0] if order else "blocked")
            with eml_ops.use_backend(order[1]) if order else contextlib.nullcontext():
                check_current(index, order[1] if order else "blocked")
            check_current(index, order[0] if order else "blocked")
        check_current(index, "blocked")
        assert eml_ops._C.get_thread_backend() is None

    in_threads(body, n_threads=len(orders))
    assert seen[0] == ["blocked", "aten", "reference", "aten", "blocked"]
    assert seen[1] == ["blocked", "reference", "aten", "reference", "blocked"]
    assert seen[2] == ["blocked"] * 5
    assert eml_ops._C.get_process_backend() == "blocked"


def test_set_backend_inside_use_backend_changes_only_the_default(restore_selection: None) -> None:
    eml_ops.set_backend("blocked")
    with eml_ops.use_backend("aten"):
        eml_ops.set_backend("reference")
        assert eml_ops.get_backend() == "aten"  # this thread keeps its block's backend
        other: list[str] = []
        thread = threading.Thread(target=lambda: other.append(eml_ops.get_backend()))
        thread.start()
        thread.join()
        assert other == ["reference"]  # a new thread follows the process default
    assert eml_ops.get_backend() == "reference"


def test_use_backend_in_many_threads_keeps_each_threads_choice(restore_selection: None) -> None:
    # Eight threads enter and leave use_backend blocks at random-ish moments; each must always
    # see its own choice, and the process default must be untouched at the end.
    default = eml_ops._C.get_process_backend()
    cases = make_cases()[:4]

    def body(index: int) -> None:
        for step in range(30):
            name = BACKENDS[(index + step) % len(BACKENDS)]
            with eml_ops.use_backend(name):
                assert eml_ops.get_backend() == name
                check(cases[step % len(cases)], "module")
                assert eml_ops.get_backend() == name

    in_threads(body)
    assert eml_ops._C.get_process_backend() == default


# --------------------------------------------------------------------------------------------
# The eager path releases the GIL


def progress_of_other_thread_during(call: Callable[[], object]) -> int:
    """How many steps a second Python thread makes while this thread runs call().

    The switch interval is set to 100 s, so the interpreter never takes the GIL from a thread
    by itself: the counter advances during call() only if call() releases the GIL.
    """
    count = [0]
    stop = threading.Event()

    def counter() -> None:
        while not stop.is_set():
            count[0] += 1
            time.sleep(0)  # releases the GIL, so this thread never holds it for long

    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    thread = threading.Thread(target=counter)
    try:
        thread.start()
        while count[0] == 0:  # the counter is running
            time.sleep(0.001)
        before = count[0]
        result = call()
        progress = count[0] - before
        del result  # (freeing a tensor may hand the GIL over once: not counted)
        return progress
    finally:
        stop.set()
        thread.join(timeout=60)
        sys.setswitchinterval(interval)


def test_eager_path_releases_the_gil_while_the_kernel_runs(restore_selection: None) -> None:
    # A GEMM of a few tenths of a second (the reference loops), through every eager entry.
    x, w, b = torch.randn(256, 512), torch.randn(512, 512), torch.randn(512)
    layer = eml_ops.Layer(512, 512, bias=True)
    # The controls: calls that hold the GIL throughout (Python, and the course's C++ loops,
    # bound without releasing it) let the counter make no progress (on a free-threaded
    # Python without a GIL, everything makes progress).
    if getattr(sys, "_is_gil_enabled", lambda: True)():
        assert progress_of_other_thread_during(lambda: sum(range(5_000_000))) == 0
        assert progress_of_other_thread_during(
            lambda: eml_ops._C.course.loops.forward(x, w)) == 0
    with eml_ops.use_backend("reference"):
        for call in [lambda: eml_ops.linear(x, w, b), lambda: layer(x),
                     lambda: eml_ops._C.linear(x, w, b)]:
            assert progress_of_other_thread_during(call) > 0
