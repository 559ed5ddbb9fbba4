#!/usr/bin/env bash
# The whole suite against another torch release, beside the main build:
#
#   1. copies the tree (tracked and untracked files, not the ignored ones) into
#      build/torch-<version>/tree/; that copy keeps its own build/ (object files) between
#      runs, so a rerun compiles only what changed;
#   2. runs that copy's `make test` with its own venv, .venv-torch<version>/ (created on the
#      first run: torch==<version> and requirements-dev.txt), which builds eml_ops there
#      against that torch and runs the suite.
#
# The main .venv/, eml_ops/*.so and build/temp-* are not touched. Prints the pytest summary
# line of the run last, prefixed with "test-torch <version>:".
#
# Every test runs; the property tests draw hypothesis's "dev" budget of examples (60 each,
# tests/conftest.py) unless HYPOTHESIS_PROFILE says otherwise: under CI the pinned torch's
# run draws the "ci" budget (500 each), and the torch release does not change which
# shapes, strides and dtypes our kernels get right, only whether the ops and their
# integrations work, which the dev budget shows (and keeps CI well inside its time limit).
#
# Usage: tests/other_torch.sh <torch version> [extra pytest args]    (`make test-torch`)
set -euo pipefail

if [[ $# -lt 1 || -z "$1" ]]; then
  echo "usage: tests/other_torch.sh <torch version, e.g. 2.14.1> [pytest args]" >&2
  exit 2
fi
version="$1"
shift
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tree="$root/build/torch-$version/tree"
venv="$root/.venv-torch$version"
log="$root/build/torch-$version/test.log"
start=$SECONDS
phase() { echo "== [$((SECONDS - start)) s] test-torch $version: $*"; }

# 1. The copy: everything but its build/ replaced, so that files deleted here go there too.
phase "copying the tree into ${tree#"$root"/}"
mkdir -p "$tree"
find "$tree" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} +
git ls-files -z --cached --others --exclude-standard \
  | tar --null --files-from=- --ignore-failed-read -cf - \
  | tar -xf - -C "$tree"
# A git index of its own, so that what asks git which files the tree holds (the docs' link
# check) sees the copied files instead of the enclosing checkout, where build/ is ignored.
git -C "$tree" init -q
git -C "$tree" add -A

# 2. Its make test, in its venv. The build stamp goes first: the copy's eml_ops/*.so were
#    removed with the rest, and the rebuild only links (the objects under its build/ stay).
rm -f "$venv/.eml_ops-built"
phase "make test in the copy, venv ${venv#"$root"/} (torch==$version)"
make_args=(VENV="$venv" TORCH_PIN="torch==$version")
if [[ $# -gt 0 ]]; then
  make_args+=(PYTEST_ARGS="$*")
fi
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-dev}"
phase "hypothesis profile $HYPOTHESIS_PROFILE"
status=0
make -C "$tree" test "${make_args[@]}" 2>&1 | tee "$log" || status=$?
summary="$(grep -E '^=+ .*[0-9]+ (passed|failed|error)' "$log" | tail -n 1 || true)"
phase "done in $((SECONDS - start)) s, exit status $status"
echo "test-torch $version: ${summary:-no pytest summary (see $log)}"
exit "$status"
