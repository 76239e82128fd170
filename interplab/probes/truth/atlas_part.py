"""Truth Scores in the atlas (`interplab.probes.atlas_contract`): the per-head Truth-Score map on CtxMem
verification items (or a truth validation organism's planted items, or the user's file), and the planted-head
recovery check of every head map on that organism. The atlas finds this part through `interplab.methods.truth`."""
from __future__ import annotations

import numpy as np

from interplab.probes.atlas_contract import AtlasPart

__all__ = ["PART"]


def _inputs(model, ctx) -> dict:
    """The planted items of a truth validation organism, else CtxMem items in the model's prompt format (a typed
    error when its vocabulary has no CtxMem words, or when it is another validation organism)."""
    from interplab.core.errors import InputError

    planted = ctx.planted
    if planted is not None and planted[0] == "truth":
        from interplab.zoo.validation.truth_scores import planted_truth_items

        return {"truth_items": planted_truth_items(ctx.n_items, seed=ctx.seed, memory_map=planted[1]["memory_map"])}
    if planted is not None:
        raise InputError(f"this validation organism ({planted[0]}) has no verification items")
    from interplab.zoo.cards import model_format
    from interplab.probes.truth import ctxmem_truth_set

    return {"truth_items": ctxmem_truth_set(ctx.n_items, seed=ctx.seed, fmt=model_format(model),
                                            tokenizer=model.tokenizer)}


def _user_data(model, path: str, ctx) -> dict:
    from interplab.probes.truth.data import user_truth_set

    return {"truth_items": user_truth_set(path, limit=ctx.n_items, seed=ctx.seed)}


def _planted_setup(data: dict, t: dict) -> dict:
    """Conflict prompts `c_x q_0` vs `c_x' q_0`: entity 0 has the weakest memory, so the planted heads' copy of the
    context value decides the answer (a_x vs a_x'); x, x' avoid the memorised value."""
    M = t["memory_map"]
    x, x2 = [v for v in range(len(M)) if v != M[0]][:2]
    return {"pair": (f"c{x} q0", f"c{x2} q0"), "answer": f"a{x}", "wrong": f"a{x2}",
            "texts": [it["text"] for it in data["truth_items"][:64]], "direction_layer": 0}


def _compute(model, data: dict, ctx) -> dict:
    from interplab.probes.truth import truth_scores

    ts = ctx.step("truth", lambda: truth_scores(model, data["truth_items"], solver=ctx.solver, seed=ctx.seed + 42,
                                                capture_batch_size=ctx.batch_size))
    return {} if ts is None else {"truth": ts.scores}


def _planted(truth: dict, strengths: dict, dirs: dict) -> list[dict]:
    """Planted-head recovery of every head map (AUROC, all planted heads in the top |planted| + 2): the organism
    plants the heads, so patching and DLA are scored too, not only the Truth Score."""
    from interplab.probes.truth.validation import planted_recovery

    rows = []
    if not strengths:
        rows.append({"check": "a head map computed", "method": "", "value": float("nan"), "target": "a map",
                     "passed": False})
    for name, m in strengths.items():
        mask = np.zeros(m.shape, bool)
        for layer, h in truth["planted_heads"]:
            mask[layer, h] = True
        rec = planted_recovery(m, mask)
        rows += [{"check": "auroc planted vs other heads", "method": name, "value": rec["auroc"],
                  "target": ">= 0.95", "passed": rec["auroc"] >= 0.95},
                 {"check": "all planted heads in top |planted|+2", "method": name, "value": rec["all_in_top"],
                  "target": "= 1", "passed": rec["all_in_top"] == 1.0}]
    return rows


PART = AtlasPart(
    method="truth",
    compute=_compute,
    head_maps={"truth": "Truth Score (held-out accuracy)"},
    signed=True,                       # a held-out accuracy: higher is more truth-tracking, never |.|
    fields={"truth_items": None},
    inputs=_inputs,
    user_setting="truth_data",
    user_data=_user_data,
    absent="this validation organism has no verification items",
    planted_kinds={"truth-scores": "truth"},
    planted_setup=_planted_setup,
    planted=_planted,
    fallback_texts=lambda data: [it["text"] for it in (data.get("truth_items") or [])][:64],
)
