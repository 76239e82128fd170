"""Parity bands on the real pretrained models (issue 25 §2): bridge vs nnsight on every site kind, and bf16 vs fp32.

    python scripts/pretrained_bands.py [--models real:smollm2-135m-instruct,real:gemma-3-270m] [--out FILE.json]

For each model: the same left-padded batch of real sentences on both backends in fp32 (the default SDPA), and
on the bridge in bf16. Per site kind (layers 0, n/2, n-1) it prints the largest |bridge - nnsight| over real tokens,
the site's scale (max |activation|) and their ratio; for bf16, the largest logit error relative to the fp32 logit
range. The tables of docs/real_models.md ("The two pretrained models") come from this script's output."""
from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import interplab  # noqa: E402
from interplab.core.sites import LAYER_KINDS  # noqa: E402

TEXTS = ["The capital of France is Paris, and the capital of Italy is", "Water boils at one hundred degrees",
         "In 1969 the first people walked on the Moon."]


def _real(a, mask, kind):
    """Real tokens; for [b, h, q, k] sites real query rows and keys, and attn_scores without its masked entries."""
    if kind not in ("attn_pattern", "attn_scores"):
        return a[mask]
    keep = mask[:, None, :, None].expand_as(a) & mask[:, None, None, :].expand_as(a)
    return a[keep & (a > torch.finfo(a.dtype).min / 2)] if kind == "attn_scores" else a[keep]


def measure(name: str) -> dict:
    mb, mn = interplab.load_model(name), interplab.load_model(name, backend="nnsight")
    n = mb.n_layers
    sites = [f"{k}.{L}" for L in (0, n // 2, n - 1) for k in LAYER_KINDS] + ["final_norm", "logits"]
    ob, on = mb.run(TEXTS, capture=sites), mn.run(TEXTS, capture=sites)
    mask = ob.batch.attention_mask.bool()
    kinds: dict[str, dict] = {}
    for s in sites:
        kind = s.split(".")[0]
        a, b = _real(ob.cache[s], mask, kind), _real(on.cache[s], mask, kind)
        d, scale = float((a - b).abs().max()), float(b.abs().max())
        row = kinds.setdefault(kind, {"max_abs_diff": 0.0, "scale": 0.0, "max_rel": 0.0})
        row["max_abs_diff"] = max(row["max_abs_diff"], d)
        row["scale"] = max(row["scale"], scale)
        row["max_rel"] = max(row["max_rel"], d / max(scale, 1e-30))
    del mn
    half = interplab.load_model(name, dtype="bfloat16").run(TEXTS)
    ref = ob.logits[mask]
    bf16 = float((half.logits.float()[mask] - ref).abs().max()) / float(ref.max() - ref.min())
    first = float(ob.cache["resid_post.0"][:, :][mask].norm(dim=-1).max())
    return {"model": name, "n_layers": n, "sites": kinds, "bf16_logit_err_over_range": bf16,
            "logit_range": float(ref.max() - ref.min()), "max_resid_post0_norm": first}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="real:smollm2-135m-instruct,real:gemma-3-270m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [measure(m) for m in args.models.split(",") if m]
    for r in rows:
        print(f"\n{r['model']}: bf16 logits err / fp32 logit range = {r['bf16_logit_err_over_range']:.2%} "
              f"(range {r['logit_range']:.1f})")
        print("| site kind | max abs Δ bridge-nnsight | scale (max abs) | Δ / scale |\n|---|---|---|---|")
        for kind, v in r["sites"].items():
            print(f"| {kind} | {v['max_abs_diff']:.2e} | {v['scale']:.3g} | {v['max_rel']:.1e} |")
    if args.out:
        from interplab.core.io import write_json

        write_json(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
