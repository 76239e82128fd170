"""Build training-seed replicas of pcfg-sib-L4 (seeds given on the command line) into OUT/pcfg-sib-L4-s<seed>:
the shipped recipe with only `seed` (init + data order) changed, 4000 steps, one torch thread, step-based
(seed 0 is the shipped zoo:pcfg-sib-L4).

    PYTHONPATH=. python results/pcfg-construction/sib-L4-seeds/build_seeds.py /tmp/sib-seeds 1 2   # repo root
"""
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import torch

from interplab.zoo.cards import write_card
from interplab.zoo.registry import BuildContext, get_recipe

torch.set_num_threads(1)
out_root = Path(sys.argv[1])
for s in map(int, sys.argv[2:]):
    r = get_recipe("pcfg-sib-L4")
    r = replace(r, name=f"pcfg-sib-L4-s{s}", seed=s, description=r.description + f" (training seed {s})")
    out = out_root / r.name
    work = out_root / f".{r.name}.work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    ctx = BuildContext(out_dir=out, work_dir=work, steps=r.steps, parent_dir=None, resume=False,
                       log_path=work / "train_log.jsonl", progress=False, num_threads=1, time_budget_s=None,
                       overrides={})
    report = r.build(r, ctx)
    report["steps"] = ctx.steps
    write_card(r, out, report)
    print(r.name, out, report["metrics"]["kl"], flush=True)
