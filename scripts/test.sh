#!/usr/bin/env bash
# Set everything up and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
# clang builds the libFuzzer target of the native core (gcc builds everything else)
if ! command -v clang >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null) \
    || echo "note: clang could not be installed; the libFuzzer test will be skipped"
fi
# arm64: the C core and its C tests cross-compiled and run under qemu-user
# (make -C native test-arm64, run by tests/test_native_arm64.py in the suite)
if ! { command -v aarch64-linux-gnu-gcc && command -v qemu-aarch64-static; } >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      gcc-aarch64-linux-gnu qemu-user-static >/dev/null) \
      || echo "note: gcc-aarch64-linux-gnu/qemu-user-static could not be installed"
  fi
fi
if command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 && command -v qemu-aarch64-static >/dev/null 2>&1; then
  echo "arm64: tests/test_native_arm64.py runs the C tests under qemu-aarch64 (in pytest below)"
else
  echo "arm64 C tests skipped: no aarch64-linux-gnu-gcc or qemu-aarch64-static" \
    "(not root, or no apt-get: apt-get install gcc-aarch64-linux-gnu qemu-user-static)"
fi
bash scripts/setup.sh
# the Java interop programs, against each pinned Chronicle Queue (Maven; fails loudly)
.venv/bin/python interop/jvm.py
.venv/bin/python -m ruff check --no-cache aiochronicle tests bench examples
.venv/bin/python -m mypy
# the examples use only the public API, and type-check against it strictly
.venv/bin/python -m mypy --strict examples
.venv/bin/python -m pytest "$@"
# the portable build of the core (CQ_PORTABLE=1: the code macOS runs), in a directory
# of its own, under the tests of what the platform layer changes (native/platform.h)
bash scripts/test_portable.sh
# what users install: the sdist and a wheel from `python -m build` (isolated), the wheel
# repaired by auditwheel and installed with the spark extra in a fresh venv with no C
# compiler on PATH, and the suite again against it (less the tests marked `checkout`,
# which compile the native sources or build the package: see the script's docstring)
.venv/bin/python scripts/test_installed.py -q
