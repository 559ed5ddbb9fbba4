"""``--modes compressed``: inference with compressed weights on a stack of linear layers.

A stack of ``layers`` square ``features x features`` layers (default four 4096 x 4096: 256 MB
of float32 weights, more than any L3, so that every call reads the weights from memory),
forward only under ``torch.inference_mode``, per batch size and thread count. Candidates:
nn.Linear float32 (the baseline), eml float32 (:func:`eml_ops.replace_linear`), eml with
int8 / bfloat16 / float16 weights (:func:`eml_ops.compress_weights`), and where installed
torchao's ``Int8WeightOnlyConfig`` and ``torch.ao.quantization.quantize_dynamic`` (fbgemm).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

import eml_ops

from .candidates import Candidate
from .timing import measure

BATCHES = (1, 8, 32, 256)
BASELINE = "nn.Linear float32"


def stack(features: int, layers: int, seed: int) -> nn.Module:
    """``layers`` nn.Linear(features, features) in a Sequential, seeded weights."""
    torch.manual_seed(seed)
    return nn.Sequential(*[nn.Linear(features, features) for _ in range(layers)]).eval()


def _torchao_int8(model: nn.Module) -> nn.Module | None:
    try:
        from torchao.quantization import Int8WeightOnlyConfig, quantize_
    except ImportError:
        return None
    quantized = copy.deepcopy(model)
    quantize_(quantized, Int8WeightOnlyConfig())
    return quantized


def _fbgemm_dynamic(model: nn.Module) -> nn.Module | None:
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return None
    with warnings.catch_warnings():  # torch.ao.quantization is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {nn.Linear},
                                                      dtype=torch.qint8)


def models(base: nn.Module) -> dict[str, nn.Module]:
    """Every candidate model built from ``base`` (the float32 stack), by candidate name."""
    built: dict[str, nn.Module | None] = {
        BASELINE: base,
        "eml float32": eml_ops.replace_linear(copy.deepcopy(base)),
        "eml int8": eml_ops.compress_weights(copy.deepcopy(base), torch.int8),
        "eml bfloat16 weights": eml_ops.compress_weights(copy.deepcopy(base), torch.bfloat16),
        "eml float16 weights": eml_ops.compress_weights(copy.deepcopy(base), torch.float16),
        "torchao int8 weight-only": _torchao_int8(base),
        "quantize_dynamic (fbgemm)": _fbgemm_dynamic(base),
    }
    return {name: model for name, model in built.items() if model is not None}


def _candidate(name: str, model: nn.Module, x: torch.Tensor) -> Candidate:
    def run() -> torch.Tensor:
        with torch.inference_mode():
            return model(x)

    return Candidate(name=name, backend=None, run=run, result=lambda: [run()])


def bench(
    features: int = 4096, layers: int = 4, batches: Sequence[int] = BATCHES,
    threads: Sequence[int] = (1, 2), repeats: int = 5, min_time: float = 0.05, seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, object]]:
    """Per (threads, batch): each candidate's median seconds per call and speed-up."""
    candidates_models = models(stack(features, layers, seed))
    results = []
    previous = torch.get_num_threads()
    try:
        for thread_count in threads:
            torch.set_num_threads(thread_count)
            for batch in batches:
                if progress is not None:
                    progress(f"compressed: batch {batch}, {thread_count} thread(s)")
                x = torch.randn(batch, features, generator=torch.Generator().manual_seed(seed))
                candidates = [_candidate(n, m, x) for n, m in candidates_models.items()]
                samples = measure(candidates, repeats, min_time)["samples"]
                medians = {n: sorted(s)[len(s) // 2] for n, s in samples.items()}
                for name, seconds in medians.items():
                    results.append({
                        "threads": thread_count, "batch": batch, "candidate": name,
                        "seconds": seconds, "speedup": medians[BASELINE] / seconds,
                    })
    finally:
        torch.set_num_threads(previous)
    return results


def markdown(results: Sequence[dict[str, object]], features: int, layers: int) -> str:
    """Format the results as a markdown table.

    One row per batch, one column per candidate: speed-ups over the baseline on the first
    thread count, then in brackets on the others (each over the baseline on as many threads).
    """
    names = list(dict.fromkeys(str(r["candidate"]) for r in results))
    thread_counts = sorted({int(r["threads"]) for r in results})
    batches = sorted({int(r["batch"]) for r in results})
    speedup = {(r["candidate"], r["batch"], r["threads"]): r["speedup"] for r in results}
    baseline_ms = {(r["batch"], r["threads"]): 1e3 * float(r["seconds"])
                   for r in results if r["candidate"] == BASELINE}
    lines = [
        f"Stack of {layers} x ({features}x{features}) layers, forward, inference_mode; "
        f"speed-up over {BASELINE} (threads {', '.join(map(str, thread_counts))}; the first "
        "count outside brackets)",
        "",
        "| batch | " + " | ".join(names) + f" | {BASELINE} ms |",
        "| --- " * (len(names) + 2) + "|",
    ]
    for batch in batches:
        cells = []
        for name in names:
            values = [f"{speedup[(name, batch, t)]:.2f}x" for t in thread_counts
                      if (name, batch, t) in speedup]
            cells.append(values[0] + "".join(f" ({v})" for v in values[1:]))
        times = [f"{baseline_ms[(batch, t)]:.2f}" for t in thread_counts
                 if (batch, t) in baseline_ms]
        lines.append(f"| {batch} | " + " | ".join(cells) + f" | {' / '.join(times)} |")
    return "\n".join(lines)


def main(out: Path, threads: Sequence[int], repeats: int, min_time: float, seed: int,
         features: int = 4096, layers: int = 4) -> str:
    """Run :func:`bench`, write ``compressed.md`` into ``out`` and return the table."""
    results = bench(features, layers, threads=threads, repeats=repeats, min_time=min_time,
                    seed=seed, progress=lambda text: print(text, flush=True))
    table = markdown(results, features, layers)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compressed.md").write_text(table + "\n")
    return table
