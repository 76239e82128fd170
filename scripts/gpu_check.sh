#!/usr/bin/env bash
# The GPU check (see scripts/gpu_check.py): one table in at most ~10 minutes; without a GPU a CPU smoke, exit 0.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi; fi
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" WANDB_MODE="${WANDB_MODE:-disabled}"
exec timeout 600 "$PY" scripts/gpu_check.py "$@"
