"""TruthProbe gating on counterfactual world facts (spec truth_scores.md §9 "On a real model"; issue 27 §1).

The known facts are split by fact into three disjoint parts: a *probe* split that gives the Truth-Score map (grouped
folds, `facts_map`), a *tune* split on which the gate mode and strength α are chosen, and an *eval* split on which
the chosen gates are measured against the ungated model and against within-layer shuffled maps at the same mode
and α (the paper's null: the same gate values on the wrong heads).

Two read-outs of "follows the context", both from the model's own answer, never from a model-made gold:
- generation: greedy reply to the chat-templated question; the relation's object it names first
  (`world_facts.first_named`) is the context's value (context-following), the memory value, or something else;
- forced choice: at the answer's first position, is the context value's first token more likely than the memory
  value's? (one forward per prompt; items whose two values share their first token are left out). The tuning and
  the null maps use it, because 200 maps x N generations do not fit a CPU budget; the headline rates are
  generated.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from interplab.core.errors import ConfigError, InputError
from interplab.core.result import Result
from interplab.probes.stats import intervals


def split_items(items: Sequence[Mapping], fractions: Sequence[float] = (0.4, 0.2, 0.4), seed: int = 0
                ) -> tuple[list, list, list]:
    """(probe, tune, eval) items: a seeded permutation of the facts cut by `fractions` (they must sum to 1)."""
    if len(fractions) != 3 or abs(sum(fractions) - 1) > 1e-9 or min(fractions) <= 0:
        raise ConfigError(f"fractions must be three positive shares summing to 1, got {list(fractions)}")
    order = np.random.default_rng(seed).permutation(len(items))
    a = int(round(fractions[0] * len(items)))
    b = a + int(round(fractions[1] * len(items)))
    parts = [order[:a], order[a:b], order[b:]]
    if min(len(p) for p in parts) < 2:
        raise InputError(f"{len(items)} facts are too few to split {list(fractions)} (each part needs >= 2)")
    return tuple([items[int(i)] for i in p] for p in parts)


def _first_token(tokenizer, value: str) -> int:
    ids = tokenizer(value, add_special_tokens=False)["input_ids"]
    return int(ids[0])


def forced_choice_items(model, items: Sequence[Mapping]) -> tuple[list[str], np.ndarray, np.ndarray, list[int]]:
    """(prompts, context first-token ids, memory first-token ids, kept item positions): items whose two values
    begin with the same token are dropped (no forced choice can tell them apart)."""
    from interplab.data.world_facts import generation_prompt

    prompts, c_ids, m_ids, kept = [], [], [], []
    for i, it in enumerate(items):
        c, m = _first_token(model.tokenizer, it["context_value"]), _first_token(model.tokenizer, it["memory_value"])
        if c == m:
            continue
        prompts.append(generation_prompt(it, model.tokenizer))
        c_ids.append(c)
        m_ids.append(m)
        kept.append(i)
    if not prompts:
        raise InputError("no item has values with different first tokens")
    return prompts, np.array(c_ids), np.array(m_ids), kept


def forced_choice(model, fc, edits=None, *, batch_size: int = 32) -> np.ndarray:
    """[n] bool: the context value's first token outscores the memory value's at the answer's first position.
    fc: `forced_choice_items(...)` output."""
    prompts, c_ids, m_ids, _ = fc
    out = []
    with torch.no_grad():
        for s in range(0, len(prompts), batch_size):
            res = model.run(prompts[s:s + batch_size], edits=edits, chat=False, logits_last=1)
            last = res.logits[:, -1].float().cpu().numpy()
            r = np.arange(len(last))
            out.append(last[r, c_ids[s:s + batch_size]] > last[r, m_ids[s:s + batch_size]])
    return np.concatenate(out)


def generated_choice(model, items: Sequence[Mapping], edits=None, *, max_new_tokens: int = 12,
                     batch_size: int = 32) -> pd.DataFrame:
    """One row per item: reply, named (the value the reply names first among the context, memory and, where the
    item has one, distractor values; `world_facts.first_named`), and context / memory / distractor flags."""
    from interplab.data.world_facts import first_named, generation_prompt

    replies: list[str] = []
    for s in range(0, len(items), batch_size):
        chunk = [generation_prompt(it, model.tokenizer) for it in items[s:s + batch_size]]
        gen = model.generate(chunk, max_new_tokens=max_new_tokens, edits=edits, return_logits=False, chat=False)
        replies.extend(model.tokenizer.decode(t, skip_special_tokens=True).strip() for t in gen.new_tokens)
    rows = []
    for it, rep in zip(items, replies):
        cands = [it["context_value"], it["memory_value"]] + ([it["distractor_value"]] if "distractor_value" in it
                                                              else [])
        named = first_named(rep, it["subject"], cands)
        rows.append({"index": it["index"], "relation": it["relation"], "reply": rep, "named": named,
                     "context": named == it["context_value"], "memory": named == it["memory_value"],
                     "distractor": named is not None and named == it.get("distractor_value")})
    return pd.DataFrame(rows)


@dataclass
class FactsGating(Result):
    """TruthProbe gating on world facts: tuning table, chosen setting, held-out rates and the shuffled-map null.

    model: the gated model; score_source: whose map gives the gates. scores: [L, H] map from the probe split.
    tune: one row per (mode, alpha): forced-choice context rate on the tune split. mode / alpha / site / rebase:
    the chosen setting (the best tune rate; ties to the smallest alpha). eval: one row per (condition, read-out):
    rate with its 95% bootstrap interval over eval items (conditions "ungated" and "gated"; read-outs
    "generated_context", "generated_memory", "generated_distractor", "forced_choice"). diff: gated - ungated per
    read-out (paired bootstrap).
    null: [n_maps] forced-choice context rate on the eval split under within-layer shuffled maps at the chosen
    setting; p: (1 + #{null >= gated}) / (n_maps + 1). replies: the eval split's generations (both conditions).
    n_split: facts per split.
    """

    model: str
    score_source: str
    scores: np.ndarray
    tune: pd.DataFrame
    mode: str
    alpha: float
    site: str
    rebase: str
    eval: pd.DataFrame
    diff: pd.DataFrame
    null: np.ndarray
    p: float
    replies: pd.DataFrame
    n_split: dict = field(default_factory=dict)

    def summary(self) -> dict:
        ev = self.eval.set_index(["condition", "readout"])["rate"]
        return {"model": self.model, "score_source": self.score_source, "mode": self.mode, "alpha": self.alpha,
                "site": self.site, "rebase": self.rebase, **{f"n_{k}": v for k, v in self.n_split.items()},
                **{f"{c}_{r}": float(v) for (c, r), v in ev.items()}, "n_maps": int(len(self.null)),
                "null_mean": float(np.mean(self.null)), "null_q95": float(np.quantile(self.null, 0.95)),
                "p_gated_vs_null": self.p}

    def to_frame(self) -> pd.DataFrame:
        return self.eval


def facts_gating(model, probe_items, tune_items, eval_items, *, scores=None, score_source: str = "self",
                 probe_config=None, modes: Sequence[str] = ("normalize", "contrast"),
                 alphas: Sequence[float] = (0.5, 1.0, 2.0, 4.0), site: str = "z", rebase: str = "none",
                 n_maps: int = 200, seed: int = 0, max_new_tokens: int = 12, batch_size: int = 32,
                 progress=None) -> FactsGating:
    """Gating of `model` on the three splits (`split_items`). scores: a [L, H] map to gate with (default: the map of
    `model` on `probe_items`, grouped folds). See the module docstring for the protocol."""
    from interplab.interventions.head_gate import HeadGate, truth_gates
    from interplab.probes.truth.facts_map import fact_probe_rows, group_folds
    from interplab.probes.truth.lineage import within_layer_permutations
    from interplab.probes.truth.scores import TruthScoresConfig, capture_head_outputs, truth_scores_from_activations

    say = progress or (lambda msg: None)
    if n_maps < 1 or not modes or not alphas:
        raise InputError("need n_maps >= 1 and at least one mode and one alpha")
    if scores is None:
        cfg = (probe_config or TruthScoresConfig()).validate()
        rows = fact_probe_rows(model, probe_items, seed=seed)
        X = capture_head_outputs(model, [r["text"] for r in rows], batch_size=batch_size)
        y = np.array([r["label"] for r in rows])
        g = np.array([r["index"] for r in rows])
        s = truth_scores_from_activations(X, y, cfg, splits=group_folds(g, cfg.folds, cfg.seed)).scores
        say(f"map from {len(probe_items)} probe facts: max S {s.max():.3f}")
    else:
        s = np.asarray(getattr(scores, "scores", scores), dtype=float)
    s = np.asarray(s, dtype=float)
    if s.shape != (model.n_layers, model.n_heads):
        raise ConfigError(f"the map is {s.shape}, the model has {model.n_layers} layers x {model.n_heads} heads")

    def gate(map_, mode, a):
        return [HeadGate(truth_gates(map_, mode, a, rebase=rebase), site=site)]

    fc_tune = forced_choice_items(model, tune_items)
    tune = [{"mode": "ungated", "alpha": 0.0, "context_rate": float(forced_choice(model, fc_tune).mean())}]
    for mode in modes:
        for a in alphas:
            tune.append({"mode": mode, "alpha": float(a),
                         "context_rate": float(forced_choice(model, fc_tune, gate(s, mode, a)).mean())})
            say(f"tune {mode} α={a}: {tune[-1]['context_rate']:.3f}")
    tune_df = pd.DataFrame(tune)
    gated_rows = tune_df[tune_df["mode"] != "ungated"]
    best = gated_rows.sort_values(["context_rate", "alpha"], ascending=[False, True], kind="stable").iloc[0]
    mode, alpha = str(best["mode"]), float(best["alpha"])

    fc_eval = forced_choice_items(model, eval_items)
    fc0 = forced_choice(model, fc_eval)
    fc1 = forced_choice(model, fc_eval, gate(s, mode, alpha))
    gen0 = generated_choice(model, eval_items, max_new_tokens=max_new_tokens, batch_size=batch_size)
    gen1 = generated_choice(model, eval_items, gate(s, mode, alpha), max_new_tokens=max_new_tokens,
                            batch_size=batch_size)
    say("eval generations done")
    ev, diff = [], []
    for readout, a0, a1 in (("generated_context", gen0["context"], gen1["context"]),
                            ("generated_memory", gen0["memory"], gen1["memory"]),
                            ("generated_distractor", gen0["distractor"], gen1["distractor"]),
                            ("forced_choice", fc0, fc1)):
        for cond, flags in (("ungated", a0), ("gated", a1)):
            iv = intervals(np.asarray(flags, dtype=float), method="bootstrap", B=2000, seed=seed)
            ev.append({"condition": cond, "readout": readout, "rate": iv.mean, "lo": iv.lo, "hi": iv.hi,
                       "n": int(len(flags))})
        # paired over items: the bootstrap of the per-item difference
        iv = intervals(np.asarray(a1, dtype=float) - np.asarray(a0, dtype=float), method="bootstrap", B=2000,
                       seed=seed)
        diff.append({"readout": readout, "gated_minus_ungated": iv.mean, "lo": iv.lo, "hi": iv.hi})
    perms = within_layer_permutations(*s.shape, n_maps, seed)
    null = np.empty(n_maps)
    for b in range(n_maps):   # the same gate values on shuffled heads within each layer
        null[b] = forced_choice(model, fc_eval, gate(np.take_along_axis(s, perms[b], axis=-1), mode, alpha)).mean()
        if (b + 1) % 20 == 0:
            say(f"null map {b + 1}/{n_maps}")
    p = float((1 + np.sum(null >= fc1.mean() - 1e-9)) / (n_maps + 1))
    replies = pd.concat([gen0.assign(condition="ungated"), gen1.assign(condition="gated")], ignore_index=True)
    return FactsGating(model=str(getattr(model, "name", "") or ""), score_source=score_source, scores=s,
                       tune=tune_df, mode=mode, alpha=alpha, site=site, rebase=rebase, eval=pd.DataFrame(ev),
                       diff=pd.DataFrame(diff), null=null, p=p, replies=replies,
                       n_split={"probe": len(probe_items), "tune": len(tune_items), "eval": len(eval_items),
                                "eval_forced_choice": len(fc_eval[0])})
