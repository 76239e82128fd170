"""Ground truth for interplab's SAE trainer: MCC / F1 against the true features of SAELens synthetic data, for every
architecture, interplab's `train_sae` vs SAELens's own `train_toy_sae` on the same data, budget and initial weights
(`interplab.sae.synthetic.compare_with_saelens`). Goal: interplab within 3 % of SAELens (mean over seeds).

    python benchmarks/bench_sae_synthetic.py [--steps 1000] [--buffer] [--seeds 0 1 2] [--out table.csv]
"""
from __future__ import annotations

import argparse
import sys
import time


def run(steps: int = 1000, seeds=(0, 1, 2), buffer: bool = False):
    from interplab.sae.synthetic import SyntheticConfig, compare_with_saelens

    t0 = time.perf_counter()
    res = compare_with_saelens(SyntheticConfig(steps=steps, interplab_buffer=buffer), seeds=tuple(seeds))
    return res, time.perf_counter() - t0


def bench_sae_synthetic_vs_saelens() -> dict:
    res, secs = run()
    r = res.ratios()
    worst = float(min(r.mcc_ratio.min(), r.f1_ratio.min()))
    return dict(ours=secs, anchor=secs, ratio=worst, goal="MCC and F1 ≥ 0.97× SAELens train_toy_sae, every architecture",
                ok=worst >= 0.97, extra=r.round(4).to_dict("records"))


BENCHMARKS = {"sae_synthetic_vs_saelens": bench_sae_synthetic_vs_saelens}


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--buffer", action="store_true", help="interplab's default mixing buffer (not pass-through)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    res, secs = run(a.steps, a.seeds, a.buffer)
    if a.out:
        res.table.to_csv(a.out, index=False)
    print(res.table.round(4).to_string())
    print(res.ratios().round(4).to_string())
    from interplab.probes.stats import intervals  # sae may not import probes (layers); the interval is taken here
    for (a, tr), g in res.table.groupby(["architecture", "trainer"]):
        ci = intervals(g.mcc)
        print(f"# {a:9s} {tr:9s} MCC {ci['mean']:.4f} [{ci['lo']:.4f}, {ci['hi']:.4f}] (t, n={ci['n']})")
    print(f"# {secs:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
