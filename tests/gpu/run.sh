#!/usr/bin/env bash
# One session on a CUDA machine (the `device` tool's H200: torch 2.11+cu130, 16 cores, no
# LIBXSMM, no network): build eml_ops there, run the CUDA checks of tests/gpu/, then the
# whole test suite. Every log goes to $OUT (or build/gpu-logs); the summary to stdout.
#
#   bash tests/gpu/run.sh            # PYTEST_TIMEOUT (s, default 300) bounds the suite
#
# Wheels of Python packages the machine lacks can be carried in .whl/ (installed to /tmp/site).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build/gpu-logs}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
export PIP_NO_INDEX=1  # no network there: pip must not wait on an index
start=$SECONDS
stamp() { echo "== [$((SECONDS - start)) s] $*"; }

if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
{
  nvidia-smi -L
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
  g++ --version | head -1
  nproc
} 2>&1 | tee "$out/env.log"

stamp "build"
if ! MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps -e . \
    > "$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  stamp "build FAILED"
  exit 1
fi

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
