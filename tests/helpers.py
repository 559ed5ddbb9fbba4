"""Helpers the test modules share (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path

import torch

import eml_ops

BACKENDS = eml_ops.available_backends()
# Backends that run our own GEMMs (all but aten).
OWN_BACKENDS = [name for name in BACKENDS if name != "aten"]

# The folder that holds the eml_ops package this process imported (the repository for the
# release build, build/sanitize for the sanitized one); child processes must import the same.
PACKAGE_ROOT = Path(eml_ops.__file__).resolve().parent.parent

# The variables that select what eml_ops runs; a child process gets them only when a test
# sets them, never from whoever started the test run.
SELECTION_VARIABLES = ("EML_OPS_BACKEND", "EML_OPS_ISA", "EML_OPS_BF16")


def tolerance(dtype: torch.dtype, reduction: int) -> dict[str, float]:
    """assert_close tolerances for a sum over `reduction` products in `dtype`."""
    eps = torch.finfo(dtype).eps
    scale = max(1, reduction) ** 0.5
    return {"rtol": 64 * eps * scale, "atol": 64 * eps * scale}


@contextlib.contextmanager
def intra_op_threads(count: int) -> Iterator[int]:
    """torch's intra-op thread count set to `count` for a block, the one before restored."""
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield count
    finally:
        torch.set_num_threads(previous)


def child_environment(**env: str) -> dict[str, str]:
    """The environment for a child process: this one without SELECTION_VARIABLES, with
    PACKAGE_ROOT first on PYTHONPATH (so the child imports this eml_ops), and then `env`."""
    environment = {key: value for key, value in os.environ.items()
                   if key not in SELECTION_VARIABLES}
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(PACKAGE_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    environment.update(env)
    return environment


# Runs in the child: every expression of `calls` on every backend; sends back, per backend,
# what each call raised (["TypeName", message]) or returned (["ok", repr(value)]).
CHILD_CODE = """
import torch
import eml_ops

report = {"file": eml_ops.__file__, "so": eml_ops._C.__file__, "results": {}}
namespace = {"torch": torch, "OPS": torch.ops.eml, "eml_ops": eml_ops}
for name in eml_ops.available_backends():
    eml_ops.set_backend(name)
    outcomes = report["results"][name] = []
    for call in calls:
        try:
            value = eval(call, namespace)
        except Exception as error:
            outcomes.append([type(error).__name__, str(error)])
        else:
            outcomes.append(["ok", repr(value)])
conn.send(report)
conn.close()
"""

_CONTEXT: multiprocessing.context.BaseContext | None = None


def _fork_context() -> multiprocessing.context.BaseContext:
    """A forkserver context whose server has imported torch (once per test process).

    eml_ops is imported by each child, after multiprocessing has given it this process's
    sys.path: the server itself may resolve imports differently (its sys.path starts with the
    working directory), which would load the release build under tests/sanitize.sh.
    """
    global _CONTEXT
    if _CONTEXT is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["torch"])
        _CONTEXT = context
    return _CONTEXT


def run_in_own_process(calls: list[str]) -> dict[str, list[list[str]]]:
    """Run `calls` on every backend in a fresh process; per backend, the outcome of each call.

    Fails the test (not the run) if the process dies, hangs or imported another eml_ops.
    """
    context = _fork_context()
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=exec, args=(CHILD_CODE, {"calls": calls, "conn": sender}))
    process.start()
    sender.close()
    try:
        report = receiver.recv() if receiver.poll(300) else None
    except EOFError:  # the child died before sending
        report = None
    process.join(60)
    if process.exitcode is None:
        process.kill()
        process.join()
    assert process.exitcode == 0, f"{calls}: child exited with {process.exitcode} (crash?)"
    assert report is not None, f"{calls}: child sent no report"
    assert report["file"] == eml_ops.__file__, "child imported another eml_ops"
    assert report["so"] == eml_ops._C.__file__, "child loaded another extension"
    assert sorted(report["results"]) == sorted(BACKENDS)
    return report["results"]
