"""Every bad input raises a clean RuntimeError naming the op and the shapes, on CPU and CUDA.

For the GPU machine (torch 2.11.0+cu130, a compiler that links libstdc++.a), where streaming
IntArrayRef into TORCH_CHECK used to segfault. Run from the repository root after building
eml_ops there:

    MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps -e .
    python3 tests/gpu/check_errors_cuda.py            # --allow-no-cuda for a CPU-only dry run

The bad-input matrix is the one of tests/test_reliability.py (FORWARD_CASES and
BACKWARD_CASES, a superset of tests/test_errors.py's cases), imported from there, plus
CPU/CUDA device mixes. Each case runs in a process of its own, on tensors created on the
CPU (every backend), on CUDA and on the meta device, through torch.ops.eml.linear (with and
without grad), torch.ops.eml.linear_forward, eml_ops.linear and torch.ops.eml.linear_backward
(four masks); and the course's C++ functions on the CPU. A case passes when every call
raised a RuntimeError whose message starts with the op's name and matches the expected text;
a process killed by a signal fails its case and nothing else. Prints PASS/FAIL per case and
a summary; exit code 1 if anything failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY))

import torch  # noqa: E402

from tests.test_reliability import BACKWARD_CASES, FORWARD_CASES  # noqa: E402

# Runs in the child: every call of the case on every backend (CPU) or once (other devices),
# with tensors created on `device` unless a call names its own device. Prints one JSON line:
# per backend, [exception type, message] or ["ok", repr] per call.
CHILD = r"""
import json, sys
import torch
import eml_ops

case = json.loads(sys.argv[1])
namespace = {"torch": torch, "OPS": torch.ops.eml, "eml_ops": eml_ops}
backends = eml_ops.available_backends() if case["device"] == "cpu" else [eml_ops.get_backend()]
results = {}
for backend in backends:
    outcomes = results[backend] = []
    with eml_ops.use_backend(backend), torch.device(case["device"]):
        for call in case["calls"]:
            try:
                value = eval(call, namespace)
            except Exception as error:
                outcomes.append([type(error).__name__, str(error).splitlines()[0]])
            else:
                outcomes.append(["ok", repr(value)[:200]])
print(json.dumps({"file": eml_ops.__file__, "results": results}))
"""

MASKS = ["[True, True, True]", "[True, False, False]", "[False, True, False]",
         "[False, False, True]"]

# Device mixes that only a machine with CUDA has: (id, forward or backward args, message).
CUDA_FORWARD_CASES = [
    ("device_weight_cpu", "torch.randn(4, 5), torch.randn(3, 5, device='cpu')",
     r"input and weight must be on the same device, got input on cuda:0 and weight on cpu"),
    ("device_input_cpu", "torch.randn(4, 5, device='cpu'), torch.randn(3, 5)",
     r"input and weight must be on the same device, got input on cpu and weight on cuda:0"),
    ("device_bias_cpu", "torch.randn(4, 5), torch.randn(3, 5), torch.randn(3, device='cpu')",
     r"bias must be on the device of weight, got bias on cpu and weight on cuda:0"),
]
CUDA_BACKWARD_CASES = [
    ("device_grad_cpu", "torch.randn(4, 3, device='cpu'), torch.randn(4, 5), torch.randn(3, 5)",
     r"grad_output must be on the device of input, got cpu and cuda:0"),
]
# The course's C++ functions (seed 6.3) check their input too: (id, call, message), CPU only.
COURSE_CASES = [
    ("strided", "eml_ops._C.course.loops.forward(torch.randn(3, 4).t(), torch.randn(2, 4))",
     r"^eml_ops.linear_cpp forward: input must be a contiguous 2-D tensor, got shape \[4, 3\] "
     r"with strides \[1, 4\]"),
    ("mismatch", "eml_ops._C.course.loops.forward(torch.randn(3, 4), torch.randn(2, 5))",
     r"^eml_ops.linear_cpp forward: input \[3, 4\] Float does not fit weight \[2, 5\] Float"),
    ("backward", "eml_ops._C.course.loops.backward(torch.randn(3, 4), torch.randn(3, 4), "
     "torch.randn(2, 5))",
     r"^eml_ops.linear_cpp backward: grad \[3, 4\], input \[3, 4\] and weights \[2, 5\]"),
    ("dtype", "eml_ops._C.course.loops.forward(torch.randn(3, 4).half(), torch.randn(2, 4))",
     r"^eml_ops.linear_cpp forward: input must be float32 or float64, got Half"),
]


@dataclass
class Case:
    """One process: calls with the expected message of each, on tensors of one device."""

    name: str
    device: str
    calls: list[str]
    patterns: list[str]


def forward_case(name: str, device: str, args: str, message: str) -> Case:
    grad_args = args.replace(")", ").requires_grad_()", 1)
    return Case(name, device,
                [f"OPS.linear({args})", f"OPS.linear({grad_args})",
                 f"OPS.linear_forward({args})", f"eml_ops.linear({args})"],
                [f"^eml::linear: {message}", f"^eml::linear: {message}",
                 f"^eml::linear_forward: {message}", f"^eml::linear: {message}"])


def backward_case(name: str, device: str, args: str, message: str) -> Case:
    return Case(name, device, [f"OPS.linear_backward({args}, {mask})" for mask in MASKS],
                [f"^eml::linear_backward: {message}"] * len(MASKS))


def on_device(message: str, device: str) -> str:
    """The expected message for tensors created on `device` instead of the CPU."""
    return message.replace("cpu", "cuda:0" if device == "cuda" else device)


def all_cases(devices: list[str]) -> list[Case]:
    cases = []
    for device in devices:
        for kind, table, extra in (("forward", FORWARD_CASES, CUDA_FORWARD_CASES),
                                   ("backward", BACKWARD_CASES, CUDA_BACKWARD_CASES)):
            make = forward_case if kind == "forward" else backward_case
            for name, args, message in table:
                if device == "meta" and "meta" in args:
                    continue  # a device mix with meta: no mix when everything is on meta
                cases.append(make(f"{kind}/{name}", device, args, on_device(message, device)))
            if device == "cuda":
                cases += [make(f"{kind}/{name}", device, args, message)
                          for name, args, message in extra]
    if "cpu" in devices:
        cases += [Case(f"course/{name}", "cpu", [call], [message])
                  for name, call, message in COURSE_CASES]
    return cases


def run_case(case: Case) -> tuple[bool, str]:
    """Run one case in a fresh interpreter; (passed, what went wrong or a summary)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPOSITORY), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("EML_OPS_BACKEND", None)
    payload = json.dumps({"device": case.device, "calls": case.calls})
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, payload], cwd=REPOSITORY, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        return False, "timed out after 300 s (hang?)"
    if done.returncode < 0:
        return False, f"killed by signal {-done.returncode} (crash); stderr: {done.stderr[-500:]}"
    if done.returncode != 0:
        return False, f"exit code {done.returncode}; stderr: {done.stderr[-1000:]}"
    report = json.loads(done.stdout.splitlines()[-1])
    if Path(report["file"]).resolve() != REPOSITORY / "eml_ops" / "__init__.py":
        return False, f"the child imported another eml_ops: {report['file']}"
    results = report["results"]
    problems = []
    for backend, outcomes in results.items():
        for call, pattern, (kind, message) in zip(case.calls, case.patterns, outcomes,
                                                  strict=True):
            if kind != "RuntimeError" or not re.search(pattern, message):
                problems.append(f"[{backend}] {call} -> {kind}: {message!r} (want {pattern!r})")
    if problems:
        return False, "; ".join(problems)
    return True, f"{len(case.calls)} calls x {len(results)} backend(s)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allow-no-cuda", action="store_true",
                        help="run the CPU and meta cases only when there is no GPU (dry run)")
    parser.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1))
    args = parser.parse_args()
    has_cuda = torch.cuda.is_available()
    print(f"torch {torch.__version__}, CUDA available: {has_cuda}, "
          f"device: {torch.cuda.get_device_name(0) if has_cuda else '-'}")
    if not has_cuda and not args.allow_no_cuda:
        print("FAIL: no CUDA device (pass --allow-no-cuda for a CPU-only dry run)")
        return 1
    devices = ["cpu", "meta"] + (["cuda"] if has_cuda else [])
    cases = all_cases(devices)
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for case, (passed, detail) in zip(cases, pool.map(run_case, cases), strict=True):
            failed += not passed
            print(f"{'PASS' if passed else 'FAIL'} {case.device:<4} {case.name}: {detail}",
                  flush=True)
    print(f"\nSUMMARY check_errors_cuda: {len(cases) - failed} passed, {failed} failed "
          f"of {len(cases)} cases on {', '.join(devices)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
