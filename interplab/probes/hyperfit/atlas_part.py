"""Hyperfitting geometry in the atlas (`interplab.probes.atlas_contract`): the participation ratio of resid_post.L
per layer on the atlas's texts (hyperfit_geometry.md's PR) and, given a reference model, its change. Found through
`interplab.methods`."""
from __future__ import annotations

import numpy as np

from interplab.core.errors import ShapeError
from interplab.probes.atlas_contract import AtlasPart

__all__ = ["PART", "layer_participation"]


def layer_participation(model, texts, *, batch_size: int = 32) -> np.ndarray:
    """[n_layers] participation ratio (hyperfit `participation_ratio`) of resid_post.L over every real token of
    `texts` but each row's first (a <bos> or template token whose outlier norm would dominate the spectrum)."""
    import torch

    from interplab.probes.hyperfit import participation_ratio

    sites = [f"resid_post.{i}" for i in range(model.n_layers)]
    rows: dict[str, list] = {s: [] for s in sites}
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            out = model.run(list(texts[i:i + batch_size]), capture=sites, logits=False, chat=False)
            mask = out.batch.attention_mask.bool().clone()
            first = mask.float().argmax(1)
            mask[torch.arange(mask.shape[0]), first] = False
            for s in sites:
                rows[s].append(out.cache[s][mask.to(out.cache[s].device)].double().cpu().numpy())
    X = {s: np.concatenate(v) for s, v in rows.items()}
    if next(iter(X.values())).shape[0] < 3:
        raise ShapeError("the participation ratio needs at least 3 tokens; give longer or more texts")
    return np.array([participation_ratio(X[s]) for s in sites])


def _compute(model, data, ctx) -> dict:
    """pr, and pr_change = PR(reference) - PR(model) on the same texts; each its own step (timing, reason)."""
    pr = ctx.step("pr", lambda: layer_participation(model, ctx.texts, batch_size=ctx.batch_size))
    if pr is None:
        return {}
    out = {"pr": pr}
    if ctx.reference is not None:
        ref = ctx.step("pr_change", lambda: layer_participation(ctx.reference, ctx.texts, batch_size=ctx.batch_size))
        if ref is not None and ref.shape == pr.shape:
            out["pr_change"] = ref - pr
    return out


PART = AtlasPart(
    method="hyperfit",
    compute=_compute,
    layer_maps={"pr": "participation ratio", "pr_change": "PR change vs reference"},
    exports={"layer_participation": layer_participation},
)
