"""The model table: whole models with nn.Linear (eager), with eml_ops, and with the peers.

Models (``MODELS``; ``--quick``: the same kinds tiny, ``QUICK_MODELS``):

* ``ffn8``, ``ffn256``: a transformer FFN, two blocks of Linear(1024, 4096), GELU,
  Linear(4096, 1024), on a batch of 8 and of 256 rows;
* ``bert``: a 4-layer BERT encoder, transformers' ``BertModel`` built from a ``BertConfig``
  (nothing downloaded: hidden 768, 12 heads, intermediate 3072, dropout off so that every
  candidate computes the same), no pooler, fed embeddings (``inputs_embeds``) of 2 sequences of
  128 tokens; the output is the last hidden state.

Per (model, mode, threads), mode ``inference`` (eval, no grad) or ``train`` (a training
step: gradients set to None, forward, backward of a fixed output gradient; the input requires
grad, as a block inside a network does), float32, the candidates are: the model as built
(``nn.Linear eager``, the baseline: 1.00x), ``eml eager`` (a copy converted by
:func:`eml_ops.replace_linear`, on the default backend) and the selected peers
(:mod:`.peers`). They are timed as the shape suite's are (``timing.time_case``: warm-up,
compilation and outputs first, then interleaved samples, the median). GFLOP/s count the
linear layers' flops only (2 x tokens x in x out each, three times that in a training step).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import eml_ops

from . import peers, timing
from .candidates import Candidate, Step, inference_step, train_step
from .report import markdown_table, text_table
from .stats import computed_wrong, geomean, speedup_text
from .suite import Combined, Config, Row, Shape

# The --modes entry that asks for the model table.
MODE = "models"
MODEL_MODES = ("inference", "train")
BASELINE = "nn.Linear eager"
EML = "eml eager"
# Flops of a step as a multiple of the forward's.
MODEL_FLOP_FACTOR = {"inference": 1, "train": 3}


@dataclass(frozen=True)
class ModelSpec:
    """A model of the table: kind ``ffn`` or ``bert`` and its sizes."""

    key: str
    kind: str
    width: int  # the model's input and output features (d_model, BERT's hidden size)
    inner: int  # the FFN's inner width; BERT's intermediate size
    layers: int  # FFN blocks; BERT encoder layers
    batch: int
    seq: int = 1  # tokens per sequence (BERT); an FFN's input is [batch, width]
    heads: int = 1  # BERT's attention heads

    @property
    def tokens(self) -> int:
        """Rows every linear layer sees: batch x tokens per sequence."""
        return self.batch * self.seq

    @property
    def label(self) -> str:
        """What the table calls the model."""
        if self.kind == "ffn":
            sizes = f"{self.width}-{self.inner}-{self.width}"
            return f"FFN {sizes} x{self.layers}, batch {self.batch}"
        return (f"BERT-{self.layers} ({self.width}, {self.heads} heads, {self.inner}), "
                f"{self.batch}x{self.seq} tokens")  # fmt: skip


MODELS = {
    "ffn8": ModelSpec("ffn8", "ffn", 1024, 4096, 2, batch=8),
    "ffn256": ModelSpec("ffn256", "ffn", 1024, 4096, 2, batch=256),
    "bert": ModelSpec("bert", "bert", 768, 3072, 4, batch=2, seq=128, heads=12),
}
QUICK_MODELS = {
    "ffn8": ModelSpec("ffn8", "ffn", 16, 64, 2, batch=8),
    "ffn256": ModelSpec("ffn256", "ffn", 16, 64, 2, batch=256),
    "bert": ModelSpec("bert", "bert", 32, 64, 1, batch=2, seq=8, heads=2),
}


class BertEncoder(nn.Module):
    """transformers' ``BertModel`` (no pooler) from embeddings to the last hidden state."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        config = BertConfig(
            hidden_size=spec.width, num_hidden_layers=spec.layers,
            num_attention_heads=spec.heads, intermediate_size=spec.inner,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            vocab_size=128,  # unused (fed embeddings): a small table, cheap to copy
            max_position_embeddings=max(512, spec.seq),
        )  # fmt: skip
        self.bert = BertModel(config, add_pooling_layer=False)

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Encode ``[batch, seq, hidden]`` embeddings."""
        return self.bert(inputs_embeds=embeddings).last_hidden_state


def build_model(spec: ModelSpec, seed: int) -> nn.Module:
    """Build the model of ``spec`` in float32, initialised from ``seed``."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if spec.kind == "bert":
            return BertEncoder(spec)
        blocks = [
            nn.Sequential(nn.Linear(spec.width, spec.inner), nn.GELU(),
                          nn.Linear(spec.inner, spec.width))
            for _ in range(spec.layers)
        ]  # fmt: skip
        return nn.Sequential(*blocks)


def linear_flops(model: nn.Module, tokens: int) -> int:
    """Forward flops of the model's linear layers on ``tokens`` rows."""
    return sum(
        2 * tokens * m.in_features * m.out_features
        for m in model.modules()
        if isinstance(m, nn.Linear)
    )


def model_candidates(spec: ModelSpec, mode: str, keys: Sequence[str], seed: int) -> list[Candidate]:
    """Build the baseline model, its eml_ops copy and the peers ``keys``, on shared inputs."""
    model = build_model(spec, seed)
    gen = torch.Generator().manual_seed(seed)
    dims = (spec.batch, spec.seq, spec.width) if spec.kind == "bert" else (spec.batch, spec.width)
    x = torch.randn(*dims, generator=gen).requires_grad_(mode == "train")
    grad = torch.randn(*dims, generator=gen)  # of the output, in a training step

    def step(module: nn.Module) -> Step:
        return inference_step(module, x) if mode == "inference" else train_step(module, x, grad)

    baseline = Candidate(BASELINE, None, *step(model), module=model, step=step)
    converted = eml_ops.replace_linear(copy.deepcopy(model))
    out = [baseline, Candidate(EML, None, *step(converted))]
    return out + peers.peer_candidates(keys, baseline, training=mode == "train")


def bench_model(
    spec: ModelSpec, mode: str, threads: int, config: Config, peak_1core: float, run: int
) -> list[Row]:
    """Time one (model, mode, threads): rows with speed-ups over nn.Linear eager."""
    candidates = model_candidates(spec, mode, config.peers, config.seed)
    timed = timing.time_case(candidates, threads, config)
    where = {"mode": mode, "case": spec.key, "threads": threads, "dtype": "float32"}
    peers.record_notes(config.peer_notes, timed, where, run)
    flops = MODEL_FLOP_FACTOR[mode] * linear_flops(candidates[0].module, spec.tokens)
    shape = Shape(spec.tokens, spec.width, spec.width, spec.kind)
    return timing.case_rows(
        timed, mode=mode, shape=shape, threads=threads, dtype=torch.float32, flops=flops,
        peak_1core=peak_1core, run=run, label=spec.key,
    )  # fmt: skip


def specs(config: Config) -> list[ModelSpec]:
    """Return the models the run times (``--quick``: the tiny ones)."""
    table = QUICK_MODELS if config.quick_models else MODELS
    return [table[key] for key in config.models]


def run_models(config: Config, peak_1core: float) -> list[Row]:
    """``config.runs`` passes over every (model, mode, threads), with a progress bar."""
    from tqdm import tqdm

    todo = [
        (run, spec, mode, threads)
        for run in range(config.runs)
        for spec in specs(config)
        for mode in MODEL_MODES
        for threads in config.threads
    ]
    rows: list[Row] = []
    with tqdm(todo, desc="models", unit="case", file=sys.stderr, dynamic_ncols=True) as bar:
        for run, spec, mode, threads in bar:
            of_runs = f"run {run + 1}/{config.runs} " if config.runs > 1 else ""
            bar.set_postfix_str(f"{of_runs}{spec.key} {mode} t={threads}")
            rows += bench_model(spec, mode, threads, config, peak_1core, run)
    return rows


def _columns(config: Config) -> list[tuple[str, peers.Peer | None]]:
    """Name the columns after the baseline: eml eager, then the peers of the run."""
    return [(EML, None)] + [(peers.PEERS[key].name, peers.PEERS[key]) for key in config.peers]


def _peer_cell(
    found: dict[str, Combined], name: str, peer: peers.Peer | None, mode: str,
    absent: dict[str, str], note: str | None,
) -> str:
    """Format a speed-up cell: the value (with its range, a peer's inactive note) or why none."""
    if peer is not None and peer.key in absent:
        return "absent"
    if peer is not None and peer.inference_only and mode == "train":
        return "n/a"
    measured = found.get(name)
    if measured is None:
        return "failed" if note and note.startswith("failed") else "-"
    text = speedup_text(measured.speedup, (measured.speedup_min, measured.speedup_max),
                        measured.runs, ".2f", "x")  # fmt: skip
    if computed_wrong(measured):
        text += " (wrong)"
    return f"{text} (inactive)" if note and note.startswith("inactive") else text


def best_peer(found: dict[str, Combined], config: Config) -> Combined | None:
    """Return the fastest peer measured on a case that computed what the baseline computes.

    eml_ops under compile does not count, nor does a peer whose results are wrong.
    """
    measured = [
        found[peer.name]
        for key in config.peers
        if not (peer := peers.PEERS[key]).is_eml and peer.name in found
        and not computed_wrong(found[peer.name])
    ]
    return max(measured, key=lambda r: r.speedup, default=None)


def _by_case(results: Sequence[Combined]) -> dict[tuple[str, int, str], dict[str, Combined]]:
    """Group the combined results per (mode, threads, model), by candidate."""
    cases: dict[tuple[str, int, str], dict[str, Combined]] = {}
    for r in results:
        cases.setdefault((r.mode, r.threads, r.shape), {})[r.candidate] = r
    return cases


def model_tables(
    results: Sequence[Combined], config: Config, meta: dict[str, Any]
) -> list[tuple[str, list[str], list[list[str]]]]:
    """Per (mode, threads): a row per model, nn.Linear eager's ms and everyone's speed-up.

    Then the best peer's name and eml eager's speed-up over it. Absent peers read
    ``absent``, inference-only ones ``n/a`` in training, failed compilations ``failed``;
    zentorch is marked ``(inactive)`` where it said it optimises nothing, and a candidate
    whose results differ from the baseline's ``(wrong)`` (:func:`.stats.computed_wrong`).
    """
    absent = {s["peer"]: s["reason"] for s in meta.get("peers", []) if s["status"] == "absent"}
    cases = _by_case(results)
    tables = []
    for mode in MODEL_MODES:
        for threads in config.threads:
            header = ["model", f"{BASELINE} ms"] + [name for name, _ in _columns(config)]
            header += ["best peer", f"{EML} / best peer"]
            body = []
            for spec in specs(config):
                found = cases.get((mode, threads, spec.key))
                if not found:
                    continue
                where = {"mode": mode, "case": spec.key, "threads": threads}
                line = [spec.label, f"{1e3 * found[BASELINE].median_s:.2f}"]
                for name, peer in _columns(config):
                    note = peers.note_of(config.peer_notes, where, name)
                    line.append(_peer_cell(found, name, peer, mode, absent, note))
                best = best_peer(found, config)
                line += [best.candidate, f"{found[EML].speedup / best.speedup:.2f}x"] if best \
                    else ["-", "-"]  # fmt: skip
                body.append(line)
            title = f"models, {mode}, {threads} thread{'s' if threads > 1 else ''}"
            tables.append((title, header, body))
    return tables


def compile_table(
    results: Sequence[Combined], config: Config
) -> tuple[str, list[str], list[list[str]]]:
    """Seconds of each compiled candidate's first call (compilation) in the first run."""
    compiled = [peers.PEERS[key].name for key in config.peers]
    header = ["model", "mode", "threads", *compiled]
    body = []
    for (mode, threads, case), found in _by_case(results).items():
        line = [case, mode, str(threads)]
        line += [f"{found[name].first_call_s:.1f}" if name in found else "-" for name in compiled]
        body.append(line)
    title = ("models: seconds of the first call (compilation, fresh compiler caches) in the "
             "first run; not part of the timings")  # fmt: skip
    return title, header, body


def goal_lines(results: Sequence[Combined], config: Config) -> list[str]:
    """Per (mode, threads): eml eager over the best peer, geomean over the models, worst.

    Also for the fastest of eml eager and the eml candidates among the peers (compiled,
    frozen), where those were run.
    """
    cases = _by_case(results)
    eml_peers = [peers.PEERS[key].name for key in config.peers if peers.PEERS[key].is_eml]
    kinds = ["eml eager"] + (["best of eml"] if eml_peers else [])
    lines = []
    for mode in MODEL_MODES:
        for threads in config.threads:
            ratios: dict[str, dict[str, float]] = {kind: {} for kind in kinds}
            for spec in specs(config):
                found = cases.get((mode, threads, spec.key), {})
                best = best_peer(found, config)
                if best is None:
                    continue
                emls = [found[name].speedup for name in (EML, *eml_peers) if name in found]
                ratios["eml eager"][spec.key] = found[EML].speedup / best.speedup
                if "best of eml" in ratios:
                    ratios["best of eml"][spec.key] = max(emls) / best.speedup
            for what, per_model in ratios.items():
                if not per_model:
                    continue
                worst = min(per_model, key=per_model.__getitem__)
                lines.append(
                    f"models {mode}, {threads} thread(s): {what} over the best peer: geomean "
                    f"{geomean(per_model.values()):.2f}x ({len(per_model)} models), worst "
                    f"{per_model[worst]:.2f}x at {worst}"
                )
    return lines


def peer_lines(meta: dict[str, Any], config: Config) -> list[str]:
    """One line per peer: available (version) or absent (why), and what the cases reported."""
    lines = []
    for status in meta.get("peers", []):
        text = (f"absent ({status['reason']})" if status["status"] == "absent"
                else f"{status['version']}")  # fmt: skip
        notes = sorted({e["note"] for e in config.peer_notes if e["candidate"] == status["name"]})
        said = f"; {', '.join(notes)}" if notes else ""
        lines.append(f"peer {status['name']}: {status['description']}; {text}{said}")
    return lines


def write_sections(results: Sequence[Combined], config: Config, meta: dict[str, Any]) -> str:
    """Format the model table's Markdown: the tables, compile times, peers and goal."""
    parts = [
        "## Models", "",
        "Speed-up over the model with nn.Linear in eager mode, measured in the same run "
        "(float32); absent: the peer's package is not installed; n/a: inference only; "
        "(inactive): the peer said it optimises nothing on this CPU; (wrong): its output or "
        "gradients differ from the nn.Linear model's beyond float32's tolerance, so it is "
        "not counted as the best peer. GFLOP/s count the linear layers only.",
    ]  # fmt: skip
    for title, header, body in model_tables(results, config, meta):
        parts += ["", f"### {title}", "", markdown_table(header, body, text_columns=1)]
    title, header, body = compile_table(results, config)
    parts += ["", f"### {title}", "", markdown_table(header, body, text_columns=3)]
    parts += [""] + [f"- {line}" for line in peer_lines(meta, config) + goal_lines(results, config)]
    return "\n".join(parts)


def print_sections(results: Sequence[Combined], config: Config, meta: dict[str, Any]) -> None:
    """Print the model tables, compile times, peers and goal lines."""
    for title, header, body in model_tables(results, config, meta):
        print(f"\n{title}\n{text_table(header, body)}")
    title, header, body = compile_table(results, config)
    print(f"\n{title}\n{text_table(header, body)}")
    print("\n".join(["", *peer_lines(meta, config), *goal_lines(results, config)]))

