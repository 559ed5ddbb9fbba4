#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer run of eml_ops, beside the release build:
#
#   1. builds libeml_ops.so and eml_ops._C with EML_OPS_SANITIZE=1 (setup.py adds
#      -fsanitize=address,undefined -fno-sanitize-recover=undefined -O1 -g) into
#      build/sanitize/eml_ops/ (objects in build/temp-sanitize/); the release build
#      (eml_ops/*.so, build/temp-release/) is not touched;
#   2. copies the Python files of eml_ops/ next to the built .so (build/sanitize/eml_ops/);
#   3. builds and runs the standalone GEMM test (tests/cpp/test_gemm.cpp) with the sanitizers,
#      and the standalone TPP test (tests/cpp/test_tpp.cpp) where LIBXSMM is installed;
#   4. runs the kernel and op tests against the sanitized package, with libasan preloaded,
#      checking inside pytest (and every xdist worker) that eml_ops, eml_ops._C and
#      libeml_ops.so really come from build/sanitize/ and that the ASan runtime is loaded.
#
# Exits non-zero on any test failure and on any sanitizer report: reports halt the process
# that hit them (ASan by default, UBSan through -fno-sanitize-recover / halt_on_error) and are
# also written to build/sanitize/logs/, which must stay empty, so that a report in a child
# process whose failure something swallowed still fails the run.
#
# Usage: tests/sanitize.sh [extra pytest args]       (MAX_JOBS / SANITIZE_JOBS: parallelism)
# Takes several minutes, mostly the sanitized compile (see the timings it prints).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PY="${PY:-$root/.venv/bin/python}"
out="$root/build/sanitize"
logs="$out/logs"
jobs="${SANITIZE_JOBS:-${MAX_JOBS:-$(nproc)}}"
start=$SECONDS
phase() { echo "== [$((SECONDS - start)) s] $*"; }

# 1. The sanitized library and extension.
phase "building the sanitized library and extension into build/sanitize (MAX_JOBS=$jobs)"
mkdir -p "$out"
EML_OPS_SANITIZE=1 MAX_JOBS="$jobs" "$PY" setup.py -q build_ext --build-lib "$out"
so="$(ls "$out"/eml_ops/_C*.so)"
lib="$out/eml_ops/libeml_ops.so"

# 2. The Python files of the package beside it (stale copies removed first).
rm -f "$out"/eml_ops/*.py
cp eml_ops/*.py "$out/eml_ops/"

# The ASan runtime the .so was linked against; it must be loaded before anything else
# (python itself is not instrumented), hence LD_PRELOAD. libstdc++ is preloaded right after
# it: ASan looks up the real __cxa_throw when it starts, and python does not load libstdc++
# until torch is imported, so without it every C++ exception (each TORCH_CHECK that fires)
# dies with "CHECK failed: ... real___cxa_throw != 0". libubsan is an ordinary dependency of
# the .so and needs no preloading.
libasan="$(ldd "$so" | awk '/libasan/ {print $3}')"
libstdcxx="$(ldd "$so" | awk '/libstdc\+\+/ {print $3}')"
if [[ -z "$libasan" || ! -f "$libasan" || -z "$libstdcxx" || ! -f "$libstdcxx" ]]; then
  echo "sanitize.sh: $so is not linked against libasan and libstdc++" >&2
  exit 1
fi
# ldd's output first, then grep: `ldd | grep -q` fails under pipefail when grep exits before
# ldd ends (ldd gets SIGPIPE), which made these checks fail now and then.
for binary in "$so" "$lib"; do
  dependencies="$(ldd "$binary")"
  if ! grep -q libubsan <<<"$dependencies" || ! grep -q libasan <<<"$dependencies"; then
    echo "sanitize.sh: $binary is not linked against libasan and libubsan" >&2
    exit 1
  fi
done
extension_dependencies="$(ldd "$so")"
if ! grep -q "libeml_ops.so => $lib" <<<"$extension_dependencies"; then
  echo "sanitize.sh: $so does not load the sanitized $lib" >&2
  exit 1
fi

rm -rf "$logs"
mkdir -p "$logs"
# detect_leaks=0: CPython (and libtorch's static registries) do not free everything at exit,
# so LeakSanitizer would report thousands of interpreter "leaks" that are not ours; leaks of
# the kernels are covered by tests/test_memory.py instead. Everything else stays on.
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1:log_path=$logs/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan"

fail=0
check_logs() {
  if compgen -G "$logs/*" > /dev/null; then
    echo "sanitize.sh: sanitizer reports ($1):" >&2
    for report in "$logs"/*; do
      echo "--- $report" >&2
      cat "$report" >&2
    done
    fail=1
  fi
}

# The sanitizer flags of the standalone C++ tests (steps 3 and 3b).
standalone_flags='-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined'

# 3. The GEMM library on its own, built with the same sanitizers (tests/cpp/run.sh, its
#    objects in our folder rather than the shared /tmp one).
phase "standalone GEMM test with ASan+UBSan"
mkdir -p "$out/tmp"
if ! TMPDIR="$out/tmp" \
    EXTRA_CXXFLAGS="$standalone_flags" \
    bash tests/cpp/run.sh; then
  echo "sanitize.sh: the standalone GEMM test failed" >&2
  fail=1
fi
check_logs "standalone GEMM test"

# 3b. The standalone TPP (LIBXSMM) test the same way, where LIBXSMM is installed (as in
#     make cpp-test). LIBXSMM's JIT-generated kernels are not instrumented, our code is.
if [[ -f tests/cpp/run_tpp.sh ]] && pkg-config --exists libxsmm; then
  phase "standalone TPP test with ASan+UBSan"
  if ! TPP_TEST_BUILD_DIR="$out/tpp" \
      EXTRA_CXXFLAGS="$standalone_flags" \
      bash tests/cpp/run_tpp.sh; then
    echo "sanitize.sh: the standalone TPP test failed" >&2
    fail=1
  fi
  check_logs "standalone TPP test"
fi

# 4. The op tests against the sanitized package. `python -P` keeps the working directory off
#    sys.path (it would put the release eml_ops/ first); PYTHONPATH puts build/sanitize before
#    the repository (which provides the `tests` package). The plugin below fails the session
#    in every pytest process unless eml_ops, eml_ops._C and libeml_ops.so come from
#    build/sanitize and libasan is loaded.
cat > "$out/eml_ops_sanitize_check.py" <<'EOF'
"""pytest plugin of tests/sanitize.sh: are we testing the sanitized build?"""

import os

import pytest


def pytest_configure(config):
    import eml_ops

    root = os.environ["EML_OPS_SANITIZED_ROOT"] + os.sep
    for path in (eml_ops.__file__, eml_ops._C.__file__, eml_ops.library_path()):
        if not os.path.realpath(path).startswith(root):
            raise pytest.UsageError(f"not the sanitized build: {path} is outside {root}")
    with open("/proc/self/maps") as maps:
        if "libasan" not in maps.read():
            raise pytest.UsageError("the ASan runtime is not loaded")
    print(f"sanitize.sh: testing {eml_ops._C.__file__}")
EOF

# The property tests draw hypothesis's "dev" budget here (60 examples each) unless
# HYPOTHESIS_PROFILE says otherwise: the release run (make test) draws the "ci" budget under
# CI; this run looks for memory errors on the paths those examples take.
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-dev}"
phase "op tests against build/sanitize (hypothesis profile $HYPOTHESIS_PROFILE)"
tests=(tests/test_ops.py tests/test_errors.py tests/test_properties.py tests/test_reliability.py
       tests/test_threads.py tests/test_frozen.py)
# tests/test_memory.py is left out on purpose: ASan's quarantine holds freed memory back
# (256 MiB by default), so resident memory is not expected to stay flat under ASan.
xdist=()
if [[ "$jobs" -gt 1 ]] && "$PY" -c "import xdist" 2> /dev/null; then
  # A crashed worker is restarted (its test fails); allow enough restarts to finish the run.
  xdist=(-n "$jobs" --max-worker-restart=50)
fi
if ! EML_OPS_SANITIZED_ROOT="$out" PYTHONPATH="$out:$root" PYTHONMALLOC=malloc \
    LD_PRELOAD="$libasan:$libstdcxx${LD_PRELOAD:+:$LD_PRELOAD}" \
    "$PY" -P -m pytest -p eml_ops_sanitize_check -p no:cacheprovider -q "${xdist[@]}" \
    "${tests[@]}" "$@"; then
  echo "sanitize.sh: tests failed under the sanitizers" >&2
  fail=1
fi
check_logs "op tests"

phase "done: $([[ $fail -eq 0 ]] && echo clean || echo FAILED)"
exit "$fail"
