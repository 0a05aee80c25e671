#!/usr/bin/env bash
# Set everything up and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
# clang builds the libFuzzer target of the native core (gcc builds everything else)
if ! command -v clang >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null) \
    || echo "note: clang could not be installed; the libFuzzer test will be skipped"
fi
bash scripts/setup.sh
# the Java interop programs, against each pinned Chronicle Queue (Maven; fails loudly)
.venv/bin/python interop/jvm.py
# promtool, for the alert pack's rule tests (Prometheus Go module, built once and cached)
.venv/bin/python tests/promtool.py
.venv/bin/python -m ruff check --no-cache aiochronicle tests bench examples
.venv/bin/python -m mypy
# the examples use only the public API, and type-check against it strictly
.venv/bin/python -m mypy --strict examples
.venv/bin/python -m pytest "$@"
# what users install: the sdist and a wheel from `python -m build` (isolated), the wheel
# repaired by auditwheel and installed with the spark extra in a fresh venv with no C
# compiler on PATH, and the suite again against it (less the tests marked `checkout`,
# which compile the native sources or build the package: see the script's docstring)
.venv/bin/python scripts/test_installed.py -q
