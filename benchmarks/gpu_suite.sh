#!/usr/bin/env bash
# Issue 39's GPU measurements in one call (benchmarks/gpu_suite.py does the work; docs/speed.md, "GPU suite"):
#   bash benchmarks/gpu_suite.sh --arcface-torch /path/to/insightface/recognition/arcface_torch
#   bash benchmarks/gpu_suite.sh --device cpu --backbones tiny --batches 8 ...   (tiny sizes; the tests run this)
# Runs this tree's package (src/ first on PYTHONPATH) with $PYTHON, else .venv/bin/python, else python3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export WANDB_MODE="${WANDB_MODE:-offline}"
exec "$PYTHON" "$ROOT/benchmarks/gpu_suite.py" "$@"
