"""scripts/gpu_check.py on a machine without a GPU: it says so, runs the model-level path as a CPU smoke (here on
a tiny random checkpoint, to stay fast; the script's default is the GPT-2-small-size model) and exits 0."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a subprocess that loads both backends: ~30 s alone, minutes on a loaded 2-core machine
@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path (a GPU runs the full check)")
def test_gpu_check_dry_run_without_gpu(checkpoint_factory):
    path = checkpoint_factory("llama", n_layers=2)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    p = subprocess.run([sys.executable, "scripts/gpu_check.py", "--dry-run", "--model", str(path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    out = p.stdout
    assert "no GPU available" in out
    table = [ln for ln in out.splitlines() if ln.startswith("| ")]
    steps = {ln.split(" | ")[0][2:]: ln.split(" | ")[1] for ln in table[1:]}
    for step in ("load bridge", "load nnsight", "bridge = nnsight captures", "built-in edits",
                 "KV-cached generate + decode edit", "device_map"):
        assert steps.get(step) == "ok", (step, out[-3000:])
    assert steps.get("experiment truth-scores") == "planned" and steps.get("bench hook_layer") == "planned"
    assert "layers 1.. on disk" in out
