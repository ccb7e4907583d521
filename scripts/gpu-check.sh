#!/usr/bin/env bash
# The real-GPU check of tiny-nv, for a machine with an NVIDIA GPU and no network (see README "NVIDIA GPUs"):
#   bash scripts/gpu-check.sh OUTDIR
# Installs the project (no dependencies fetched: numpy, pluggy, attrs, pytest and nvidia-cuda-nvrtc must be there),
# then runs `tinycore devices --check`, the conformance suite on NV, tiny-nv's device tests on the real GPU (CPU<->NV
# and NV->DISK copies and assigns, staging, timestamps), bench_core on NV and the same workloads in torch on CUDA
# when torch is importable. Every step's output goes to OUTDIR/<step>.txt, and OUTDIR/summary.txt has one line per
# step with its exit status and seconds. Each step has its own time limit; the whole run stays under 5 minutes.
set -uo pipefail
OUT=${1:?usage: bash scripts/gpu-check.sh OUTDIR}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
export TINYCORE_CACHE_DIR="$OUT/tinycore-cache"
unset TINYCORE_NV_EMULATE TINYCORE_DEVICE
: > "$OUT/summary.txt"
failed=0

step() {  # step NAME SECONDS COMMAND...: run with a time limit, output to OUT/NAME.txt, status to the summary
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  echo "== $name: $*" | tee -a "$OUT/summary.txt"
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  rc=$?
  echo "   $name: exit $rc after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
  [ "$rc" -eq 0 ] || failed=1
  tail -n 3 "$OUT/$name.txt"
}

step environment 20 bash -c "uname -a; $PY --version; nvidia-smi || echo 'no nvidia-smi'; \
  $PY -m pip list 2>/dev/null | grep -i -E 'numpy|pluggy|attrs|pytest|nvrtc|torch|cuda' || true"
step install 90 "$PY" -m pip install --no-deps --no-build-isolation -e . -e plugins/tiny-cpu -e plugins/tiny-disk \
  -e plugins/tiny-nv
step devices 60 "$PY" -m tinycore devices --check
step conformance 150 "$PY" -m pytest -q -p no:cacheprovider --pyargs tinycore.testing --tinycore-device=NV -rfE
step copies 40 "$PY" -m pytest -q -p no:cacheprovider plugins/tiny-nv/tests/test_device.py -rfE
step bench-nv 60 "$PY" bench/bench_core.py --device NV,CPU --repeat 3
step bench-torch 40 "$PY" bench/bench_torch_cuda.py --repeat 3
echo "results in $OUT (summary.txt); overall: $([ $failed -eq 0 ] && echo PASS || echo FAIL)" | tee -a "$OUT/summary.txt"
exit $failed
