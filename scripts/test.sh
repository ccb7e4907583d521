#!/usr/bin/env bash
# Run every test, per backend, in fresh virtual environments (tox), after setting up what the backends need.
#
#   bash scripts/test.sh                 # every env
#   bash scripts/test.sh -- -x           # arguments after the envs go to tox (and through {posargs} to pytest)
#   TINYCORE_TEST_ENVS=core,cl bash scripts/test.sh
#   TINYCORE_TEST_PLAN_ONLY=1 bash scripts/test.sh    # set up, say what would run, run nothing
#   TINYCORE_TEST_PARALLEL=1 bash scripts/test.sh     # one env at a time, its output as it runs (default: tox -p
#                                                     # auto, one env per core, output shown for a failed env)
#
# Needs python3 and a C compiler (gcc or clang). As root on a Debian-like system, it installs the system packages
# the backends use (apt-get): clang (tiny-cpu's preferred compiler; gcc works too), pocl-opencl-icd (the cl env's
# OpenCL driver: PyPI's PoCL 3.0, LLVM 14, builds no kernel on a CPU its LLVM does not know, e.g. AMD Zen 5) and
# chromium (the viz env's browser). Without root it says what it could not install, skips the envs that cannot run
# without it (cl when no OpenCL driver builds a kernel here, viz without Chromium), names them at the end, and exits
# 0 only if every env it ran passed.
set -uo pipefail
cd "$(dirname "$0")/.."

# longest first: tox runs them side by side (TINYCORE_TEST_PARALLEL, default one per core), and the long ones overlap
ALL_ENVS="cl,nv,amd,example,models,onnx,core,cpu,llvm,mpi,sim,python,viz,disk"
IFS=, read -r -a ENVS <<< "${TINYCORE_TEST_ENVS:-$ALL_ENVS}"
NOTES=()
note() { NOTES+=("$1"); echo "scripts/test.sh: $1"; }
wants() { local e; for e in "${ENVS[@]}"; do [ "$e" = "$1" ] && return 0; done; return 1; }
drop_env() { local e kept=(); for e in "${ENVS[@]}"; do [ "$e" != "$1" ] && kept+=("$e"); done; ENVS=("${kept[@]}"); }

# --- system packages: as root through apt-get; otherwise (or without apt) report what is missing
APT_UPDATED=0
install_system_package() {  # install_system_package PACKAGE: 0 when installed now
  local package=$1
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then return 1; fi
  export DEBIAN_FRONTEND=noninteractive
  if [ "$APT_UPDATED" = 0 ]; then apt-get update -qq >/dev/null 2>&1 && APT_UPDATED=1; fi
  apt-get install -y -qq "$package" >/dev/null 2>&1
}
why_not_installed() {
  if [ "$(id -u)" != 0 ]; then echo "not root"; elif ! command -v apt-get >/dev/null 2>&1; then echo "no apt-get";
  else echo "apt-get install failed"; fi
}

if ! command -v clang >/dev/null 2>&1; then
  install_system_package clang || note "clang not installed ($(why_not_installed)): tiny-cpu compiles with gcc"
fi
system_pocl() {  # the system's PoCL is there: its ICD file, and the library that file names (a removed but not
  # purged package leaves the file behind)
  local lib
  [ -e /etc/OpenCL/vendors/pocl.icd ] || return 1
  lib=$(head -n 1 /etc/OpenCL/vendors/pocl.icd)
  [ -e "$lib" ] && return 0
  local dir
  for dir in /usr/lib/*/ /usr/lib/ /usr/local/lib/ /lib/*/; do [ -e "$dir$lib" ] && return 0; done
  ldconfig -p 2>/dev/null | grep -qF "$lib"
}
if wants cl && ! system_pocl; then
  install_system_package pocl-opencl-icd || note "pocl-opencl-icd not installed ($(why_not_installed)): the cl env uses PyPI's PoCL if it builds kernels on this CPU"
fi
# point the OpenCL loader at the system's PoCL alone (pyopencl's bundled loader would also list PyPI's); tox passes
# OCL_ICD_* on to the cl env
if system_pocl && [ -z "${OCL_ICD_VENDORS:-}" ] && [ -z "${OCL_ICD_FILENAMES:-}" ]; then
  export OCL_ICD_VENDORS=/etc/OpenCL/vendors/pocl.icd
fi
CHROMIUM=${TINYCORE_CHROMIUM:-/usr/bin/chromium}
if wants viz && [ ! -x "$CHROMIUM" ]; then
  install_system_package chromium || true
  if [ ! -x "$CHROMIUM" ]; then
    note "chromium not installed ($(why_not_installed)): viz env skipped (it drives VIZ's page in the system's Chromium)"
    drop_env viz
  fi
fi

if [ -n "${TINYCORE_TEST_PLAN_ONLY:-}" ]; then  # (the set-up's decisions, for tests/test_fresh_install.py)
  echo "scripts/test.sh: would run tox -e $(IFS=,; echo "${ENVS[*]}") (cl if an OpenCL device builds a kernel)" \
       "with OCL_ICD_VENDORS=${OCL_ICD_VENDORS:-}"
  exit 0
fi
# tox: the one already there, else installed by pip, else (an externally managed Python, PEP 668: Debian's python3
# for a user) in a virtual environment of its own under .tox/, else in the user's site-packages
TOX=(python3 -m tox)
if ! python3 -m tox --version >/dev/null 2>&1 && ! python3 -m pip install --quiet "tox>=4" >/dev/null 2>&1; then
  if python3 -m venv .tox/runner >/dev/null 2>&1 && .tox/runner/bin/python -m pip install --quiet "tox>=4"; then
    TOX=(.tox/runner/bin/python -m tox)
  elif python3 -m pip install --quiet --user --break-system-packages "tox>=4"; then
    note "tox installed in the user's site-packages (python3 is externally managed and has no venv module)"
  else
    echo "scripts/test.sh: could not install tox (pip install tox, or a virtual environment with it, failed)"; exit 1
  fi
fi

# --- the cl env runs only where an OpenCL driver builds a kernel: build its env, then ask it
# (an env that fails to install is not skipped: tox runs it below and reports the failure)
if wants cl && "${TOX[@]}" -e cl --notest -q >/dev/null 2>&1; then
  probe=$(.tox/cl/bin/python -c "from tinycore import Device; Device['CL']" 2>&1) || {
    note "cl env skipped: no OpenCL device here builds a kernel ($(printf '%s' "$probe" | tail -n 1 | cut -c1-400))"
    drop_env cl
  }
fi

if [ "${#ENVS[@]}" = 0 ]; then echo "scripts/test.sh: no env left to run"; exit 1; fi
RUN=$(IFS=,; echo "${ENVS[*]}")
PARALLEL=${TINYCORE_TEST_PARALLEL:-auto}
if [ "$PARALLEL" = 1 ]; then
  echo "scripts/test.sh: running tox -e $RUN"
  "${TOX[@]}" -e "$RUN" "$@"
else  # (an env's output is shown when it fails; the summary lists every env with its time)
  echo "scripts/test.sh: running tox -p $PARALLEL -e $RUN"
  "${TOX[@]}" -p "$PARALLEL" --parallel-no-spinner -e "$RUN" "$@"
fi
status=$?
if [ "${#NOTES[@]}" != 0 ]; then
  echo; echo "scripts/test.sh: ran $RUN; what could not be set up:"
  for line in "${NOTES[@]}"; do echo "  - $line"; done
fi
exit $status
