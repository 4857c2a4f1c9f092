#!/usr/bin/env bash
# The GPU suite's command (`python -m gpu_suite`, this folder's package; docs/speed.md, "GPU suite"):
#   bash benchmarks/gpu_suite/run.sh --arcface-torch /path/to/insightface/recognition/arcface_torch
#   bash benchmarks/gpu_suite/run.sh --device cpu --backbones tiny --batches 8 ...   (tiny sizes; the tests run this)
#   bash benchmarks/gpu_suite/run.sh train-path --suite-json suite.json              (the path users run)
# Runs this tree's package (src/ and benchmarks/ first on PYTHONPATH) with $PYTHON, else .venv/bin/python, else
# python3: the device machines have no install of the project.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
export PYTHONPATH="$ROOT/src:$ROOT/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export WANDB_MODE="${WANDB_MODE:-offline}"
exec "$PYTHON" -m gpu_suite "$@"
