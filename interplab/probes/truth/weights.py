"""Weight preservation between a base model and a descendant, per attention head (spec truth_scores.md §2.4).

For every (layer, query head h): cosines between the two models' W_Q^h, W_K^{kv(h)}, W_V^{kv(h)}, W_O^h slices
(kv(h) = h // (n_heads / n_kv_heads) under GQA), the relative change ||W_b - W_a||_F / ||W_a||_F of each, and the
same two measures for the basis-independent circuits QK^h = W_Q^h W_K^{kv(h)T} and OV^h = W_V^{kv(h)} W_O^h
([d_model, d_model] each), computed factored through d_head x d_head Gram products, never materialised.
Weights come raw from `LabModel.attention_weights()` (no folding), identically for both models. RoPE is not part of
the QK circuit here (it is the same fixed rotation for both models).
"""
from __future__ import annotations

import numpy as np
import torch

from interplab.core.errors import ShapeError
from interplab.probes.stats import spearman


WP_COLUMNS = ("cos_W_Q", "cos_W_K", "cos_W_V", "cos_W_O", "cos_QK", "cos_OV")


def _dims(m) -> tuple[int, int, int, int, int]:
    return m.n_layers, m.n_heads, m.n_kv_heads, m.d_model, m.d_head


def _cos_rel(a: torch.Tensor, b: torch.Tensor):
    """Cosine and relative change over the trailing two dims."""
    dot = (a * b).sum((-1, -2))
    na, nb = a.square().sum((-1, -2)).sqrt(), b.square().sum((-1, -2)).sqrt()
    return dot / (na * nb), (b - a).square().sum((-1, -2)).sqrt() / na


def _factored_cos_rel(A1, B1, A2, B2):
    """cos and relative change between M1 = A1 B1^T and M2 = A2 B2^T (A, B: [..., d, k]) without forming them:
    <M1, M2>_F = sum((A1^T A2) * (B1^T B2))."""
    def inner(A, B, C, D):
        return ((A.transpose(-1, -2) @ C) * (B.transpose(-1, -2) @ D)).sum((-1, -2))
    n11, n22, n12 = inner(A1, B1, A1, B1), inner(A2, B2, A2, B2), inner(A1, B1, A2, B2)
    cos = n12 / (n11.sqrt() * n22.sqrt())
    rel = (n11 + n22 - 2 * n12).clamp(min=0).sqrt() / n11.sqrt()
    return cos, rel


def weight_preservation(model_a, model_b):
    """DataFrame, one row per (layer, query head): cos_W_Q, cos_W_K, cos_W_V, cos_W_O, cos_QK, cos_OV and the
    matching rel_* relative changes ||W_b - W_a|| / ||W_a|| (model_a is the base). K/V columns are those of the
    head's KV group (GQA); `kv_head` names it."""
    import pandas as pd

    da, db = _dims(model_a), _dims(model_b)
    if da != db:
        raise ShapeError(f"models differ in (n_layers, n_heads, n_kv_heads, d_model, d_head): {da} vs {db}; weight "
                         "preservation compares heads of the same architecture")
    L, H, Hkv, d, dh = da
    wa, wb = model_a.attention_weights(), model_b.attention_weights()
    group = H // Hkv
    kv = torch.arange(H) // group
    cols: dict[str, torch.Tensor] = {}
    for name in ("W_Q", "W_O"):
        cols[f"cos_{name}"], cols[f"rel_{name}"] = _cos_rel(wa[name], wb[name])
    for name in ("W_K", "W_V"):
        c, r = _cos_rel(wa[name], wb[name])
        cols[f"cos_{name}"], cols[f"rel_{name}"] = c[:, kv], r[:, kv]
    # QK = W_Q W_K^T: A = W_Q [d, dh], B = W_K [d, dh]
    cols["cos_QK"], cols["rel_QK"] = _factored_cos_rel(wa["W_Q"], wa["W_K"][:, kv], wb["W_Q"], wb["W_K"][:, kv])
    # OV = W_V W_O: A = W_V [d, dh], B = W_O^T [d, dh]
    cols["cos_OV"], cols["rel_OV"] = _factored_cos_rel(wa["W_V"][:, kv], wa["W_O"].transpose(-1, -2),
                                                       wb["W_V"][:, kv], wb["W_O"].transpose(-1, -2))
    layer, head = torch.meshgrid(torch.arange(L), torch.arange(H), indexing="ij")
    data = {"layer": layer.reshape(-1).numpy(), "head": head.reshape(-1).numpy(),
            "kv_head": kv.repeat(L).numpy()}
    order = ["cos_W_Q", "cos_W_K", "cos_W_V", "cos_W_O", "cos_QK", "cos_OV",
             "rel_W_Q", "rel_W_K", "rel_W_V", "rel_W_O", "rel_QK", "rel_OV"]
    for k in order:
        data[k] = cols[k].reshape(-1).numpy().astype(np.float64)
    return pd.DataFrame(data)


def preservation_vs_score_change(wp, scores_a, scores_b, columns=("cos_QK", "cos_OV", "cos_W_Q", "cos_W_O")) -> dict:
    """Spearman over heads between each weight-similarity column and -|S_a - S_b| (higher = better preserved)."""
    sa = np.asarray(getattr(scores_a, "scores", scores_a), dtype=np.float64)
    sb = np.asarray(getattr(scores_b, "scores", scores_b), dtype=np.float64)
    if sa.shape != sb.shape or sa.size != len(wp):
        raise ShapeError(f"score maps {sa.shape}/{sb.shape} do not match the {len(wp)} heads of the weight table")
    neg = -np.abs(sa - sb).ravel()
    return {c: spearman(wp[c].to_numpy(), neg) for c in columns}
