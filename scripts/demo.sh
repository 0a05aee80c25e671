#!/usr/bin/env bash
# Set everything up and run the end-to-end demo on a local queue directory, then the
# three-service pipeline (gateway -> strategy -> router, method proxies, message history)
# through `aiochronicle run`: the strategy is SIGKILLed in the middle of the feed and
# restarted by the runner, and the router's orders are shown to equal a run without the kill.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/demo.py "${1:-demo-queue}"
echo
.venv/bin/python examples/pipeline/run.py "${1:-demo-queue}-pipeline" --kill strategy
