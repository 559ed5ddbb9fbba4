#!/usr/bin/env bash
# Builds and runs the standalone GEMM test with the extension's flags (no -march):
#   tests/cpp/run.sh                           correctness tests (exit 1 on failure)
#   tests/cpp/run.sh bench [threads [m n k]]   GFLOP/s, forward layout (see test_gemm.cpp)
# EXTRA_CXXFLAGS adds compiler flags, e.g. -fsanitize=address,undefined, or
# -DEML_GEMM_PORTABLE_ONLY. The cache blocks and thresholds follow EML_OPS_* (tuning.h).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${TMPDIR:-/tmp}/eml_ops_test_gemm"
mkdir -p "$build"
sources=("$root"/csrc/gemm/*.cpp "$root"/csrc/gemm/blocked/*.cpp "$root/tests/cpp/test_gemm.cpp")
flags="-O3 -std=c++17 -fPIC -Wall -Wextra ${EXTRA_CXXFLAGS:-} -I$root/csrc"
# One compiler per core (or MAX_JOBS); objects are named after their paths, which are unique.
printf '%s\n' "${sources[@]}" | xargs -P "${MAX_JOBS:-$(nproc)}" -I{} sh -c \
  'src="$1"; obj="$2/$(echo "${src#$3/}" | tr / _).o"; g++ $4 -c "$src" -o "$obj"' \
  _ {} "$build" "$root" "$flags"
objects=()
for src in "${sources[@]}"; do objects+=("$build/$(echo "${src#"$root"/}" | tr / _).o"); done
# shellcheck disable=SC2086
g++ ${EXTRA_CXXFLAGS:-} "${objects[@]}" -pthread -o "$build/test_gemm"
if [[ $# -gt 0 ]]; then
  exec "$build/test_gemm" "$@"
fi
# The problems split between EML_GEMM_TEST_SHARDS processes (default: MAX_JOBS, else the
# CPUs), which run side by side; each prints its summary.
shards="${EML_GEMM_TEST_SHARDS:-${MAX_JOBS:-$(nproc)}}"
pids=()
for ((shard = 0; shard < shards; shard++)); do
  EML_GEMM_TEST_SHARD="$shard/$shards" "$build/test_gemm" > "$build/shard$shard.log" 2>&1 &
  pids+=("$!")
done
failed=0
for shard in "${!pids[@]}"; do
  wait "${pids[$shard]}" || failed=1
  cat "$build/shard$shard.log"
done
if [[ $failed -ne 0 ]]; then
  echo "FAIL: a shard of test_gemm failed (above)" >&2
  exit 1
fi
# The EML_OPS_ISA override, read once at start-up: an ISA the CPU has is taken; one it
# lacks, or an unknown name, leaves the detected one.
detected="$(env -u EML_OPS_ISA "$build/test_gemm" active-isa)"
isas=(generic avx2 avx512)
for request in "${isas[@]}" bogus; do
  want="$detected"
  for isa in "${isas[@]}"; do
    [[ $isa == "$request" ]] && want=$request
    [[ $isa == "$detected" ]] && break  # ISAs past the detected one are not supported
  done
  got="$(EML_OPS_ISA=$request "$build/test_gemm" active-isa)"
  if [[ $got != "$want" ]]; then
    echo "FAIL: EML_OPS_ISA=$request gave active ISA $got, want $want" >&2
    exit 1
  fi
done
echo "EML_OPS_ISA override: ok (detected $detected)"
