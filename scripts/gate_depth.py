"""What TruthProbe's normalize gates do to a 30-layer model at each depth, and what rebase="layer_mean" changes
(docs/real_models.md, "Massive activations": HeadGate).

The same gate map is applied to the first k layers of SmolLM2-135M-Instruct (30 layers x 9 heads), k = 4, 15, 30, at
alpha 0.3 / 1 / 2 in TruthProbe's normalize mode, with the paper's gates (rebase="none") and with each layer's mean
gain taken out (rebase="layer_mean"). Measured on eight public-fact chat prompts at the last prompt position:
KL(ungated || gated) of the next-token distribution (nats), the ratio of the final residual norm (resid_post.29,
before the final norm) gated / ungated, how many prompts keep their ungated top-1 token, and the gated layers' mean
gate (their attention gain). The map is a seeded
uniform(0.5, 1) stand-in for an accuracy map: the compounding depends on the gates' layer means, not on which heads
are high (a real SmolLM2 map is the real-model Truth Scores issue's work).

    python scripts/gate_depth.py [--threads 1] [--out results/gate-depth]
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROMPTS = ("What is the capital of France?", "What is the capital of Japan?", "How many legs does a spider have?",
           "What colour is the sky on a clear day?", "What is the largest planet in the Solar System?",
           "Which language is spoken in Brazil?", "What is the chemical symbol for gold?",
           "Who wrote Romeo and Juliet?")
MODEL = "real:smollm2-135m-instruct"
KS = (4, 15, 30)
ALPHAS = (0.3, 1.0, 2.0)
REBASES = ("none", "layer_mean")


def main(argv=None) -> None:
    import numpy as np
    import pandas as pd
    import torch

    import interplab
    from interplab.core.io import write_text
    from interplab.interventions.head_gate import HeadGate, truth_gates

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="results/gate-depth")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    m = interplab.load_model(MODEL)
    L, H = m.n_layers, m.n_heads
    last = f"resid_post.{L - 1}"
    ids = m.tokenize([[{"role": "user", "content": q}] for q in PROMPTS], chat=True)
    s = np.random.default_rng(0).uniform(0.5, 1.0, (L, H))

    def measure(edits):
        out = m.run(ids, capture=[last], edits=edits)  # left-padded: the last prompt token is position -1
        return torch.log_softmax(out.logits[:, -1].double(), -1), out.cache[last][:, -1].double().norm(dim=-1)

    base_lp, base_norm = measure(None)
    rows = []
    for k in KS:
        for alpha in ALPHAS:
            for rebase in REBASES:
                g = np.ones((L, H))
                g[:k] = truth_gates(s[:k], "normalize", alpha, rebase=rebase)
                lp, norm = measure([HeadGate(g)])
                kl = (base_lp.exp() * (base_lp - lp)).sum(-1)
                same = (lp.argmax(-1) == base_lp.argmax(-1)).sum().item()
                rows.append({"gated_layers": k, "alpha": alpha, "rebase": rebase,
                             "kl_mean": kl.mean().item(), "kl_max": kl.max().item(),
                             "norm_ratio_mean": (norm / base_norm).mean().item(),
                             "top1_kept": int(same), "n_prompts": len(PROMPTS),
                             "layer_gain": float(g[:k].mean())})
                print(rows[-1], flush=True)
    wall = time.perf_counter() - t0
    cpu = platform.machine()
    if Path("/proc/cpuinfo").is_file():
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), cpu)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    write_text(out / "gate_depth.csv", df.to_csv(index=False))
    write_text(out / "README.md", (
        "# gate-depth: TruthProbe normalize gates at three depths on SmolLM2-135M-Instruct, with and without "
        "rebase=\"layer_mean\"\n\n"
        f"Command: `python scripts/gate_depth.py --threads {args.threads}`\n\n"
        f"Date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; wall time {wall:.0f} s; machine: "
        f"{cpu}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
        f"{args.threads} thread(s).\n\n"
        "What it measures: see the script's docstring. `gate_depth.csv` has one row per (gated layers k, alpha, "
        "rebase); KL in nats at the last prompt position, averaged (and max) over the 8 prompts.\n"))
    print(f"wrote {out} in {wall:.0f} s")


if __name__ == "__main__":
    main()
