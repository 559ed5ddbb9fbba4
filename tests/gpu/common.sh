# Sourced by the device scripts (run.sh, scaling.sh): the log folder, time stamps, wheels the
# machine lacks, its description and the build of eml_ops against its torch.
# Wheels of Python packages the machine lacks can be carried in .whl/ (installed to /tmp/site),
# e.g. tqdm for the bench and setuptools >= 77 (pyproject's license field), fetched here with
# `pip download --no-deps -d .whl tqdm "setuptools>=77"`.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
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

# Writes what the machine is (GPU, torch, compiler, CPU) to $out/env.log and stdout.
describe_machine() {
  {
    nvidia-smi -L
    python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
    g++ --version | head -1
    nproc
    lscpu | grep -E "^(Model name|CPU family|Model|Thread|Core|Socket|L1d|L2|L3|NUMA node)"
  } 2>&1 | tee "$out/env.log"
}

# Builds eml_ops in place (editable) against the machine's torch; the build log to $out.
build_eml_ops() {
  stamp "build"
  if ! MAX_JOBS="$(nproc)" python3 -m pip install -q --no-build-isolation --no-deps -e . \
      > "$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    stamp "build FAILED"
    return 1
  fi
}
