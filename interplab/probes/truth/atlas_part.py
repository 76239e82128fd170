"""Truth Scores in the atlas (`interplab.probes.atlas_contract`): the per-head Truth-Score map on CtxMem
verification items (a model whose vocabulary has no CtxMem words, a real model, reads the counterfactual world facts
of `truth-scores --set data=world-facts` instead, probed with folds grouped by fact; or a truth validation
organism's planted items, or the user's file), and the planted-head recovery check of every head map on that
organism. The atlas finds this part through `interplab.methods.truth`."""
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
    from interplab.data.toy_vocab import speaks_toy_vocab

    if not speaks_toy_vocab(model.tokenizer):
        return {"truth_items": world_fact_rows(model, ctx.n_items, seed=ctx.seed)}
    from interplab.zoo.cards import model_format
    from interplab.probes.truth import ctxmem_truth_set

    return {"truth_items": ctxmem_truth_set(ctx.n_items, seed=ctx.seed, fmt=model_format(model),
                                            tokenizer=model.tokenizer)}


def world_fact_rows(model, n_rows: int, seed: int = 0) -> list[dict]:
    """About `n_rows` verification rows (three per fact: context, memory and in-context distractor answers) from
    the shipped world facts the model is known to answer closed-book (its shipped filter; all facts when it has
    none), as `truth-scores --set data=world-facts` builds them (`facts_map.fact_probe_rows`)."""
    from interplab.core.errors import ConfigError
    from interplab.data.world_facts import counterfactual_items, load_facts, load_known
    from interplab.probes.truth.facts_map import fact_probe_rows

    facts = load_facts()
    try:
        facts = facts[load_known(str(getattr(model, "name", "")), facts)].reset_index(drop=True)
    except ConfigError:
        pass                      # no shipped closed-book filter for this model: every fact
    items = counterfactual_items(facts, seed=seed, distractor=True)
    return fact_probe_rows(model, items[:max(5, -(-n_rows // 3))], seed=seed)


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

    items = data["truth_items"]
    if items and isinstance(items[0], dict) and "index" in items[0]:
        # world-fact rows: a fact's two or three rows share their context, so the folds keep each fact on one side
        ts = ctx.step("truth", lambda: _grouped_scores(model, items, ctx))
    else:
        ts = ctx.step("truth", lambda: truth_scores(model, items, solver=ctx.solver, seed=ctx.seed + 42,
                                                    capture_batch_size=ctx.batch_size))
    return {} if ts is None else {"truth": ts.scores}


def _grouped_scores(model, rows, ctx):
    import torch

    from interplab.probes.truth.facts_map import group_folds
    from interplab.probes.truth.scores import TruthScoresConfig, capture_head_outputs, truth_scores_from_activations

    cfg = TruthScoresConfig(solver=ctx.solver, seed=ctx.seed + 42).validate()
    X = capture_head_outputs(model, [r["text"] for r in rows], batch_size=ctx.batch_size, dtype=torch.float32)
    y = np.array([r["label"] for r in rows], dtype=np.int64)
    folds = group_folds([r["index"] for r in rows], cfg.folds, cfg.seed)
    return truth_scores_from_activations(X, y, cfg, model=str(getattr(model, "name", "")), splits=folds,
                                         provenance={"fold_groups": "fact", "data": "world facts"})


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
