"""Benchmark: every GEMM backend of ``eml::linear`` against PyTorch's own linear layer.

``python -m eml_ops bench [options]`` times, in one run, ``torch.nn.functional.linear``
(mode ``forward``) or a ``torch.nn.Linear`` training step (mode ``train``: forward plus the
gradients of input, weight and bias; gradients are set to None at the start of every step,
inside the timed region, for all candidates alike) and the same work through ``eml_ops`` on
each selected backend (``eml_ops.linear`` / ``eml_ops.Layer``). For every (mode, shape,
threads) the candidates share the same input tensors, are warmed up, get an inner repeat
count calibrated once so that one sample lasts at least ``--min-time`` seconds, and are then
timed round-robin (baseline, backend A, backend B, ...) ``--repeats`` times. The reported
time per call is the median over the samples.

``--dtype float32,bfloat16,float16`` runs every case in each dtype (float32 alone by default;
float64 too): the tables list the dtypes of a shape next to each other, with each backend's
throughput relative to its own float32 throughput, and the plot has one row per dtype.

Results go to ``--out`` (default ``results/``): ``bench.json`` (metadata and raw rows),
``bench.md`` (tables and summary) and ``bench.png`` (speed-up plot); the table and the
summary are also printed. Nothing here asserts anything about speed.

With mode ``forward``, a last table times two Python threads calling at once (one intra-op
thread each), as an inference server's thread pool would: the eager path releases the GIL,
so its throughput should scale as ``F.linear``'s does.

One job per module: :mod:`.suite` (what is measured), :mod:`.candidates` (the implementations),
:mod:`.timing`, :mod:`.stats`, :mod:`.report` (tables, bench.md), :mod:`.plot` (bench.png) and
:mod:`.cli` (options, the run, the files).
"""

from __future__ import annotations

from .cli import main

__all__ = ["main"]
