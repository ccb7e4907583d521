#!/usr/bin/env bash
# The real-GPU check of tiny-nv, for a machine with an NVIDIA GPU and no network (see README "NVIDIA GPUs"):
#   bash scripts/gpu-check.sh [--emulate] OUTDIR
# Installs the checkout (nothing fetched: numpy, pluggy, attrs, pytest and nvidia-cuda-nvrtc must be there), then
# runs `tinycore devices --check`, the conformance suite on NV, tiny-nv's device tests on the GPU (CPU<->NV and
# NV->DISK copies and assigns, staging, timestamps), bench_core on NV and the same workloads in torch on CUDA when
# torch is importable. Every step's output goes to OUTDIR/<step>.txt; OUTDIR/summary.txt has one line per step with
# its exit status and seconds. Each step has its own time limit, cut to what is left of a 270 s budget, so the whole
# run ends within 5 minutes whatever hangs.
# --emulate: a dry run of this script on a machine without a GPU (TINYCORE_NV_EMULATE=1: the mock driver; a slice
# of the conformance suite; the bench on CPU, since the mock interprets PTX). $PYTHON picks the interpreter.
set -uo pipefail
EMULATE=0
if [ "${1:-}" = "--emulate" ]; then EMULATE=1; shift; fi
OUT=${1:?usage: bash scripts/gpu-check.sh [--emulate] OUTDIR}
cd "$(dirname "$0")/.."
ROOT=$(pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
BUDGET_S=270
DEADLINE=$(( $(date +%s) + BUDGET_S ))
export TINYCORE_CACHE_DIR
TINYCORE_CACHE_DIR=$(mktemp -d)  # fresh: every kernel compiled here; kept out of OUTDIR (thousands of files)
# unbuffered: a step cut by its time limit still leaves what it printed
export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
unset TINYCORE_DEVICE TINYCORE_NV_CHECK_CUBINS
CONFORMANCE_ARGS=()
BENCH_DEVICE=NV BENCH_REPEAT=3
if [ "$EMULATE" = 1 ]; then
  export TINYCORE_NV_EMULATE=1
  CONFORMANCE_ARGS=(-k "test_elementwise or test_copy")
  BENCH_DEVICE=CPU BENCH_REPEAT=1
else
  unset TINYCORE_NV_EMULATE
fi
: > "$OUT/summary.txt"
failed=0

step() {  # step NAME SECONDS COMMAND...: run with a time limit, output to OUT/NAME.txt, status to the summary
  local name=$1 limit=$2 start rc left
  shift 2
  left=$(( DEADLINE - $(date +%s) ))
  [ "$limit" -le "$left" ] || limit=$left
  if [ "$limit" -lt 5 ]; then
    echo "== $name: SKIPPED (the ${BUDGET_S} s budget is spent)" | tee -a "$OUT/summary.txt"
    failed=1
    return 1
  fi
  start=$(date +%s)
  echo "== $name (limit ${limit} s): $*" | tee -a "$OUT/summary.txt"
  timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.txt" 2>&1 < /dev/null
  rc=$?
  echo "   $name: exit $rc after $(( $(date +%s) - start )) s$([ "$rc" -eq 124 ] && echo ' (TIMED OUT)')" \
    | tee -a "$OUT/summary.txt"
  tail -n 3 "$OUT/$name.txt"
  [ "$rc" -eq 0 ] || failed=1
  return "$rc"
}

# Without pip (or where pip may not write): the checkout on PYTHONPATH, with a .dist-info per package for its entry
# points (tinycore finds its device plugins, and pytest the conformance suite, through them).
metadata_without_pip() {
  "$PY" - "$OUT/site" <<'EOF'
import pathlib, sys, tomllib
site = pathlib.Path(sys.argv[1])
for project in (".", "plugins/tiny-cpu", "plugins/tiny-disk", "plugins/tiny-nv"):
  meta = tomllib.loads(pathlib.Path(project, "pyproject.toml").read_text())["project"]
  info = site / f"{meta['name'].replace('-', '_')}-{meta['version']}.dist-info"
  info.mkdir(parents=True, exist_ok=True)
  (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n")
  groups = meta.get("entry-points", {})
  sections = [f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items())
              for group, points in groups.items()]
  (info / "entry_points.txt").write_text("".join(sections))
EOF
}

install() {
  local pip=("$PY" -m pip install --no-deps --no-build-isolation --no-index -e . -e plugins/tiny-cpu
             -e plugins/tiny-disk -e plugins/tiny-nv)
  "${pip[@]}" && return 0
  echo "--- pip could not install; again with --break-system-packages (a distribution-managed Python)"
  "${pip[@]}" --break-system-packages && return 0
  echo "--- pip could not install; falling back to PYTHONPATH with entry-point metadata in $OUT/site"
  metadata_without_pip
}

installed() {  # the core, tiny-nv and the conformance suite's pytest plugin resolve from this checkout
  "$PY" - "$ROOT" <<'EOF'
import sys, importlib.metadata as md, tinycore, tiny_nv
root = sys.argv[1]
assert tinycore.__file__.startswith(root) and tiny_nv.__file__.startswith(root), (tinycore.__file__, tiny_nv.__file__)
devices = {entry.name for entry in md.entry_points(group="tinycore")}
assert {"cpu", "nv"} <= devices, f"tinycore plugins found: {sorted(devices)}"
print("tinycore from", tinycore.__file__, "; plugins:", sorted(devices))
EOF
}

nv_passes() {  # `tinycore devices --check`, which must have checked NV (an unavailable device is only listed)
  local report rc
  report=$("$PY" -m tinycore devices --check 2>&1)
  rc=$?
  printf '%s\n' "$report"
  [ "$rc" -eq 0 ] || return "$rc"
  grep -q "^NV: PASS" <<< "$report" || { echo "NV was not checked: it is unavailable (its row says why)"; return 1; }
}

export -f install installed metadata_without_pip nv_passes  # `timeout` runs them through bash -c
export PY OUT ROOT
step environment 20 bash -c "uname -a; $PY --version; timeout 10 nvidia-smi || echo 'no nvidia-smi'; \
  $PY -m pip list 2>/dev/null | grep -i -E 'numpy|pluggy|attrs|pytest|nvrtc|torch|cuda|setuptools' || true"
step install 60 bash -c install
if ! timeout 20 bash -c installed >> "$OUT/install.txt" 2>&1; then
  # pip did not make this checkout importable (or failed): the checkout on PYTHONPATH with its entry points
  metadata_without_pip >> "$OUT/install.txt" 2>&1
  export PYTHONPATH="$OUT/site:$ROOT:$ROOT/plugins/tiny-cpu:$ROOT/plugins/tiny-disk:$ROOT/plugins/tiny-nv"
fi
step installed 20 bash -c installed
step devices 40 bash -c nv_passes
# -v: if the time limit cuts the suite, the last line names the test it was in
step conformance 130 "$PY" -m pytest -v --durations=15 -p no:cacheprovider --pyargs tinycore.testing \
  --tinycore-device=NV -rfE \
  ${CONFORMANCE_ARGS[@]+"${CONFORMANCE_ARGS[@]}"}
step copies 30 "$PY" -m pytest -q -p no:cacheprovider plugins/tiny-nv/tests/test_device.py -rfE
step bench-nv 60 "$PY" bench/bench_core.py --device "$BENCH_DEVICE" --repeat "$BENCH_REPEAT"
step bench-torch 30 "$PY" bench/bench_torch_cuda.py --repeat 3
rm -rf "$TINYCORE_CACHE_DIR"
verdict=$([ $failed -eq 0 ] && echo PASS || echo FAIL)
echo "results in $OUT (summary.txt); overall: $verdict" | tee -a "$OUT/summary.txt"
exit $failed
