"""The blocked GEMM's tuning from the CPU's caches: the report, the overrides, ``info``.

The model itself is tested for given caches (Zen 3, Zen 5, Skylake-X, none) in
tests/cpp/test_gemm.cpp; here: that the values in use are the model's for the caches this
CPU reports (checked against an independent implementation of the model), that each
EML_OPS_* variable replaces its value (and a bad one is ignored and said so), and that the GEMM
stays correct with overridden blocks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import eml_ops

BLOCK_NAMES = (
    "mc", "kc", "nc", "one_pass_kc", "mc_f64", "kc_f64", "nc_f64", "one_pass_kc_f64"
)
THRESHOLD_NAMES = (
    "shallow_block_bytes",
    "stream_b_bytes",
    "write_bound_depth",
    "l3_share_bytes",
    "min_parallel_flops",
    "dot_max_rows",
    "aliasing_row_bytes",
    "narrow_tiles",
    "few_rows_tiles",
    "prefetch_next_min_rows",
    "transposed_max_rows",
    "interleaved_max_rows",
    "aliased_tile_rows",
    "column_block_l2_bytes",
    "stream_c_bytes",
    "strip_max_cols",
)
# Values whose model may be 0 (none): the narrow tiles' paths without narrow tiles, the
# few-rows tiles and the interleaved path without AVX-512, the L2 column blocks below 2 MiB,
# the streamed C and the strip path without AVX-512's whole FMAs.
MAY_BE_ZERO = (
    "narrow_tiles",
    "few_rows_tiles",
    "transposed_max_rows",
    "interleaved_max_rows",
    "column_block_l2_bytes",
    "stream_c_bytes",
    "strip_max_cols",
)
# What block_model.h assumes for a level the CPU does not report: size, ways, line, sharing.
ASSUMED = {"L1d": (32 << 10, 8, 64, 1), "L2": (256 << 10, 8, 64, 1), "L3": (2 << 20, 16, 64, 1)}
FLOPS_PER_CYCLE = {"generic": 8, "avx2": 32, "avx512": 64}


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (the overrides are read once, at start-up)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("EML_OPS_")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False, env={**clean, **env})


def level(caches: dict[str, Any], name: str) -> tuple[int, int, int, int]:
    """(size, ways, line, sharing) of a cache level, the assumed one where unknown."""
    seen = caches[name]
    if not seen["known"]:
        return ASSUMED[name]
    return seen["size_bytes"], seen["ways"], seen["line_bytes"], seen["sharing"]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def way_bytes(size: int, ways: int, line: int) -> int:
    """Bytes of one way: sets x line."""
    return size // (ways * line) * line


def model_blocks(
    caches: dict[str, Any], mr: int, nr: int, size: int
) -> tuple[int, int, int, int]:
    """Low et al.'s model as block_model.h states it, written again from its comment."""
    l1_size, l1_ways, l1_line, _ = level(caches, "L1d")
    l1_way = way_bytes(l1_size, l1_ways, l1_line)
    kc = 8
    while (ceil_div((kc + 8) * mr * size, l1_way) + ceil_div((kc + 8) * nr * size, l1_way)
           <= l1_ways - 1):
        kc += 8
    l2_size, l2_ways, l2_line, _ = level(caches, "L2")
    l2_way = way_bytes(l2_size, l2_ways, l2_line)
    # A's block takes the ways left, or half of them in an L2 of 2 MiB or more.
    left = l2_ways - 1 - ceil_div(kc * nr * size, l2_way)
    free = max(1, left // 2 if l2_size >= 2 << 20 else left)
    mc = max(mr, free * l2_way // (kc * size) // mr * mr)
    l3_size, l3_ways, l3_line, l3_sharing = level(caches, "L3")
    l3_way = way_bytes(l3_size // l3_sharing, l3_ways, l3_line)
    free = max(1, l3_ways - 1 - ceil_div(mc * kc * size, l3_way))
    nc = max(nr, free * l3_way // (kc * size) // nr * nr)
    one_pass_kc = max(kc, l1_size // (nr * size) // 8 * 8)
    return mc, kc, nc, one_pass_kc


def test_report_structure() -> None:
    tuning = eml_ops._C.tuning()
    assert tuning["isa"] == eml_ops._C.get_isa()
    assert tuning["cache_source"] in ("cpuid 0x8000001d", "cpuid 4", "sysfs", "none")
    assert set(tuning["caches"]) == {"L1d", "L2", "L3"}
    if tuning["cache_source"] == "none":
        assert not any(c["known"] for c in tuning["caches"].values())
    for cache in tuning["caches"].values():
        if cache["known"]:
            assert cache["size_bytes"] > 0 and cache["ways"] > 0 and cache["line_bytes"] > 0
            assert cache["sharing"] >= 1
    assert set(tuning["values"]) == set(BLOCK_NAMES + THRESHOLD_NAMES)
    for name, entry in tuning["values"].items():
        assert entry["env"] == "EML_OPS_" + name.upper()
        assert (entry["value"] > 0 or name in MAY_BE_ZERO) and entry["note"]


@pytest.mark.parametrize("isa", eml_ops._C.supported_isas())
def test_values_are_the_models_for_this_cpu(isa: str) -> None:
    tuning = eml_ops._C.tuning(isa)
    values = {name: entry for name, entry in tuning["values"].items()}
    for entry in values.values():
        if not entry["overridden"]:
            assert entry["value"] == entry["model"]
    caches = tuning["caches"]
    tiles = tuning["register_tile"]
    for suffix, size, tile in (("", 4, tiles["float32"]), ("_f64", 8, tiles["float64"])):
        want = model_blocks(caches, tile[0], tile[1], size)
        got = tuple(values[name + suffix]["model"] for name in ("mc", "kc", "nc", "one_pass_kc"))
        assert got == want, (suffix, got, want)
    assert values["shallow_block_bytes"]["model"] == level(caches, "L1d")[0]
    l2_size = level(caches, "L2")[0]
    assert values["stream_b_bytes"]["model"] == l2_size
    # Half of an L2 of 2 MiB or more keeps one row block's column blocks of C (packed_gemm.h).
    assert values["column_block_l2_bytes"]["model"] == (l2_size // 2 if l2_size >= 2 << 20 else 0)
    l3 = level(caches, "L3")
    assert values["l3_share_bytes"]["model"] == l3[0] // l3[3]
    assert values["min_parallel_flops"]["model"] == 2048 * FLOPS_PER_CYCLE[isa]
    l1_size, l1_ways, l1_line, _ = level(caches, "L1d")
    assert values["aliasing_row_bytes"]["model"] == way_bytes(l1_size, l1_ways, l1_line) // 2
    narrow = isa == "avx2" or (isa == "avx512" and eml_ops._C.cpu_splits_avx512())
    assert values["narrow_tiles"]["model"] == int(narrow)
    # AVX-512's few-rows tiles where its FMAs run whole.
    assert values["few_rows_tiles"]["model"] == int(isa == "avx512" and not narrow)
    # The next column step's panels prefetched from 4 rows with AVX2, 5 with AVX-512's whole
    # FMAs and 1 with its split ones.
    prefetch_rows = (1 if narrow else 5) if isa == "avx512" else 4
    assert values["prefetch_next_min_rows"]["model"] == prefetch_rows
    # dL/dW beyond the L2 written past the caches, by AVX-512's whole-FMA pair blocks.
    assert values["stream_c_bytes"]["model"] == (l2_size if isa == "avx512" and not narrow else 0)
    assert values["transposed_max_rows"]["model"] == (64 if narrow else 0)
    # Blocks of B written rows outer up to 64 steps deep where the pair blocks run, else 32.
    assert values["write_bound_depth"]["model"] == (64 if isa == "avx512" and not narrow else 32)
    # Interleaved rows: the packed tiles tie or win from 48 rows on where 512-bit FMAs run whole.
    interleaved = (128 if narrow else 40) if isa == "avx512" else 0
    assert values["interleaved_max_rows"]["model"] == interleaved
    # W's rows in one L1 set beside two lines of X^T: all 8 of a half tile with 10 ways or more.
    assert values["aliased_tile_rows"]["model"] == (8 if l1_ways >= 10 else 6)
    # The strip path's 8 x 48 tiles for W up to 768 columns where 512-bit FMAs run whole.
    assert values["strip_max_cols"]["model"] == (768 if isa == "avx512" and not narrow else 0)


def test_text_report_names_every_value() -> None:
    text = eml_ops._C.tuning_report()
    tuning = eml_ops._C.tuning()
    assert tuning["cache_source"] in text
    for name, entry in tuning["values"].items():
        assert f"{name} = {entry['value']}" in text


def test_unknown_isa_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown ISA"):
        eml_ops._C.tuning("sse9")


OVERRIDE_CHECK = """
import json, torch, torch.nn.functional as F, eml_ops
tuning = eml_ops._C.tuning()
errors = []
eml_ops.set_backend("blocked")
torch.manual_seed(0)
for dtype in (torch.float32, torch.float64):
    # m, k past MC and KC, n past NC of the overrides; a small, threaded product; and rows
    # a multiple of the aliasing override apart (C staged; 8 rows of X: the transposed path's
    # half tiles, W's rows aliasing).
    for m, k, n in ((101, 77, 90), (13, 250, 40), (37, 100, 48), (8, 256, 70)):
        x = torch.randn(m, k, dtype=dtype)
        w = torch.randn(n, k, dtype=dtype)
        b = torch.randn(n, dtype=dtype)
        want = F.linear(x.double(), w.double(), b.double())
        got = eml_ops.linear(x, w, b)
        tol = 1e-4 if dtype == torch.float32 else 1e-10
        errors.append(float((got.double() - want).abs().max() / want.abs().max()) < tol)
print(json.dumps({"tuning": tuning, "correct": errors}))
"""


def values_under(overrides: dict[str, str]) -> dict[str, Any]:
    """The tuning values under ``overrides``, each checked taken and the GEMM correct."""
    result = run_python(OVERRIDE_CHECK, **overrides)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert all(out["correct"]), out["correct"]
    values: dict[str, Any] = out["tuning"]["values"]
    for env, text in overrides.items():
        name = env.removeprefix("EML_OPS_").lower()
        assert values[name]["overridden"] and values[name]["value"] == int(text), name
    return values


def test_overrides_replace_values_and_keep_the_gemm_correct() -> None:
    overrides = {
        "EML_OPS_MC": "18",
        "EML_OPS_KC": "24",
        "EML_OPS_NC": "32",
        "EML_OPS_ONE_PASS_KC": "24",
        "EML_OPS_MC_F64": "12",
        "EML_OPS_KC_F64": "16",
        "EML_OPS_NC_F64": "24",
        "EML_OPS_ONE_PASS_KC_F64": "16",
        "EML_OPS_MIN_PARALLEL_FLOPS": "1000",
        "EML_OPS_DOT_MAX_ROWS": "4",
        "EML_OPS_SHALLOW_BLOCK_BYTES": "4096",
        "EML_OPS_ALIASING_ROW_BYTES": "64",
        "EML_OPS_ALIASED_TILE_ROWS": "5",
        "EML_OPS_COLUMN_BLOCK_L2_BYTES": "20000",
        "EML_OPS_STREAM_C_BYTES": "30000",
        "EML_OPS_WRITE_BOUND_DEPTH": "48",
        "EML_OPS_PREFETCH_NEXT_MIN_ROWS": "2",
    }
    values = values_under(overrides)
    for env in overrides:
        name = env.removeprefix("EML_OPS_").lower()
        assert values[name]["model"] == eml_ops._C.tuning()["values"][name]["model"]
    for name in ("stream_b_bytes", "l3_share_bytes"):
        assert not values[name]["overridden"]


def test_zero_turns_the_narrow_tiles_row_limited_paths_and_l2_column_blocks_off() -> None:
    overrides = {
        "EML_OPS_NARROW_TILES": "0",
        "EML_OPS_FEW_ROWS_TILES": "0",
        "EML_OPS_TRANSPOSED_MAX_ROWS": "0",
        "EML_OPS_INTERLEAVED_MAX_ROWS": "0",
        "EML_OPS_COLUMN_BLOCK_L2_BYTES": "0",
        "EML_OPS_STREAM_C_BYTES": "0",
        "EML_OPS_WRITE_BOUND_DEPTH": "0",
    }
    values_under(overrides)


@pytest.mark.parametrize("name", ["interleaved_max_rows", "kc"])
def test_a_negative_override_is_ignored_and_a_zero_only_where_it_switches_off(name: str) -> None:
    env = f"EML_OPS_{name.upper()}"
    code = f"import json, eml_ops; print(json.dumps(eml_ops._C.tuning()['values']['{name}']))"
    for text, taken in (("-1", False), ("0", name != "kc")):
        result = run_python(code, **{env: text})
        assert result.returncode == 0, result.stderr
        entry = json.loads(result.stdout)
        assert entry["overridden"] == taken, (text, entry)
        if not taken:
            assert entry["value"] == entry["model"]
            least = 1 if name == "kc" else 0
            assert f"{env}='{text}' ignored: not an integer of at least {least}" in entry["note"]


@pytest.mark.parametrize("text", ["0", "-5", "abc", "12x", ""])
def test_a_bad_override_is_ignored_and_reported(text: str) -> None:
    code = "import json, eml_ops; print(json.dumps(eml_ops._C.tuning()['values']['kc']))"
    result = run_python(code, EML_OPS_KC=text)
    assert result.returncode == 0, result.stderr
    entry = json.loads(result.stdout)
    assert not entry["overridden"]
    assert entry["value"] == entry["model"]
    assert "ignored" in entry["note"] and "EML_OPS_KC" in entry["note"]


def test_info_command() -> None:
    command = [sys.executable, "-m", "eml_ops", "info"]
    text = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    tuning = eml_ops._C.tuning()
    assert f"active {eml_ops._C.get_isa()}" in text
    assert f"mc = {tuning['values']['mc']['value']}" in text
    for policy in ("own", "auto"):
        bf16 = subprocess.run(command, capture_output=True, text=True, check=True,
                              env={**os.environ, "EML_OPS_BF16": policy}).stdout
        assert f"bfloat16: policy {policy} (EML_OPS_BF16)" in bf16
        assert ("ATen's AMX tiles" in bf16) == eml_ops._C.cpu_has_amx_bf16()
        limits = eml_ops._C.bf16_auto_limits()
        assert (f"ours run forwards of up to {eml_ops._C.bf16_own_max_rows(1)} rows"
                in bf16) == (policy == "auto")
        assert (f"dL/dX of up to {limits['input_gradient_rows']} rows"
                in bf16) == (policy == "auto")
    as_json = subprocess.run([*command, "--json"], capture_output=True, text=True, check=True)
    assert json.loads(as_json.stdout) == json.loads(json.dumps(tuning))  # tuples as lists
    generic = subprocess.run([*command, "--isa", "generic"], capture_output=True, text=True,
                             check=True).stdout
    assert "ISA generic, register tile float 6x16" in generic


def test_info_with_an_override_says_so() -> None:
    command = [sys.executable, "-m", "eml_ops", "info"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EML_OPS_")}
    text = subprocess.run(command, capture_output=True, text=True, check=True,
                          env={**env, "EML_OPS_NC": "512"}).stdout
    model = eml_ops._C.tuning()["values"]["nc"]["model"]
    assert f"nc = 512 (EML_OPS_NC; model {model})" in text


def test_gemm_correct_with_this_cpus_blocks() -> None:
    """Shapes just past this CPU's MC and KC (one pass) and past the one-pass depth (float32,
    every supported ISA)."""
    values = eml_ops._C.tuning()["values"]
    m = values["mc"]["value"] + 5
    torch.manual_seed(1)
    for k in (values["kc"]["value"] + 3, values["one_pass_kc"]["value"] + 3):
        x, w, b = torch.randn(m, k), torch.randn(40, k), torch.randn(40)
        want = F.linear(x.double(), w.double(), b.double())
        with eml_ops.use_backend("blocked"):
            for isa in eml_ops._C.supported_isas():
                previous = eml_ops._C.get_isa()
                eml_ops._C.set_isa(isa)
                try:
                    got = eml_ops.linear(x, w, b)
                finally:
                    eml_ops._C.set_isa(previous)
                torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


STREAMED_DW = """
import torch, eml_ops
torch.manual_seed(0)
eml_ops.set_backend("blocked")
results = []
for threads in (1, 2):
    torch.set_num_threads(threads)
    for dtype in (torch.float32, torch.float64):
        # dL/dW of one block of depth (batch 64 and 200), rows of whole cache lines (in 256)
        # or not (in 250); 96 x 256 is 96 KiB of float, past the override below.
        for batch, in_features, out_features in ((64, 256, 96), (200, 256, 96), (64, 250, 96)):
            g = torch.randn(batch, out_features, dtype=dtype)
            x = torch.randn(batch, in_features, dtype=dtype)
            w = torch.randn(out_features, in_features, dtype=dtype)
            results.append(torch.ops.eml.linear_backward(g, x, w, [False, True, True]))
"""


def test_streamed_dw_has_the_bits_of_a_cached_one(tmp_path: Any) -> None:
    """dL/dW written past the caches (EML_OPS_STREAM_C_BYTES=1: every one-pass dL/dW whose
    rows are whole cache lines, on AVX-512 with whole FMAs) has the bits of the one written
    through them (0: off), and matches a float64 reference."""
    outputs = {}
    for stream_bytes in ("1", "0"):
        path = tmp_path / f"dw_{stream_bytes}.pt"
        result = run_python(STREAMED_DW + f"torch.save(results, {str(path)!r})\n",
                            EML_OPS_STREAM_C_BYTES=stream_bytes)
        assert result.returncode == 0, result.stderr
        outputs[stream_bytes] = torch.load(path)
    streamed, cached = outputs["1"], outputs["0"]
    assert len(streamed) == len(cached) == 12
    for (_, dw, db), (_, dw_cached, db_cached) in zip(streamed, cached, strict=True):
        assert torch.equal(dw, dw_cached) and torch.equal(db, db_cached)
    # The first product again, in float64 from the same seed.
    torch.manual_seed(0)
    g, x = torch.randn(64, 96), torch.randn(64, 256)
    torch.testing.assert_close(streamed[0][1].double(), g.double().t() @ x.double(),
                               rtol=1e-5, atol=1e-5)
