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

``--runs N`` (``make bench``: 3) times the whole suite N times, one pass after another, so
that the noise of a shared machine and its slow drifts average out. bench.json keeps every
run's rows (field ``run``) and, under ``combined``, per (mode, shape, threads, dtype,
candidate) the geometric means over the runs of the speed-up (each against PyTorch in the same
run) and of GFLOP/s, with the speed-up's min and max across runs. The tables, the plot and the
summary (geometric mean over shapes, worst shape, and the shapes below 1.0x, listed per
backend) are computed from those per-shape means; with one run they are that run's values.

``--dtype float32,bfloat16,float16`` runs every case in each dtype (float32 alone by default;
float64 too): the tables list the dtypes of a shape next to each other, with each backend's
throughput relative to its own float32 throughput, and the plot has one row per dtype.

Results go to ``--out`` (default ``results/``): ``bench.json`` (metadata and raw rows),
``bench.md`` (tables and summary) and ``bench.png`` (speed-up plot); the table and the
summary are also printed. Nothing here asserts anything about speed.

With mode ``forward``, a last table times two Python threads calling at once (one intra-op
thread each), as an inference server's thread pool would: the eager path releases the GIL,
so its throughput should scale as ``F.linear``'s does.

The call-overhead table (on by default, a few seconds; ``--no-overhead`` skips it) times one
call at 1x1x1 and 1x16x16 on one thread in float32, forward and training step: ``F.linear`` /
``nn.Linear`` against ``eml_ops.linear`` / ``eml_ops.Layer`` on each backend and
``torch.ops.eml.linear`` (the dispatcher path of scripted and compiled code), in microseconds
per call and as the difference to PyTorch's, timed like the rest (many calls per sample, the
median of interleaved samples).

``--peers [LIST]`` adds, in the same run, what a CPU user would pick instead of nn.Linear:
torch.compile (Inductor), Inductor with freezing, Inductor max-autotune with its C++ GEMM
template, zentorch (AMD's compile backend; "inactive" where it says it optimises nothing, and
"absent" where it is not installed) and eml_ops under torch.compile (:mod:`.peers`): columns of
the shape tables, and the model table (``--modes models``, on by default with ``--peers``): a
transformer FFN at batch 8 and 256 and a 4-layer BERT encoder, inference and training step,
against the model with nn.Linear in eager mode (:mod:`.models`; ``--quick``: tiny models).
Compilation happens in the untimed first call, with fresh compiler caches; its seconds are
reported.

One job per module: :mod:`.suite` (what is measured), :mod:`.candidates` (the implementations),
:mod:`.peers` (the compiled peers), :mod:`.models` (the model table), :mod:`.timing`,
:mod:`.stats`, :mod:`.report` (tables, bench.md), :mod:`.plot` (bench.png) and :mod:`.cli`
(options, the run, the files).
"""

from __future__ import annotations

from .cli import main

__all__ = ["main"]
