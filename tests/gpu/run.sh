#!/usr/bin/env bash
# One session on a CUDA machine (the `device` tool's H200: torch 2.11+cu130, 16 cores, no
# LIBXSMM, no network): build eml_ops there, run the CUDA checks of tests/gpu/, then the
# whole test suite. Every log goes to $OUT (or build/gpu-logs); the summary to stdout.
#
#   bash tests/gpu/run.sh            # PYTEST_TIMEOUT (s, default 300) bounds the suite
set -uo pipefail
source "$(dirname "$0")/common.sh"
describe_machine
build_eml_ops || exit 1

status=0
for check in tests/gpu/check_errors_cuda.py tests/gpu/check_func_cuda.py; do
  name="$(basename "$check" .py)"
  stamp "$name"
  python3 "$check" > "$out/$name.log" 2>&1 || status=1
  grep -E "FAIL" "$out/$name.log" | head -20
  tail -2 "$out/$name.log"
done

stamp "pytest -n 16 (whole suite)"
timeout "${PYTEST_TIMEOUT:-300}" python3 -m pytest -n 16 -q -p no:cacheprovider \
  -o addopts="-ra" > "$out/pytest.log" 2>&1 || status=1
grep -E "^(FAILED|ERROR)" "$out/pytest.log" | head -40
tail -3 "$out/pytest.log"
stamp "done, status $status"
exit "$status"
