#!/usr/bin/env bash
# Run tinygrad's own test files against tinycore, through the shim package beside this script (a `tinygrad` that
# re-exports tinycore). See README.md here.
#
#   TINYGRAD=/path/to/tinygrad bash scripts/tinygrad_suite/run.sh test_ops test_tensor [-- pytest args]
#
# TINYGRAD is a tinygrad checkout (a work tree, or a bare/mirror git directory: its HEAD is read). Nothing is
# downloaded. Needs torch and pytest where python3 runs (and hypothesis for a few files).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
: "${TINYGRAD:?set TINYGRAD to a tinygrad checkout}"
files=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do files+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
work=$(mktemp -d)
show() {  # show PATH: a file of tinygrad's HEAD
  if [ -d "$TINYGRAD/.git" ] || [ -f "$TINYGRAD/HEAD" ]; then git -C "$TINYGRAD" show "HEAD:$1"; else cat "$TINYGRAD/$1"; fi
}
mkdir -p "$work/test/unit" "$work/extra"
touch "$work/test/__init__.py" "$work/test/unit/__init__.py" "$work/extra/__init__.py"
cp "$here/test_helpers/helpers.py" "$work/test/helpers.py"
for unit in test_randomness test_jit test_dtype_spec; do show "test/unit/$unit.py" > "$work/test/unit/$unit.py" 2>/dev/null || true; done
show extra/gradcheck.py > "$work/extra/gradcheck.py" 2>/dev/null || true
for f in "${files[@]}"; do
  f=${f%.py}
  show "test/backend/$f.py" > "$work/$f.py" 2>/dev/null || show "test/$f.py" > "$work/$f.py"
done
cd "$work"
PYTHONPATH="$repo:$here:$work${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest -q -p no:cacheprovider \
  "${files[@]/%/.py}" "$@"
