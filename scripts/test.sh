#!/usr/bin/env bash
# Set everything up and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m ruff check aiochronicle tests bench examples
.venv/bin/python -m mypy
.venv/bin/python -m pytest "$@"
