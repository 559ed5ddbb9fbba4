#!/usr/bin/env bash
# Builds and runs the standalone GEMM test with the extension's flags (no -march):
#   tests/cpp/run.sh                  correctness tests
#   tests/cpp/run.sh bench [threads] [m n k]   GFLOP/s of the forward layout
# EXTRA_CXXFLAGS adds flags (e.g. -DEML_GEMM_MC_F32=... for block-size tuning).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${TMPDIR:-/tmp}/eml_ops_test_gemm"
mkdir -p "$build"
# shellcheck disable=SC2086
g++ -O3 -std=c++17 -fPIC -Wall -Wextra ${EXTRA_CXXFLAGS:-} -I"$root/csrc" \
  "$root"/csrc/gemm/*.cpp "$root"/csrc/gemm/blocked/*.cpp "$root/tests/cpp/test_gemm.cpp" \
  -pthread -o "$build/test_gemm"
exec "$build/test_gemm" "$@"
