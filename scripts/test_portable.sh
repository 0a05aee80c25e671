#!/usr/bin/env bash
# The portable build of the native core (CQ_PORTABLE=1, native/platform.h: the
# code macOS runs: polled waits, no futexes, no size-keeping fallocate, no
# abstract sockets), built into a directory of its own, and the tests of what
# the platform layer changes run against it: waiting and notify on threads and
# event loops, files growing and rolling, locks, crash recovery, full disk.
# tests/test_platform.py proves the portable build is the one loaded.
# Usage: scripts/test_portable.sh [pytest args]   (PYTHON: the interpreter)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
cp -r "$ROOT/aiochronicle" "$DIR/"
find "$DIR/aiochronicle" \( -name '*.so' -o -name '__pycache__' \) -prune -exec rm -rf {} +
(cd "$ROOT" && CQ_PORTABLE=1 "$PY" setup.py -q build_ext --build-lib "$DIR" \
  --build-temp "$DIR/build" >/dev/null)
# one crash campaign of the four (60 SIGKILLs: every code path of the others, which
# differ by their seed only; the checkout's pass runs all four, issue 32's 240 kills)
ONE_CAMPAIGN=()
for c in 1 2 3; do
  ONE_CAMPAIGN+=(--deselect "tests/test_crash.py::test_random_sigkill_of_writers[$c]")
done
# from $DIR, so that `python -m pytest` puts the portable package first on sys.path
# (and PYTHONPATH gives it to the subprocesses the tests start)
cd "$DIR"
AIOCHRONICLE_EXPECT_PLATFORM=portable PYTHONPATH="$DIR" "$PY" -m pytest \
  -c "$ROOT/pyproject.toml" --rootdir "$ROOT" -p no:cacheprovider -q \
  "$ROOT/tests/test_platform.py" \
  "$ROOT/tests/test_pauser.py" \
  "$ROOT/tests/test_async.py" \
  "$ROOT/tests/test_rolling.py" \
  "$ROOT/tests/test_lock_safety.py" \
  "$ROOT/tests/test_recovery.py" \
  "$ROOT/tests/test_crash.py" \
  "$ROOT/tests/test_no_fallocate.py" \
  "${ONE_CAMPAIGN[@]}" "$@"
