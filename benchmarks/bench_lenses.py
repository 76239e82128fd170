"""Lens benchmarks: the batched activation-patching sweep against TransformerLens's `get_act_patch_resid_pre`
(transformer_lens.patching, one forward per cell) on the same TransformerBridge, and attribution patching against
exact patching on a 12-layer GPT-2-small-sized model (random weights), with the rank correlation of their grids."""
from __future__ import annotations

import tempfile

import torch

from benchmarks.harness import timeit

N_POS = 16


def _pair(m, n_pos: int = N_POS, seed: int = 0):
    """Random token prompts differing in one token; the metric is logit(clean top-1) - logit(clean top-2)."""
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(6, min(m.d_vocab, 512), (n_pos,), generator=g).tolist()
    corrupt = list(clean)
    corrupt[n_pos // 3] = (clean[n_pos // 3] + 7) % min(m.d_vocab, 512)  # one changed token
    top2 = m.run([clean]).logits[0, -1].topk(2).indices.tolist()
    return clean, corrupt, top2[0], top2[1]


def patching_vs_tl_resid_pre():
    """activation_patching(sites=["resid_pre"]) vs transformer_lens.patching.get_act_patch_resid_pre: same model
    (a random GPT-2, 6 layers, d 256), same 6 x 16 grid, same logit-difference metric."""
    import interplab
    from interplab.probes.lenses import activation_patching
    from interplab.testing import make_random_checkpoint
    from transformer_lens import patching

    path = make_random_checkpoint("gpt2", tempfile.mkdtemp(prefix="bench_lens_"), n_layers=6, d_model=256, n_heads=8,
                                  vocab=512, n_ctx=64, init_std=0.05)
    m = interplab.load_model(path, backend="bridge", device="cpu")
    clean, corrupt, a, w = _pair(m)
    bridge = m.bridge
    ct, kt = torch.tensor([clean]), torch.tensor([corrupt])

    def metric(logits):  # TL's convention: logits [batch, pos, vocab] -> scalar
        return logits[0, -1, a] - logits[0, -1, w]

    def anchor():
        _, cache = bridge.run_with_cache(ct, prepend_bos=False)
        return patching.get_act_patch_resid_pre(bridge, kt, cache, metric)

    def ours():
        return activation_patching(m, clean, corrupt, sites=["resid_pre"], answer=a, wrong=w, batch_size=32)

    ref, got = anchor(), ours()["resid_pre"].values
    diff = float((torch.as_tensor(got) - ref.double()).abs().max())
    t_ours, t_anchor = timeit(ours, repeat=3), timeit(anchor, repeat=3)
    ratio = t_anchor / t_ours
    return dict(ours=t_ours, anchor=t_anchor, ratio=ratio,
                goal=">= 2x faster than get_act_patch_resid_pre, same values",
                ok=ratio >= 2.0 and diff < 1e-4,
                extra={"max_abs_diff": diff, "grid": f"{m.n_layers}x{N_POS}", "model": "gpt2 6L d256 (random)"})


def attribution_vs_exact_gpt2_small():
    """attribution_patching(method="gradient") vs activation_patching on resid_pre and attn_z (per head) of a
    12-layer GPT-2-small-sized model: cost ratio and Spearman rank correlation of the effects."""
    import interplab
    from interplab.probes.lenses import activation_patching, attribution_patching, compare_to_exact
    from interplab.testing import real_size_checkpoint

    m = interplab.load_model(real_size_checkpoint("gpt2-small"), backend="bridge", device="cpu")
    clean, corrupt, a, w = _pair(m, 12)
    kw = dict(sites=["resid_pre", "attn_z"], answer=a, wrong=w)
    results = {}

    def exact():
        results["exact"] = activation_patching(m, clean, corrupt, batch_size=48, **kw)

    def approx():
        results["approx"] = attribution_patching(m, clean, corrupt, **kw)

    def ig():
        results["ig"] = attribution_patching(m, clean, corrupt, method="ig", ig_steps=8, **kw)

    t_exact, t_approx = timeit(exact, repeat=1, warmup=0), timeit(approx, repeat=3)
    t_ig = timeit(ig, repeat=1, warmup=0)
    cmp = compare_to_exact(results["approx"], results["exact"])
    cmp_ig = compare_to_exact(results["ig"], results["exact"])
    ratio = t_exact / t_approx
    extra = {f"spearman_gradient_{r.site}": round(r.spearman, 3) for r in cmp.itertuples()}
    extra.update({f"spearman_ig_{r.site}": round(r.spearman, 3) for r in cmp_ig.itertuples()})
    extra.update({f"pearson_gradient_{r.site}": round(r.pearson, 3) for r in cmp.itertuples()})
    extra.update(ig_seconds=round(t_ig, 3), cells=int(cmp.n_cells.sum()), model="gpt2-small 12L d768 (random)")
    return dict(ours=t_approx, anchor=t_exact, ratio=ratio, goal=">= 10x cheaper than exact patching",
                ok=ratio >= 10.0, extra=extra)


BENCHMARKS = {"patching_vs_tl_resid_pre": patching_vs_tl_resid_pre,
              "attribution_vs_exact_gpt2_small": attribution_vs_exact_gpt2_small}
