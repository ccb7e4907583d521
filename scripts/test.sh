#!/usr/bin/env bash
# Run every test, per backend, in fresh virtual environments (tox). Needs python3 and a C compiler (clang or gcc).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet "tox>=4"
python3 -m tox -e core,cpu,sim,disk,cl,python,example,llvm,amd,nv,viz "$@"
