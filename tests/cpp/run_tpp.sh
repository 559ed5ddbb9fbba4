#!/usr/bin/env bash
# Builds and runs the standalone test of the TPP (LIBXSMM) GEMM backend. No torch.
#   tests/cpp/run_tpp.sh             correctness sweep
#   tests/cpp/run_tpp.sh --bench     GFLOP/s at 1 thread (add --threads 2)
# EXTRA_CXXFLAGS adds compiler flags (e.g. -fsanitize=address,undefined: tests/sanitize.sh);
# TPP_TEST_BUILD_DIR: where the binary goes (default build/tests_cpp).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${TPP_TEST_BUILD_DIR:-$root/build/tests_cpp}"
mkdir -p "$out"
cxx="${CXX:-g++}"
libs="$(pkg-config --libs libxsmm 2>/dev/null || echo -lxsmm)"
"$cxx" -std=c++17 -O3 -fPIC -Wall -Wextra -DEML_OPS_WITH_LIBXSMM \
  $(pkg-config --cflags libxsmm 2>/dev/null || true) \
  ${EXTRA_CXXFLAGS:-} \
  "$root"/tests/cpp/test_tpp.cpp "$root"/csrc/gemm/tpp/*.cpp "$root"/csrc/gemm/cache_info.cpp "$root"/csrc/gemm/isa.cpp \
  -o "$out/test_tpp" $libs -lxsmmnoblas -lpthread -ldl -lm
exec "$out/test_tpp" "$@"
