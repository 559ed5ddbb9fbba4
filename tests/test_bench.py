"""The benchmark harness: its files, rows and arithmetic. Nothing here asserts speed."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eml_ops import bench
from eml_ops.bench import candidates, cli, models, peers, report, stats, suite

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ``--quick`` run (both modes, all backends, default threads) shared by the tests."""
    out = tmp_path_factory.mktemp("bench")
    assert bench.main(["--quick", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def data(quick_run: Path) -> dict:
    return json.loads((quick_run / "bench.json").read_text())


def test_files_exist(quick_run: Path):
    for name in ("bench.json", "bench.md", "bench.png"):
        assert (quick_run / name).is_file(), name
    assert (quick_run / "bench.png").read_bytes()[:8] == PNG_MAGIC


def test_metadata(data: dict):
    meta = data["metadata"]
    for key in ("date", "torch_version", "cpu_model", "cpu_count", "isa", "fma_peak_gflops_1core"):
        assert key in meta, key
    assert meta["fma_peak_gflops_1core"] > 0
    assert meta["tuning"]["values"]["kc"]["value"] > 0  # the blocked GEMM's block sizes
    assert meta["modes"] == ["forward", "train"]
    assert meta["dtype"] == "float32" and meta["dtypes"] == ["float32"]
    assert 1 in meta["threads"]
    # The FMA peak of several threads at once, beside the parallel efficiency.
    several = [t for t in meta["threads"] if t > 1]
    assert list(meta["fma_peak_gflops_by_threads"]) == [str(t) for t in several]
    assert all(gflops > 0 for gflops in meta["fma_peak_gflops_by_threads"].values())


def test_a_row_for_every_case(data: dict):
    meta = data["metadata"]
    rows = data["rows"]
    keys = [(r["mode"], r["shape"], r["threads"], r["candidate"]) for r in rows]
    assert len(keys) == len(set(keys)), "duplicate rows"
    assert {r["dtype"] for r in rows} == {"float32"}
    skipped = {(s["mode"], s["shape"], s["threads"], s["candidate"]) for s in meta["skipped"]}
    assert not skipped & set(keys)
    shapes = [s for s in meta["shapes"]]
    for mode, shape, threads in itertools.product(meta["modes"], shapes, meta["threads"]):
        label = f"{shape['m']}x{shape['k']}x{shape['n']}"
        for candidate in [suite.BASELINE[mode], *meta["backends"]]:
            key = (mode, label, threads, candidate)
            assert (key in keys) != (key in skipped), key
        # The baseline and every backend but the slow plain loops run on the quick shapes.
        for candidate in meta["backends"]:
            if candidate not in suite.SLOW_BACKEND_MAX_MNK:
                assert (mode, label, threads, candidate) in keys


def test_row_arithmetic(data: dict):
    meta = data["metadata"]
    rows = data["rows"]
    peaks = meta["fma_peak_gflops_1core_by_dtype"]
    assert peaks["float32"] == meta["fma_peak_gflops_1core"]
    baseline = {
        (r["mode"], r["shape"], r["threads"]): r
        for r in rows
        if r["candidate"] == suite.BASELINE[r["mode"]]
    }
    for r in rows:
        assert len(r["samples_s"]) == meta["repeats"]
        assert all(s > 0 for s in r["samples_s"])
        assert r["inner"] >= 1
        assert r["median_s"] == statistics.median(r["samples_s"])
        base = baseline[(r["mode"], r["shape"], r["threads"])]
        assert math.isclose(r["speedup"], base["median_s"] / r["median_s"], rel_tol=1e-12)
        flops = suite.FLOP_FACTOR[r["mode"]] * r["m"] * r["n"] * r["k"]
        assert math.isclose(r["gflops"], flops / r["median_s"] / 1e9, rel_tol=1e-12)
        peak = peaks[r["dtype"]]
        assert math.isclose(r["fraction_of_peak"], r["gflops"] / (peak * r["threads"]))
        # Every candidate computed the same thing as PyTorch (a sanity check, not a timing).
        assert r["max_error"] < 1e-3, r
    assert all(b["speedup"] == 1.0 for b in baseline.values())


def test_summary_matches_rows(data: dict):
    rows = data["rows"]
    assert data["summary"]
    for s in data["summary"]:
        group = [
            r
            for r in rows
            if (r["mode"], r["threads"], r["candidate"]) == (s["mode"], s["threads"], s["backend"])
        ]
        assert s["shapes"] == len(group)
        geomean = math.exp(statistics.fmean(math.log(r["speedup"]) for r in group))
        assert math.isclose(s["geomean_speedup"], geomean, rel_tol=1e-9)
        assert s["worst_speedup"] == min(r["speedup"] for r in group)
    modes_threads_backends = {(s["mode"], s["threads"], s["backend"]) for s in data["summary"]}
    meta = data["metadata"]
    assert modes_threads_backends == set(
        itertools.product(meta["modes"], meta["threads"], meta["backends"])
    )


def test_markdown_tables(quick_run: Path, data: dict):
    text = (quick_run / "bench.md").read_text()
    meta = data["metadata"]
    for mode, threads in itertools.product(meta["modes"], meta["threads"]):
        assert f"## {mode}, {threads} thread" in text
    for backend in meta["backends"]:
        assert f"{backend} GFLOP/s" in text
        assert f"{backend} speed-up" in text
    for shape in meta["shapes"]:
        label = f"{shape['m']}x{shape['k']}x{shape['n']}"
        n_tables = len(meta["modes"]) * len(meta["threads"])
        assert text.count(f"| {label} |") == n_tables
    assert "## Summary" in text
    assert "geomean speed-up" in text
    assert report.tuning_line(meta["tuning"]) in text
    peaks = stats.peak_scaling_lines(meta["fma_peak_gflops_1core"],
                                     meta["fma_peak_gflops_by_threads"])
    assert all(line in text for line in peaks) and len(peaks) == (max(meta["threads"]) > 1)


def test_tuning_line_names_the_l2_column_blocks_and_the_streamed_dw_where_they_are_on():
    def tuning(column_bytes: int, stream_bytes: int) -> dict:
        values = {name: {"value": value, "env": f"EML_OPS_{name.upper()}", "overridden": False}
                  for name, value in (("mc", 18), ("kc", 24), ("nc", 32), ("one_pass_kc", 24),
                                      ("column_block_l2_bytes", column_bytes),
                                      ("stream_c_bytes", stream_bytes))}
        return {"values": values, "cache_source": "test"}

    on = report.tuning_line(tuning(1 << 20, 2 << 20))
    assert "MC x KC x NC 18 x 24 x 32, one pass up to k = 24, " in on
    assert "one row block's columns of C and B within 1024 KiB of L2" in on
    assert "dL/dW beyond 2048 KiB written past the caches" in on
    off = report.tuning_line(tuning(0, 0))
    assert "L2" not in off and "past the caches" not in off


def test_python_threads_table(quick_run: Path, data: dict):
    # Two Python threads calling at once: F.linear and every backend, rates and their ratios.
    results = data["metadata"]["python_threads"]
    assert [r["candidate"] for r in results] == [suite.BASELINE["forward"],
                                                 *data["metadata"]["backends"]]
    base = results[0]
    for r in results:
        assert r["shape"] == suite.QUICK_PYTHON_THREADS_SHAPE.label
        assert r["calls_per_s_1_thread"] > 0 and r["calls_per_s_2_threads"] > 0
        assert math.isclose(r["scaling"], r["calls_per_s_2_threads"] / r["calls_per_s_1_thread"])
        assert math.isclose(r["speedup_2_threads"],
                            r["calls_per_s_2_threads"] / base["calls_per_s_2_threads"])
    text = (quick_run / "bench.md").read_text()
    assert "## 2 Python threads" in text and "| 2-thread scaling |" in text


def test_summary_lines_fraction_of_peak():
    def row(candidate: str, median: float) -> suite.Row:
        return suite.Row(
            mode="forward",
            shape="1024x1024x1024",
            m=1024,
            k=1024,
            n=1024,
            kind="square",
            threads=1,
            candidate=candidate,
            inner=1,
            median_s=median,
            samples_s=[median],
            gflops=2 * 1024**3 / median / 1e9,
            speedup=0.1 / median,
            fraction_of_peak=0.5 if candidate == "aten" else 0.25,
            max_error=0.0 if candidate == "aten" else 1.0,
        )

    rows = [row("F.linear", 0.1), row("aten", 0.1), row("blocked", 0.2)]
    lines = stats.summary_lines(results := stats.combine_runs(rows), stats.summarize(results))
    assert any("aten" in line and "geomean speed-up 1.00x" in line for line in lines)
    # 2 GFLOP: a large shape, so the >= 1 MFLOP geometric mean is the same one.
    assert any("blocked" in line and ">= 1 MFLOP: 0.50x (1 shapes)" in line for line in lines)
    assert any("blocked" in line and "worst 0.50x at 1024x1024x1024" in line for line in lines)
    assert any(line.startswith("WARNING: blocked") for line in lines)
    assert "float32, fraction of FMA peak: F.linear 25%, aten 50%, blocked 25%" in lines[-1]


def test_parse_shapes():
    shapes = cli.parse_shapes("1x2x3, 127X255x511")
    assert [(s.m, s.k, s.n) for s in shapes] == [(1, 2, 3), (127, 255, 511)]
    assert shapes[1].label == "127x255x511"
    for bad in ("1x2", "0x2x3", "ax2x3", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.parse_shapes(bad)


def test_default_suite_covers_the_issue():
    kinds = {s.kind for s in suite.DEFAULT_SHAPES}
    assert {"tiny", "small", "square", "odd", "tall-skinny", "wide"} <= kinds
    labels = {s.label for s in suite.DEFAULT_SHAPES}
    assert {"1024x1024x1024", "127x255x511", "1000x999x1001", "1x4096x4096"} <= labels


@pytest.mark.parametrize(
    "argv",
    [
        ["--backends", "no-such-backend"],
        ["--modes", "sideways"],
        ["--threads", "0"],
        ["--shapes", "1x2"],
        ["--runs", "0"],
        ["--peers", "no-such-peer"],
        ["--models", "gpt"],
    ],
)
def test_bad_options_exit_2(argv: list[str], tmp_path: Path):
    with pytest.raises(SystemExit) as info:
        bench.main([*argv, "--out", str(tmp_path)])
    assert info.value.code == 2
    assert not (tmp_path / "bench.json").exists()


def test_command_line(tmp_path: Path):
    """``python -m eml_ops bench`` with custom options, float64 and bfloat16, no plot."""
    cmd = [
        sys.executable, "-m", "eml_ops", "bench", "--",
        "--modes", "train", "--backends", "aten", "--threads", "1", "--shapes", "3x5x7",
        "--repeats", "2", "--min-time", "0.001", "--dtype", "float64,bfloat16", "--no-plot",
        "--out", str(tmp_path),
    ]  # fmt: skip
    env = {**os.environ, "EML_OPS_BF16": "aten"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.returncode == 0, done.stderr
    assert "geomean speed-up" in done.stdout
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["metadata"]["dtypes"] == ["float64", "bfloat16"]
    assert data["metadata"]["bf16_policy"] == "aten"
    assert "float64,bfloat16 (bfloat16 policy aten);" in (tmp_path / "bench.md").read_text()
    assert {(r["shape"], r["candidate"], r["dtype"]) for r in data["rows"]} == {
        ("3x5x7", "nn.Linear", "float64"),
        ("3x5x7", "aten", "float64"),
        ("3x5x7", "nn.Linear", "bfloat16"),
        ("3x5x7", "aten", "bfloat16"),
    }
    assert (tmp_path / "bench.md").exists()
    assert not (tmp_path / "bench.png").exists()


def test_dtypes_side_by_side_with_float32_ratios():
    """Rows of several dtypes: summaries per dtype, and each 16-bit row's throughput over the
    same backend's float32 throughput, in the summary and in the table."""

    def row(candidate: str, dtype: str, median: float, shape: tuple[int, int, int]) -> suite.Row:
        m, k, n = shape
        return suite.Row(
            mode="forward", shape=f"{m}x{k}x{n}", m=m, k=k, n=n, kind="custom", threads=1,
            candidate=candidate, inner=1, median_s=median, samples_s=[median],
            gflops=2 * m * k * n / median / 1e9, speedup=1.0 if candidate == "F.linear" else 2.0,
            fraction_of_peak=0.1, max_error=0.0, dtype=dtype,
        )  # fmt: skip

    big, tiny = (256, 256, 256), (1, 16, 16)
    rows = [
        row("F.linear", "float32", 1.0, big), row("blocked", "float32", 0.5, big),
        row("F.linear", "bfloat16", 1.0, big), row("blocked", "bfloat16", 0.25, big),
        row("F.linear", "float32", 1.0, tiny), row("blocked", "float32", 0.5, tiny),
        row("F.linear", "bfloat16", 1.0, tiny), row("blocked", "bfloat16", 1.0, tiny),
    ]  # fmt: skip
    summary = {(s["dtype"], s["backend"]): s for s in stats.summarize(stats.combine_runs(rows))}
    assert set(summary) == {("float32", "blocked"), ("bfloat16", "blocked")}
    half = summary[("bfloat16", "blocked")]
    assert half["large_shapes"] == 1 and half["worst_shape_large"] == "256x256x256"
    # bfloat16 throughput / float32 throughput: 2x on the big shape, 0.5x on the tiny one.
    assert math.isclose(half["geomean_vs_float32"], 1.0)
    assert summary[("float32", "blocked")]["geomean_vs_float32"] is None
    config = suite.Config(
        modes=["forward"], backends=["blocked"], threads=[1],
        shapes=[suite.Shape(*big), suite.Shape(*tiny)], repeats=1, min_time=0.0,
        dtypes=[suite.DTYPES["float32"], suite.DTYPES["bfloat16"]], out=Path("."), plot=False,
    )  # fmt: skip
    [(title, header, body)] = report.tables(stats.combine_runs(rows), config)
    assert header[:3] == ["shape", "kind", "dtype"] and header[-1] == "blocked / f32"
    assert [(line[0], line[2], line[-1]) for line in body] == [
        ("256x256x256", "float32", "-"), ("256x256x256", "bfloat16", "2.00"),
        ("1x16x16", "float32", "-"), ("1x16x16", "bfloat16", "0.50"),
    ]  # fmt: skip


def test_mlp_mode_under_autocast(tmp_path: Path):
    """Mode mlp: a 3-layer MLP step, nn.Linear vs eml_ops, under bf16 autocast; same results."""
    assert bench.main([
        "--modes", "mlp", "--backends", "blocked", "--threads", "1", "--shapes", "8x24x16",
        "--repeats", "1", "--min-time", "0", "--dtype", "bfloat16", "--no-plot",
        "--out", str(tmp_path),
    ]) == 0  # fmt: skip
    data = json.loads((tmp_path / "bench.json").read_text())
    rows = {r["candidate"]: r for r in data["rows"]}
    assert set(rows) == {"nn.Linear MLP", "blocked"}
    assert all(r["mode"] == "mlp" and r["dtype"] == "bfloat16" for r in rows.values())
    flops = suite.FLOP_FACTOR["mlp"] * 8 * 24 * 16
    assert math.isclose(rows["blocked"]["gflops"], flops / rows["blocked"]["median_s"] / 1e9)
    assert rows["blocked"]["max_error"] < suite.ERROR_TOLERANCE[suite.DTYPES["bfloat16"]]


def test_unknown_dtype_exits_2(tmp_path: Path):
    with pytest.raises(SystemExit) as info:
        bench.main(["--dtype", "float32,int8", "--out", str(tmp_path)])
    assert info.value.code == 2


# --runs N: every run's rows kept, per-shape geometric means over runs, shapes below 1.0x.


def _row(candidate: str, shape: str, speedup: float, run: int, gflops: float = 1.0,
         mode: str = "forward", threads: int = 1, max_error: float = 0.0) -> suite.Row:
    m, k, n = (int(p) for p in shape.split("x"))
    return suite.Row(
        mode=mode, shape=shape, m=m, k=k, n=n, kind="custom", threads=threads,
        candidate=candidate, inner=1, median_s=1e-3 / speedup, samples_s=[1e-3 / speedup],
        gflops=gflops, speedup=speedup, fraction_of_peak=gflops / 100, max_error=max_error,
        run=run,
    )  # fmt: skip


def test_combine_runs_takes_geometric_means_over_runs():
    rows = [
        _row("F.linear", "8x8x8", 1.0, run=0), _row("blocked", "8x8x8", 0.8, 0, gflops=2.0),
        _row("F.linear", "8x8x8", 1.0, run=1), _row("blocked", "8x8x8", 1.25, 1, gflops=8.0),
        _row("F.linear", "8x8x8", 1.0, run=2),
        _row("blocked", "8x8x8", 1.0, 2, gflops=4.0, max_error=1e-6),
    ]  # fmt: skip
    combined = {c.candidate: c for c in stats.combine_runs(rows)}
    assert list(combined) == ["F.linear", "blocked"]
    blocked = combined["blocked"]
    assert blocked.runs == 3 and blocked.shape == "8x8x8" and blocked.m == 8
    assert math.isclose(blocked.speedup, 1.0)  # (0.8 * 1.25 * 1.0) ** (1/3)
    assert (blocked.speedup_min, blocked.speedup_max) == (0.8, 1.25)
    assert math.isclose(blocked.gflops, 4.0)  # (2 * 8 * 4) ** (1/3)
    assert math.isclose(blocked.fraction_of_peak, 0.04)
    assert blocked.max_error == 1e-6
    assert combined["F.linear"].speedup == 1.0 and combined["F.linear"].runs == 3


def test_one_run_combines_to_its_own_values_exactly():
    rows = [_row("F.linear", "3x5x7", 1.0, 0), _row("tpp", "3x5x7", 0.7310001, 0, gflops=0.3)]
    tpp = stats.combine_runs(rows)[1]
    assert (tpp.speedup, tpp.speedup_min, tpp.speedup_max) == (0.7310001,) * 3
    assert tpp.gflops == 0.3 and tpp.runs == 1
    assert stats.speedup_text(0.7310001, [0.7310001] * 2, 1, ".2f", "x") == "0.73x"
    assert stats.speedup_text(0.9, [0.8, 0.95], 3, ".2f", "x") == "0.90x [0.80-0.95]"


def test_scaling_lines_give_parallel_efficiency():
    """GFLOP/s at t threads over t times the 1-thread GFLOP/s, per shape and candidate."""
    rows = []
    for threads, linear_gflops, blocked_gflops in ((1, 10.0, 20.0), (4, 36.0, 60.0)):
        rows += [_row("F.linear", "64x64x64", 1.0, 0, gflops=linear_gflops, threads=threads),
                 _row("blocked", "64x64x64", 2.0, 0, gflops=blocked_gflops, threads=threads)]
    rows.append(_row("blocked", "8x8x8", 1.0, 0, gflops=5.0, threads=2))  # no 1-thread row
    results = stats.combine_runs(rows)
    assert stats.scaling_lines(results) == [
        "parallel efficiency, forward float32 64x64x64: F.linear 4t 0.90; blocked 4t 0.75"
    ]
    lines = stats.summary_lines(results, stats.summarize(results))
    assert lines[-1] == stats.scaling_lines(results)[0]
    assert stats.scaling_lines([r for r in results if r.threads == 1]) == []


def test_peak_scaling_lines_compare_threads_at_once_with_one_core():
    line = "FMA peak of t threads at once over t x 1 core: 2t 1.00, 16t 0.90"
    assert stats.peak_scaling_lines(100.0, {"2": 200.0, "16": 1440.0}) == [line]
    assert stats.peak_scaling_lines(100.0, {}) == []


def test_summary_over_runs_and_shapes_below_one():
    """The summary comes from the per-shape geomeans; shapes below 1.0x are listed by name."""
    speedups = {  # per shape, per run
        "1x16x16": [0.9, 1.2],  # geomean 1.039: not below
        "32x128x128": [0.98, 1.01],  # 0.995: below, though each run rounds to 1.0
        "64x128x128": [0.5, 0.5],  # 0.5: the worst
        "256x256x256": [1.0, 1.0],  # exactly 1.0: not below
    }
    rows = []
    for run in range(2):
        for shape, values in speedups.items():
            rows += [_row("F.linear", shape, 1.0, run), _row("blocked", shape, values[run], run)]
            rows += [_row("tpp", shape, 2.0, run)]
    summary = {s["backend"]: s for s in stats.summarize(stats.combine_runs(rows))}
    blocked = summary["blocked"]
    assert blocked["runs"] == 2 and blocked["shapes"] == 4
    per_shape = {shape: math.sqrt(a * b) for shape, (a, b) in speedups.items()}
    assert math.isclose(blocked["geomean_speedup"], stats.geomean(per_shape.values()))
    assert blocked["worst_shape"] == "64x128x128" and blocked["worst_speedup"] == 0.5
    assert blocked["worst_speedup_range"] == [0.5, 0.5]
    assert [b["shape"] for b in blocked["below_1x"]] == ["32x128x128", "64x128x128"]
    assert math.isclose(blocked["below_1x"][0]["speedup"], math.sqrt(0.98 * 1.01))
    assert blocked["below_1x"][0]["speedup_range"] == [0.98, 1.01]
    assert summary["tpp"]["below_1x"] == []

    lines = stats.summary_lines(stats.combine_runs(rows), list(summary.values()))
    assert any("blocked" in line and "(4 shapes, geomean of 2 runs), worst 0.50x [0.50-0.50] "
               "at 64x128x128" in line for line in lines)
    assert any(line.endswith("blocked    below 1.0x on 2 of 4 shapes: 32x128x128 0.995x "
                             "[0.980-1.010], 64x128x128 0.500x [0.500-0.500]") for line in lines)
    assert any(line.endswith("tpp        every shape at 1.0x or better (4 shapes)")
               for line in lines)


def test_tables_show_the_range_across_runs():
    rows = [
        _row("F.linear", "8x8x8", 1.0, 0), _row("blocked", "8x8x8", 0.8, 0, gflops=2.0),
        _row("F.linear", "8x8x8", 1.0, 1), _row("blocked", "8x8x8", 1.25, 1, gflops=8.0),
    ]  # fmt: skip
    config = suite.Config(
        modes=["forward"], backends=["blocked"], threads=[1], shapes=[suite.Shape(8, 8, 8)],
        repeats=1, min_time=0.0, dtypes=[suite.DTYPES["float32"]], out=Path("."), plot=False,
        runs=2,
    )  # fmt: skip
    [(title, header, body)] = report.tables(stats.combine_runs(rows), config)
    assert header[-2:] == ["blocked GFLOP/s", "blocked speed-up"]
    assert body == [["8x8x8", "custom", "float32", "1.0", "1", "4.0", "1.00 [0.80-1.25]"]]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A ``--quick --runs 2`` run, forward on one thread (kept small), and its console output."""
    out = tmp_path_factory.mktemp("bench_runs")
    argv = ["--quick", "--runs", "2", "--modes", "forward", "--threads", "1", "--out", str(out)]
    done = subprocess.run([sys.executable, "-m", "eml_ops", "bench", *argv],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return out, done.stdout


def test_two_runs_keep_every_row_and_combine_them(two_runs: tuple[Path, str]):
    out, stdout = two_runs
    data = json.loads((out / "bench.json").read_text())
    meta = data["metadata"]
    assert meta["runs"] == 2
    by_key: dict[tuple, list[dict]] = {}
    for r in data["rows"]:
        by_key.setdefault((r["mode"], r["shape"], r["threads"], r["dtype"], r["candidate"]),
                          []).append(r)
    assert by_key and all(sorted(r["run"] for r in group) == [0, 1] for group in by_key.values())
    combined = {(c["mode"], c["shape"], c["threads"], c["dtype"], c["candidate"]): c
                for c in data["combined"]}
    assert set(combined) == set(by_key)
    for key, group in by_key.items():
        c = combined[key]
        speedups = [r["speedup"] for r in group]
        assert math.isclose(c["speedup"], math.sqrt(speedups[0] * speedups[1]), rel_tol=1e-12)
        assert [c["speedup_min"], c["speedup_max"]] == sorted(speedups)
        assert math.isclose(c["gflops"], math.sqrt(group[0]["gflops"] * group[1]["gflops"]),
                            rel_tol=1e-12)
    for s in data["summary"]:
        group = [c for key, c in combined.items()
                 if (key[0], key[2], key[3], key[4]) ==
                 (s["mode"], s["threads"], s["dtype"], s["backend"])]
        assert s["runs"] == 2 and s["shapes"] == len(group) == len(meta["shapes"])
        assert math.isclose(s["geomean_speedup"], stats.geomean(c["speedup"] for c in group))
        assert s["worst_speedup"] == min(c["speedup"] for c in group)
        assert [b["shape"] for b in s["below_1x"]] == [c["shape"] for c in group
                                                        if c["speedup"] < 1.0]
        listed = "below 1.0x on" if s["below_1x"] else "every shape at 1.0x or better"
        assert sum(s["backend"] in line and listed in line for line in stdout.splitlines()) >= 1
    text = (out / "bench.md").read_text()
    assert "2 runs, each a whole pass over the suite" in text
    assert "geomean of 2 runs" in stdout and "geomean of 2 runs" in text
    assert " [" in text.split("## forward, 1 thread")[1].split("##")[0]  # ranges in the table


def test_call_overhead_rows(two_runs: tuple[Path, str]):
    """The overhead table: every (mode, tiny shape), PyTorch, each backend and the op; us."""
    out, stdout = two_runs
    meta = json.loads((out / "bench.json").read_text())["metadata"]
    entries = meta["call_overhead"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for e in entries:
        groups.setdefault((e["mode"], e["shape"]), []).append(e)
    assert list(groups) == [(mode, shape.label) for mode in suite.OVERHEAD_MODES
                            for shape in suite.OVERHEAD_SHAPES]
    assert ("forward", "1x1x1") in groups and ("train", "1x16x16") in groups
    for (mode, _), group in groups.items():
        names = [e["candidate"] for e in group]
        assert names == [suite.BASELINE[mode], *meta["backends"], suite.OPS_CANDIDATE]
        base = group[0]
        assert base["backend"] is None and base["diff_us"] == 0.0
        assert group[-1]["backend"] in meta["backends"]  # the op runs on the default backend
        for e in group:
            assert e["threads"] == 1 and e["dtype"] == "float32"
            assert len(e["samples_s"]) == meta["repeats"] and e["inner"] >= 1
            # Units: microseconds from the samples' seconds, difference to PyTorch's.
            assert math.isclose(e["us_per_call"], 1e6 * statistics.median(e["samples_s"]))
            assert math.isclose(e["diff_us"], e["us_per_call"] - base["us_per_call"])
    text = (out / "bench.md").read_text()
    assert "## Call overhead" in text and "| torch.ops.eml.linear diff us |" in text
    for mode, shape in groups:
        assert f"| {mode} | {shape} |" in text
        assert f"call overhead, {mode} {shape}, 1 thread:" in stdout
    assert "Call overhead, 1 thread, float32" in stdout


def test_call_overhead_on_by_default_and_off_on_request(data: dict, tmp_path: Path):
    assert {e["mode"] for e in data["metadata"]["call_overhead"]} == set(suite.OVERHEAD_MODES)
    assert bench.main([
        "--modes", "train", "--backends", "aten", "--threads", "1", "--shapes", "3x5x7",
        "--repeats", "1", "--min-time", "0", "--no-overhead", "--no-plot", "--out", str(tmp_path),
    ]) == 0  # fmt: skip
    meta = json.loads((tmp_path / "bench.json").read_text())["metadata"]
    assert "call_overhead" not in meta
    assert "## Call overhead" not in (tmp_path / "bench.md").read_text()


def test_skipped_once_over_runs(tmp_path: Path):
    # 1x1024x1025 is past the reference backend's limit: skipped, and listed once, not per run.
    assert bench.main([
        "--modes", "forward", "--backends", "reference,aten", "--threads", "1",
        "--shapes", "1x1024x1025", "--runs", "2", "--repeats", "1", "--min-time", "0",
        "--no-overhead", "--no-plot", "--out", str(tmp_path),
    ]) == 0  # fmt: skip
    data = json.loads((tmp_path / "bench.json").read_text())
    assert [s["candidate"] for s in data["metadata"]["skipped"]] == ["reference"]
    assert sorted((r["candidate"], r["run"]) for r in data["rows"]) == [
        ("F.linear", 0), ("F.linear", 1), ("aten", 0), ("aten", 1)]


# --peers and the model table (tiny models and shapes: compiling is slow on a small machine).

ALL_PEERS = ",".join(peers.PEERS)
# requirements-dev.txt pins zentorch 2.13.0.2, a wheel built for torch 2.13: under another
# torch (make test-torch) it fails to import, and the bench must then list it as absent.
ZENTORCH_RUNS = torch.__version__.startswith("2.13.")
PEERS_HERE = {key: p for key, p in peers.PEERS.items() if key != "zentorch" or ZENTORCH_RUNS}
# The candidates of the model table in inference and in a training step (the inference-only
# peers freeze the weights).
MODEL_CANDIDATES = {
    "inference": {models.BASELINE, models.EML, *(p.name for p in PEERS_HERE.values())},
    "train": {models.BASELINE, models.EML,
              *(p.name for p in PEERS_HERE.values() if not p.inference_only)},
}  # fmt: skip


def _tiny(*argv: str, out: Path) -> dict:
    """Run the bench with ``argv`` on one thread, one sample each; its bench.json."""
    assert bench.main([*argv, "--threads", "1", "--repeats", "1", "--min-time", "0",
                       "--no-overhead", "--no-plot", "--out", str(out)]) == 0  # fmt: skip
    return json.loads((out / "bench.json").read_text())


@pytest.fixture(scope="module")
def peers_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The model table of the tiny FFN with every peer (zentorch must be installed)."""
    out = tmp_path_factory.mktemp("peers")
    return out, _tiny("--quick", "--peers", ALL_PEERS, "--modes", "models", "--models", "ffn8",
                      out=out)  # fmt: skip


def _model_cells(text: str, mode: str) -> dict[str, str]:
    """The cells of the one model's row in the 1-thread model table of ``mode``, by column."""
    table = text.split(f"### models, {mode}, 1 thread")[1].split("###")[0]
    header, _, row = [line for line in table.splitlines() if line.startswith("|")]
    return dict(zip(header.strip("|").split(" | "), row.strip("|").split(" | "), strict=True))


def test_every_peer_has_rows_in_the_model_table(peers_run: tuple[Path, dict]):
    out, data = peers_run
    assert data["rows"] == []  # the model table only
    assert {s["peer"]: s["status"] for s in data["metadata"]["peers"]} == {
        key: "available" if key in PEERS_HERE else "absent" for key in peers.PEERS}
    rows = data["model_rows"]
    text = (out / "bench.md").read_text()
    for mode, names in MODEL_CANDIDATES.items():
        here = {r["candidate"]: r for r in rows if r["mode"] == mode}
        cells = _model_cells(text, mode)
        assert set(here) == names, mode
        base = here[models.BASELINE]
        for r in here.values():
            assert r["shape"] == "ffn8" and r["kind"] == "ffn" and r["threads"] == 1
            assert math.isclose(r["speedup"], base["median_s"] / r["median_s"], rel_tol=1e-12)
            flops = models.MODEL_FLOP_FACTOR[mode] * 4 * 2 * 8 * 16 * 64  # 4 linear layers
            assert math.isclose(r["gflops"], flops / r["median_s"] / 1e9, rel_tol=1e-12)
            assert r["first_call_s"] > 0
            # eml_ops, compiled or not, computes what the nn.Linear model computes; a peer
            # that does not (zentorch's training step where it is active) is marked so and
            # is not the best peer.
            if r["max_error"] >= 1e-4:
                assert r["candidate"] in {p.name for p in peers.PEERS.values() if not p.is_eml}
                assert cells[r["candidate"]].endswith("(wrong)"), cells
                assert cells["best peer"] != r["candidate"], cells
            else:
                assert "(wrong)" not in cells.get(r["candidate"], ""), cells
    assert {c["candidate"] for c in data["model_combined"]} == MODEL_CANDIDATES["inference"]


def test_zentorch_reports_what_it_did(peers_run: tuple[Path, dict]):
    """zentorch is "inactive" exactly where its own check says the CPU lacks AVX-512."""
    out, data = peers_run
    if not ZENTORCH_RUNS:  # its wheel is for torch 2.13: absent, with the import's error
        (status,) = [s for s in data["metadata"]["peers"] if s["peer"] == "zentorch"]
        assert status["status"] == "absent" and status["reason"].startswith("import zentorch")
        assert not [e for e in data["metadata"]["peer_notes"] if e["candidate"] == "zentorch"]
        return
    import zentorch

    notes = {(e["mode"], e["note"].split(":")[0]) for e in data["metadata"]["peer_notes"]
             if e["candidate"] == "zentorch"}  # fmt: skip
    said = "active" if zentorch._C.is_avx512_supported() else "inactive"
    assert notes == {("inference", said), ("train", said)}
    cells = [_model_cells((out / "bench.md").read_text(), mode)["zentorch"]
             for mode in models.MODEL_MODES]  # fmt: skip
    assert all(cell.endswith("(inactive)") == (said == "inactive") for cell in cells), cells


def test_model_table_markdown(peers_run: tuple[Path, dict]):
    out, _ = peers_run
    text = (out / "bench.md").read_text()
    assert "## Models" in text
    train = text.split("### models, train, 1 thread")[1].split("###")[0]
    inference = text.split("### models, inference, 1 thread")[1].split("###")[0]
    assert f"| model | {models.BASELINE} ms | {models.EML} |" in inference
    assert "| best peer | eml eager / best peer |" in inference
    # Inference-only peers read n/a in training: a cell each in the one model's row.
    inference_only = sum(p.inference_only for p in peers.PEERS.values())
    assert inference_only == 4
    assert train.count(" n/a |") == inference_only and "n/a" not in inference
    assert "seconds of the first call (compilation" in text
    assert "eml eager over the best peer: geomean" in text
    assert "best of eml over the best peer" in text


def test_max_relative_error_measures_numerical_zeros_against_the_result():
    output = torch.full((4,), 70.0)
    noise = torch.full((3,), 3e-7)  # a gradient that is zero but for rounding
    small = torch.full((3,), 0.1)  # a small gradient, far above rounding
    error = candidates.max_relative_error
    zero_scale = candidates.ZERO_FRACTION * 70.0
    assert error([output, -noise], [output, noise]) == pytest.approx(6e-7 / zero_scale)
    assert error([output, -small], [output, small]) == pytest.approx(2.0)
    assert error([output * 1.01], [output]) == pytest.approx(0.01, rel=1e-4)  # float32 1.01
    assert error([output, noise], [output]) == math.inf
    assert error([output[:3]], [output]) == math.inf


def test_a_peer_with_wrong_results_is_not_the_best_peer():
    def result(candidate: str, speedup: float, max_error: float) -> suite.Combined:
        return suite.Combined(
            mode="train", shape="ffn8", m=8, k=16, n=16, kind="ffn", threads=1,
            dtype="float32", candidate=candidate, runs=1, median_s=1.0 / speedup,
            gflops=1.0, speedup=speedup, speedup_min=speedup, speedup_max=speedup,
            fraction_of_peak=0.0, max_error=max_error,
        )  # fmt: skip

    found = {
        models.BASELINE: result(models.BASELINE, 1.0, 0.0),
        models.EML: result(models.EML, 1.5, 1e-7),
        "Inductor": result("Inductor", 1.1, 1e-7),
        "zentorch": result("zentorch", 2.0, 2.3),
    }
    config = argparse.Namespace(peers=["inductor", "zentorch"])
    assert stats.computed_wrong(found["zentorch"]) and not stats.computed_wrong(found["Inductor"])
    assert models.best_peer(found, config).candidate == "Inductor"
    cell = models._peer_cell(found, "zentorch", peers.PEERS["zentorch"], "train", {}, "active")
    assert cell == "2.00x (wrong)"
    found["zentorch"] = result("zentorch", 2.0, 1e-7)
    assert models.best_peer(found, config).candidate == "zentorch"


def test_bert_model_table_without_peers(tmp_path: Path):
    """A BERT encoder from a config: nn.Linear eager and eml eager, inference and training."""
    data = _tiny("--quick", "--modes", "models", "--models", "bert", out=tmp_path)
    assert data["metadata"]["peers"] == []
    rows = {(r["mode"], r["candidate"]): r for r in data["model_rows"]}
    assert set(rows) == {(mode, name) for mode in models.MODEL_MODES
                         for name in (models.BASELINE, models.EML)}  # fmt: skip
    assert all(r["shape"] == "bert" and r["max_error"] < 1e-4 for r in rows.values())
    assert "BERT-1 (32, 2 heads, 64), 2x8 tokens" in (tmp_path / "bench.md").read_text()


def test_peers_on_the_shape_suite(tmp_path: Path):
    """--peers adds columns to the shape tables: Inductor compiles nn.Linear, forward and train."""
    data = _tiny("--peers", "inductor", "--modes", "forward,train", "--backends", "aten",
                 "--shapes", "4x8x8", out=tmp_path)  # fmt: skip
    assert data["model_rows"] == []
    assert {(r["mode"], r["candidate"]) for r in data["rows"]} == {
        ("forward", "F.linear"), ("forward", "aten"), ("forward", "Inductor"),
        ("train", "nn.Linear"), ("train", "aten"), ("train", "Inductor"),
    }  # fmt: skip
    assert all(r["max_error"] < 1e-5 for r in data["rows"])
    assert {s["backend"] for s in data["summary"]} == {"aten", "Inductor"}
    assert "| Inductor speed-up |" in (tmp_path / "bench.md").read_text()


def test_absent_peer_is_listed_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "zentorch", None)  # as if not installed
    data = _tiny("--quick", "--peers", "zentorch", "--modes", "forward,models", "--models",
                 "ffn8", "--backends", "aten", "--shapes", "4x8x8", out=tmp_path)  # fmt: skip
    [status] = data["metadata"]["peers"]
    assert status["status"] == "absent" and status["reason"] == "zentorch is not installed"
    for r in [*data["rows"], *data["model_rows"]]:
        assert r["candidate"] != "zentorch"
    text = (tmp_path / "bench.md").read_text()
    models_part = text.split("## Models")[1]
    assert models_part.count("| absent |") == len(models.MODEL_MODES)
    assert "peer zentorch: " in text and "absent (zentorch is not installed)" in text


def test_record_notes_once_over_runs():
    notes: list[dict] = []
    where = {"mode": "train", "case": "ffn8", "threads": 1, "dtype": "float32"}
    cand = candidates.Candidate("zentorch", None, lambda: None, lambda: [], notes=["active"])
    for run in range(2):
        peers.record_notes(notes, {"kept": [cand], "failed": {"Inductor": "E: x"}}, where, run)
    assert [(e["candidate"], e["note"], e["run"]) for e in notes] == [
        ("zentorch", "active", 0), ("Inductor", "failed: E: x", 0)]
    assert peers.note_of(notes, {"case": "ffn8", "mode": "train"}, "Inductor") == "failed: E: x"
    assert peers.note_of(notes, {"case": "bert"}, "zentorch") is None


@pytest.mark.parametrize(("value", "said"), [
    (None, "in place"), ("1", "out of place"), ("0", "off"), ("2", "not measured here")])
def test_zentorch_description_names_its_weight_cache_setting(value: str | None, said: str):
    assert said in peers.zentorch_weight_cache(value)
    setting = os.environ.get("ZENDNNL_MATMUL_WEIGHT_CACHE")
    assert peers.zentorch_weight_cache(setting) in peers.PEERS["zentorch"].description


def test_copies_of_peers_caching_weights_by_address_stay_alive():
    """zentorch's copies stay referenced (no later weight reuses a cached address); others not."""
    module = torch.nn.Linear(4, 3)
    # Not compiled: only which copies are kept is under test (zentorch may be absent).
    eager = {key: dataclasses.replace(peers.PEERS[key], compiled=False)
             for key in ("inductor", "zentorch")}  # fmt: skip
    before = len(peers.KEPT_FOR_WEIGHT_CACHES)
    peers._compile(eager["inductor"], module)
    assert len(peers.KEPT_FOR_WEIGHT_CACHES) == before
    copied = peers._compile(eager["zentorch"], module)
    assert len(peers.KEPT_FOR_WEIGHT_CACHES) == before + 1
    assert peers.KEPT_FOR_WEIGHT_CACHES[-1] is copied and copied.weight is not module.weight
    peers.KEPT_FOR_WEIGHT_CACHES.pop()
