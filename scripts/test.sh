#!/usr/bin/env bash
# Set everything up and run the whole test suite (what CI runs: .ci/run).
#
# Structure (every test runs at least once against the package under test):
#   1. setup (.venv, editable install: the C core compiled from the checkout, the jar),
#      the Java interop programs, ruff, mypy;
#   2. the whole suite against that install (slow end-to-end cases included), on four
#      pytest-xdist workers (AIOCHRONICLE_TEST_WORKERS: most tests wait on processes
#      and JVMs rather than compute), the passes below on two;
#   3. scripts/test_installed.py: the sdist and wheel as pip builds them, the wheel
#      repaired and installed in a fresh venv with no compiler, and the tests of what
#      the install decides (packaging, the console script, the native modules as
#      shipped, the jar and Spark registration, the package metadata, the names and
#      types shipped): its INSTALL_TESTS.  The rest ran in 2
#      on the same sources, and so did these but the Spark registration's (a Spark
#      of its own per test: run once, against the wheel);
#      `scripts/test_installed.py --whole-suite` runs them all again.
#      The wheel is built beside ruff and mypy, then installed and tested beside
#      pass 2, as is the portable build (scripts/test_portable.sh), both niced.
set -euo pipefail
cd "$(dirname "$0")/.."
# the pytest runs use this many pytest-xdist workers (tests/conftest.py keeps the
# Spark tests on one of them); 0 runs them in this process, one at a time
WORKERS="${AIOCHRONICLE_TEST_WORKERS:-4}"
XDIST=(-n "$WORKERS")
# the JVMs of every step (the Maven builds, and what the tests start: see
# tests/conftest.py) live seconds: the C1 compiler alone and the serial collector
# start them with about half the CPU
export JAVA_TOOL_OPTIONS="${JAVA_TOOL_OPTIONS:--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}"
# the passes that run beside the checkout's (the installed wheel's, the portable
# build's), at this niceness
SIDE=(-n "$(( WORKERS < 2 ? WORKERS : 2 ))")
SIDE_NICE=5
# how long each step took, and the CPU time used so far by this script's children
# (user+system: against the wall time x 2 cores, whether the run is CPU-bound)
# (`times` in this shell: in a command substitution it would count the subshell's)
TIMES="$(mktemp)"
step() {
  times >"$TIMES"
  echo "test.sh: ${SECONDS}s (children's CPU $(tail -1 "$TIMES" | awk '{
    split($1, u, /[ms]/); split($2, s, /[ms]/);
    printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }')s): $*" >&2
}
step "start"
# The suite starts hundreds of Python processes (the CLI's runs, worker processes,
# Spark's Python workers, pytest workers) importing the same modules: with bytecode
# caches each module is compiled (and each test module's asserts rewritten) once,
# not in every process, which halves what a short process costs
if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ]; then
  echo "note: PYTHONDONTWRITEBYTECODE is set; unset for this run (bytecode caches are written)"
  unset PYTHONDONTWRITEBYTECODE
fi
# clang builds the libFuzzer target of the native core (gcc builds everything else);
# promtool (Debian's prometheus package: Prometheus' own Go build) runs the alert
# pack's rule tests (without it, tests/promtool.py builds one where go is)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  if ! command -v clang >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    apt-get update -qq || echo "note: apt-get update failed"
  fi
  if ! command -v clang >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null \
      || echo "note: clang could not be installed; the libFuzzer test will be skipped"
  fi
  if ! command -v promtool >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
      >/dev/null || echo "note: promtool could not be installed"
  fi
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
step "system packages checked"
bash scripts/setup.sh
step "setup.sh done (.venv, editable install, jar)"
# Two steps run beside others, their output shown when they end: the Java interop
# programs (Maven, after setup.sh's Maven build of the jar) beside ruff and mypy; the
# portable build's pass beside the installed wheel's (whose build and pip install
# mostly wait on the disk).  `bg NAME CMD...` starts one, `fg NAME` waits for it.
LOGS="$(mktemp -d)"
# on a failure, the steps still running in the background end too
# (each started in a process group of its own: the group is ended, its pytest workers
# and their children too)
# (and the wheel's install, in a temporary directory, goes too)
trap 'for f in "$LOGS"/*.pid; do [ -e "$f" ] && kill -- "-$(cat "$f")" 2>/dev/null; done
      [ -f wheelhouse/installed.txt ] && rm -rf "$(cat wheelhouse/installed.txt)"
      rm -rf "$LOGS" "$TIMES" wheelhouse/installed.txt' EXIT
bg() { local name=$1; shift; setsid -w "$@" >"$LOGS/$name" 2>&1 & echo $! >"$LOGS/$name.pid"; }
# `bg NAME "${SIDE_RUN[@]}" CMD...` runs CMD at niceness SIDE_NICE.  A step bg starts
# is a session of its own, and with the kernel's autogroups (sched_autogroup_enabled)
# the scheduler shares the CPU between sessions by each one's autogroup niceness, not
# its processes': the session's is set too (else each side pass would get as much CPU
# as the checkout's pass)
SIDE_RUN=(bash -c 'echo "$0" 2>/dev/null >/proc/self/autogroup || true
                   exec nice -n "$0" "$@"' "$SIDE_NICE")
fg() {
  local rc=0
  wait "$(cat "$LOGS/$1.pid")" || rc=$?
  rm "$LOGS/$1.pid"
  sed "s/^/[$1] /" "$LOGS/$1"
  [ "$rc" = 0 ] || { echo "test.sh: $1 failed (exit $rc)" >&2; exit "$rc"; }
  step "$1 done"
}
# the Java interop programs, against each pinned Chronicle Queue (Maven; fails loudly)
bg interop .venv/bin/python interop/jvm.py
# what users install: the sdist and a wheel from `python -m build` (isolated), the wheel
# repaired by auditwheel (tested below, beside the checkout pass)
bg wheel .venv/bin/python scripts/test_installed.py --build
# promtool, for the alert pack's rule tests: installed above, or built from the
# Prometheus Go module with go and cached (a named skip without either; CI fails it)
.venv/bin/python tests/promtool.py || echo "note: no promtool: the alert pack's rule tests skip"
.venv/bin/python -m ruff check --no-cache aiochronicle tests bench examples
.venv/bin/python -m mypy
# the examples use only the public API, and type-check against it strictly
.venv/bin/python -m mypy --strict examples
step "promtool, ruff and mypy done"
fg interop
fg wheel
# Beside the checkout pass, niced (they take the CPU its workers leave while they
# wait on processes and JVMs, not the CPU they need): the repaired wheel installed
# in a fresh venv with no C compiler on PATH (mostly unpacking PySpark: the disk),
# then the install-dependent tests (see the script's docstring) against that
# install; and the portable build of the core (CQ_PORTABLE=1: the code macOS runs),
# in a directory of its own, under the tests of what the platform layer changes
# (native/platform.h).  (Started in the background, their processes begin with
# SIGINT ignored: tests/conftest.py gives the ones the tests start SIGINT's default
# again.)
bg installed "${SIDE_RUN[@]}" bash -c '.venv/bin/python scripts/test_installed.py --install \
  && exec .venv/bin/python scripts/test_installed.py --built -q "$@"' _ "${SIDE[@]}"
bg portable "${SIDE_RUN[@]}" bash scripts/test_portable.sh "${SIDE[@]}"
# the Spark registration's tests run against the installed wheel only (above, its
# INSTALL_TESTS): each is a user's process with a Spark of its own, and what they
# test is the jar and the module the install carries (a checkout's editable install
# has them too: `pytest tests/spark/test_spark_register.py` runs them there)
.venv/bin/python -m pytest "${XDIST[@]}" --durations=25 \
  --ignore tests/spark/test_spark_register.py "$@"
step "the suite passed against the checkout"
fg installed
fg portable
