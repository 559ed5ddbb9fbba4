#!/usr/bin/env bash
# Thread scaling on the device machine (16 cores, see run.sh): build eml_ops there, then the
# forward bench of 1024^3, 4096^3, 256x4096x4096 and 8x4096x4096 at 1 to 16 threads against
# F.linear, once with the detected ISA and once with EML_OPS_ISA=avx2. The summary's last
# lines give the parallel efficiency and the FMA peak of t threads at once (below 1.00 of t
# cores: the all-core clock); each bench's folder and log go to $OUT.
#
#   bash tests/gpu/scaling.sh   # SCALING_THREADS, SCALING_SHAPES, SCALING_RUNS,
#                               # SCALING_REPEATS and SCALING_ISAS override the defaults
set -uo pipefail
source "$(dirname "$0")/common.sh"
describe_machine
build_eml_ops || exit 1
# The tuning as text and as data; a crash leaves Python's stack (and gdb's, where present).
python3 -m eml_ops info --json > "$out/info.json" 2>&1 || echo "eml_ops info --json FAILED"
if ! python3 -X faulthandler -m eml_ops info > "$out/info.log" 2>&1; then
  echo "eml_ops info FAILED:"
  tail -20 "$out/info.log"
  if command -v gdb > /dev/null; then
    gdb -batch -ex run -ex bt --args python3 -m eml_ops info > "$out/info-gdb.log" 2>&1
    grep -A30 "SIGSEGV" "$out/info-gdb.log" | head -40
  fi
fi

status=0
for isa in ${SCALING_ISAS:-detected avx2}; do
  stamp "bench, ISA $isa"
  isa_env=()
  [[ $isa != detected ]] && isa_env=("EML_OPS_ISA=$isa")
  env "${isa_env[@]}" timeout "${SCALING_TIMEOUT:-200}" python3 -m eml_ops bench \
    --modes forward --backends blocked --no-plot --no-overhead \
    --threads "${SCALING_THREADS:-1,2,4,8,16}" \
    --shapes "${SCALING_SHAPES:-1024x1024x1024,4096x4096x4096,256x4096x4096,8x4096x4096}" \
    --runs "${SCALING_RUNS:-2}" --repeats "${SCALING_REPEATS:-5}" \
    --out "$out/scaling-$isa" > "$out/scaling-$isa.log" 2>&1 || status=1
  grep -E "^(AMD|Intel)|MC x KC" "$out/scaling-$isa.log" | head -2
  sed -n '/^Summary/,$p' "$out/scaling-$isa.log"
done
stamp "done, status $status"
exit "$status"
