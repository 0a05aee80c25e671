#!/usr/bin/env bash
# Set everything up and run the end-to-end demo on a local queue directory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/demo.py "${1:-demo-queue}"
