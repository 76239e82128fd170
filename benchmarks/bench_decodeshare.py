"""DecodeShare benchmark: decode-only projection-edited KV-cached generation (batch 16, 64 new tokens) vs
(a) plain KV-cached generation (goal: <= 1.2x slowdown) and (b) the uncached loop that re-runs the full sequence
each step with the same edit (goal: >= 3x faster). One process, random Llama checkpoint, CPU, float32, one thread.
Times are process CPU seconds (robust on a shared machine; with one thread they track wall time when idle).

    python benchmarks/bench_decodeshare.py
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(reps: int = 5) -> None:
    import torch

    torch.set_num_threads(1)
    import interplab
    from interplab.interventions.projection import SubspaceProjection
    from interplab.probes.decodeshare.subspaces import haar_basis
    from interplab.testing import make_random_checkpoint

    B, K, d, L = 16, 64, 128, 4
    with tempfile.TemporaryDirectory() as tmp:
        path = make_random_checkpoint("llama", tmp, n_layers=L, d_model=d, n_heads=4, n_kv_heads=2, vocab=64,
                                      n_ctx=256, seed=0)
        m = interplab.load_model(path, device="cpu", dtype="float32")
        rng = torch.Generator().manual_seed(0)
        prompts = [[1] + torch.randint(9, 64, (int(n),), generator=rng).tolist()
                   for n in torch.randint(12, 24, (B,), generator=rng)]
        edit = SubspaceProjection(L // 2, haar_basis(d, 8, seed=0), alpha=1.0)
        kw = dict(max_new_tokens=K, stop_at_eos=False, return_logits=False)
        m.generate(prompts, **kw)  # warm-up
        # interleave plain and edited runs so drifting machine load hits both alike
        tp, te = [], []
        for _ in range(reps):
            t = time.process_time(); m.generate(prompts, **kw); tp.append(time.process_time() - t)
            t = time.process_time(); a = m.generate(prompts, edits=[edit], **kw); te.append(time.process_time() - t)
        plain, edited = statistics.median(tp), statistics.median(te)
        t = time.process_time()
        b = m.generate(prompts, edits=[edit], use_cache=False, **kw)
        uncached = time.process_time() - t
        agree = float((a.tokens == b.tokens).float().mean())  # the two edited loops must agree
    r1 = edited / plain
    r2 = uncached / edited
    extra = f"batch={B},new_tokens={K},d_model={d},layers={L},k=8,token_agreement={agree:.3f}"
    print(f"BENCH name=decodeshare_edit_overhead ours={edited:.4f} anchor={plain:.4f} ratio={r1:.3f} goal=<=1.2 "
          f"ok={r1 <= 1.2} extra={extra}")
    print(f"BENCH name=decodeshare_cached_vs_uncached ours={edited:.4f} anchor={uncached:.4f} ratio={r2:.3f} "
          f"goal=>=3 ok={r2 >= 3} extra={extra}")


if __name__ == "__main__":
    main()
