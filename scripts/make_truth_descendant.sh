#!/usr/bin/env bash
# Rebuild the SmolLM2-135M-Instruct descendant of the Truth-Score lineage run (issue 46 §2,
# Lineage; results/truth-lineage-smollm2/README.md): full fine-tuning on all 554 training windows
# (128 tokens) of the shipped pydoc corpus (Python documentation, not chat), 2 epochs = 140 steps of
# batch 8, Adam (weight decay 0), constant lr 2e-4, gradient clip 1.0, seed 0; then the drift
# report (scripts/descendant_drift.py).
#
#   bash scripts/make_truth_descendant.sh [DEST] [RUNS_ROOT]
#
# DEST (default /work/ckpt/smollm2-descendant): where the HF checkpoint folder goes (~540 MB,
# float32; never committed). RUNS_ROOT (default /tmp/truth-descendant-runs): where the
# hyperfit-train run folder is written. One torch thread: the training took 1,440 s of CPU
# (2,368 s wall on a shared 2-core machine), the drift report 658 s.
set -euo pipefail
DEST=${1:-/work/ckpt/smollm2-descendant}
ROOT=${2:-/tmp/truth-descendant-runs}
export HF_HUB_OFFLINE=1
interplab run hyperfit-train --set base=real:smollm2-135m-instruct --set method=full --set lr=2e-4 \
  --set n_sequences=554 --set max_epochs=2 --set stop_loss=0.001 --set threads=1 --out "$ROOT"
RUN=$(ls -td "$ROOT"/runs/hyperfit-train/*/ | head -1)
mkdir -p "$(dirname "$DEST")"
rm -rf "$DEST"
cp -r "$RUN/checkpoint" "$DEST"
python scripts/descendant_drift.py --descendant "$DEST" --out "$DEST.drift"
echo "descendant: $DEST (drift report: $DEST.drift/drift.json; training run: $RUN)"
