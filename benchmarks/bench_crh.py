"""CRH benchmark: a sector scan with every (bin × strength) steering condition of one prompt set batched into as few
`generate` calls as `max_rows` allows (one steering vector per batch row) vs the anchor a user would write: one
`generate` call per condition, the prompt set as the batch, one `Steer` vector (the repo's per-condition loop).
Goal: >= 5x faster with identical labels. One process, random Llama checkpoint, CPU, float32, greedy.

    python benchmarks/bench_crh.py
"""
from __future__ import annotations

import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    import numpy as np
    import torch

    torch.set_num_threads(1)
    import interplab
    from interplab.interventions import Steer
    from interplab.probes.crh import (TokenSetJudge, concept_diffs, fit_cylinder, sector_scan, sector_vectors,
                                      truncate_at)
    from interplab.testing import make_random_checkpoint

    n_bins, n_strengths, new_tokens = 12, 8, 8
    with tempfile.TemporaryDirectory() as tmp:
        path = make_random_checkpoint("llama", tmp, n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, vocab=64, seed=0)
        m = interplab.load_model(path, device="cpu", dtype="float32")
        prompts = ["w1 w2 w3 w4 w5", "w6 w7", "w8 w9 w10", "w11 w12 w13 w14", "w15 w16 w17"]
        pairs = [(f"w{i} w{i + 1}", f"w{i} w{i + 1} w40 w41") for i in range(1, 30, 2)]
        layer = 1
        cyl = fit_cylinder(concept_diffs(m, pairs, layer=layer))
        L = np.linspace(0.5, 3 * cyl.axis_norm + 4, n_strengths)
        judge = TokenSetJudge(["w40", "w41"])
        m.generate(prompts, max_new_tokens=2)  # warm-up

        t = time.perf_counter()
        ours = sector_scan(m, prompts, cyl, layer=layer, judge=judge, n_bins=n_bins, strengths=L,
                           max_new_tokens=new_tokens, max_rows=1024)
        t_ours = time.perf_counter() - t

        t = time.perf_counter()
        V = sector_vectors(cyl, gamma_deg=45, n_bins=n_bins, strengths=L)          # [K, B, d]
        texts = np.empty((len(prompts), n_bins, n_strengths), dtype=object)
        for b in range(n_bins):
            for k in range(n_strengths):
                out = m.generate(prompts, max_new_tokens=new_tokens, return_logits=False,
                                 edits=[Steer(f"resid_post.{layer}", torch.as_tensor(V[k, b], dtype=torch.float32))])
                texts[:, b, k] = truncate_at(out.text, ["<|im_end|>"])   # the same end-of-turn cut
        anchor_labels = judge(list(texts.ravel())).reshape(texts.shape)
        t_anchor = time.perf_counter() - t

        same = bool(np.array_equal(anchor_labels, ours.labels))
        same_text = list(texts.ravel()) == ours.texts
        ratio = t_anchor / t_ours
        print(f"BENCH name=crh_sector_scan ours={t_ours:.3f} anchor={t_anchor:.3f} ratio={ratio:.1f} goal=>=5x "
              f"ok={ratio >= 5 and same} extra=conditions={n_bins * n_strengths},prompts={len(prompts)},"
              f"rows={ours.labels.size},new_tokens={new_tokens},calls_ours={ours.config['n_calls']},"
              f"calls_anchor={n_bins * n_strengths},identical_labels={same},identical_texts={same_text},"
              f"label2_rate={float((ours.labels == 2).mean()):.3f}")


if __name__ == "__main__":
    main()
