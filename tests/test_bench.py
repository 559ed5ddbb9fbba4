"""The benchmark harness: its files, rows and arithmetic. Nothing here asserts speed."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from eml_ops import bench
from eml_ops.bench import cli, report, stats, suite

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
    assert meta["modes"] == ["forward", "train"]
    assert meta["dtype"] == "float32" and meta["dtypes"] == ["float32"]
    assert 1 in meta["threads"]


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
    lines = stats.summary_lines(rows, stats.summarize(rows))
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
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "geomean speed-up" in done.stdout
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["metadata"]["dtypes"] == ["float64", "bfloat16"]
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
    summary = {(s["dtype"], s["backend"]): s for s in stats.summarize(rows)}
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
    [(title, header, body)] = report.tables(rows, config)
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
