#!/usr/bin/env bash
# Create .venv (if missing) and install aiochronicle with its native core and dev tools.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip setuptools wheel cffi
# (no bytecode compiled ahead for the dependencies: PySpark's, pandas' and the dev
# tools' thousands of modules cost half a minute of CPU; what is imported compiles
# when it first is, and is cached then, unless PYTHONDONTWRITEBYTECODE says not to:
# then every process would compile what it imports, so all is compiled now)
COMPILE=(--no-compile)
[ -n "${PYTHONDONTWRITEBYTECODE:-}" ] && COMPILE=()
.venv/bin/python -m pip install --quiet "${COMPILE[@]}" --no-build-isolation -e ".[dev]"
# the JVM reader (format("chronicle") in Spark), against the PySpark just installed
.venv/bin/python jvm/build.py || echo "note: no JVM reader built; Spark reads use the Python data source"
