"""TruthProbe gating on counterfactual world facts (spec truth_scores.md §9 "On a real model"; issues 27 §1, 46 §2).

The known facts are split by fact into three disjoint parts: a *probe* split that gives the Truth-Score map (grouped
folds, `facts_map`; the map of the target itself or of another model with the same head grid, e.g. a base model's
map gating its descendant, the paper's headline), a *tune* split on which the gate mode and strength α are chosen,
and an *eval* split on which the chosen gates are measured against the ungated model and against within-layer
shuffled maps at the same mode and α (the paper's null: the same gate values on the wrong heads).

The choice is constrained (`gating_select`): α inside the paper's range of its mode, and tune replies that pass the
degenerate-generation checks (`facts_fluency`); every generated reply carries its token ids and its NLL/token under
the ungated model, so the fluency of ungated, gated and shuffled-map replies is reported and checked.

Two read-outs of "follows the context", both from the model's own answer, never from a model-made gold:
- generation: greedy reply to the chat-templated question; the relation's object it names first
  (`world_facts.first_named`) is the context's value (context-following), the memory value, or something else.
  Tuning and the headline rates use it;
- forced choice: at the answer's first position, is the context value's first token more likely than the memory
  value's? (one forward per prompt; items whose two values share their first token are left out). The shuffled-map
  null uses it, because n_maps x N generations do not fit a CPU budget; a few shuffled maps also generate, so
  their replies are checked for degeneracy like the gated ones.
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
from interplab.probes.truth.facts_fluency import continuation_nll, fluency, token_string
from interplab.probes.truth.gating_select import (PAPER_ALPHA_RANGES, PAPER_ALPHAS, SELECT_BY, gate_grid,
                                                  select_setting, setting_key, tune_choice)


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


def _by_length(texts: Sequence[str]) -> np.ndarray:
    """Positions in order of length: batches of similar lengths waste less on left padding (results are put back in
    the given order)."""
    return np.argsort([len(t) for t in texts], kind="stable")


def forced_choice(model, fc, edits=None, *, batch_size: int = 32) -> np.ndarray:
    """[n] bool: the context value's first token outscores the memory value's at the answer's first position.
    fc: `forced_choice_items(...)` output."""
    prompts, c_ids, m_ids, _ = fc
    order = _by_length(prompts)
    out = np.zeros(len(prompts), dtype=bool)
    with torch.no_grad():
        for s in range(0, len(prompts), batch_size):
            idx = order[s:s + batch_size]
            res = model.run([prompts[i] for i in idx], edits=edits, chat=False, logits_last=1)
            last = res.logits[:, -1].float().cpu().numpy()
            r = np.arange(len(last))
            out[idx] = last[r, c_ids[idx]] > last[r, m_ids[idx]]
    return out


def generated_choice(model, items: Sequence[Mapping], edits=None, *, max_new_tokens: int = 12,
                     batch_size: int = 32, nll: bool = True) -> pd.DataFrame:
    """One row per item: reply, tokens (the reply's token ids, space-joined, stop tokens dropped), nll (its mean
    NLL/token after its prompt under `model` with no edit; NaN for an empty reply or with nll=False), named (the
    value the reply names first among the context, memory and, where the item has one, distractor values;
    `world_facts.first_named`), and context / memory / distractor flags."""
    from interplab.data.world_facts import first_named, generation_prompt

    prompts = [generation_prompt(it, model.tokenizer) for it in items]
    order = _by_length(prompts)
    replies, toks, p_ids = [""] * len(items), [[] for _ in items], [[] for _ in items]
    stop = set(int(t) for t in getattr(model, "stop_token_ids", torch.zeros(0)).tolist())
    for s in range(0, len(items), batch_size):
        idx = order[s:s + batch_size]
        gen = model.generate([prompts[i] for i in idx], max_new_tokens=max_new_tokens, edits=edits,
                             return_logits=False, chat=False)
        mask = gen.batch.attention_mask.bool().cpu()
        for j, i in enumerate(idx):
            toks[i] = [int(t) for t in gen.new_tokens[j] if int(t) not in stop]
            replies[i] = model.tokenizer.decode(gen.new_tokens[j], skip_special_tokens=True).strip()
            p_ids[i] = gen.batch.input_ids[j].cpu()[mask[j]].tolist()
    nlls = continuation_nll(model, p_ids, toks, batch_size=batch_size) if nll else np.full(len(items), np.nan)
    rows = []
    for it, rep, tk, v in zip(items, replies, toks, nlls):
        cands = [it["context_value"], it["memory_value"]] + ([it["distractor_value"]] if "distractor_value" in it
                                                              else [])
        named = first_named(rep, it["subject"], cands)
        rows.append({"index": it["index"], "relation": it["relation"], "reply": rep, "tokens": token_string(tk),
                     "nll": float(v), "named": named, "context": named == it["context_value"],
                     "memory": named == it["memory_value"],
                     "distractor": named is not None and named == it.get("distractor_value")})
    return pd.DataFrame(rows)


def probe_map(model, probe_items: Sequence[Mapping], *, config=None, seed: int = 0, batch_size: int = 32
              ) -> np.ndarray:
    """[L, H] Truth-Score map of `model` on the probe facts (`facts_map.fact_probe_rows`, grouped folds): the same
    recipe whichever model the map comes from, so a target's own map and another model's are comparable."""
    from interplab.probes.truth.facts_map import fact_probe_rows, group_folds
    from interplab.probes.truth.scores import TruthScoresConfig, capture_head_outputs, truth_scores_from_activations

    cfg = (config or TruthScoresConfig()).validate()
    rows = fact_probe_rows(model, probe_items, seed=seed)
    X = capture_head_outputs(model, [r["text"] for r in rows], batch_size=batch_size)
    y = np.array([r["label"] for r in rows])
    g = np.array([r["index"] for r in rows])
    return truth_scores_from_activations(X, y, cfg, splits=group_folds(g, cfg.folds, cfg.seed)).scores


READOUTS = ("generated_context", "generated_memory", "generated_distractor", "forced_choice")


@dataclass
class FactsGating(Result):
    """TruthProbe gating on world facts: the tuning table, the chosen setting, held-out rates, fluency and the
    shuffled-map null.

    model: the gated model; score_source: whose map gives the gates ("self" or a model name). scores: [L, H] map
    from the probe split. facts: {"probe" | "tune" | "eval": fact indices}. alpha_ranges: {mode: [lo, hi]} the
    grid was held to; allow_out_of_range: whether the caller allowed settings outside them.
    tune: one row per setting (the ungated row first): mode, alpha, in_range, allowed, the generated context /
    memory rates, forced_choice (NaN unless select_by is forced_choice), the fluency of its tune replies
    (nll_per_token, distinct_token_rate, top_reply_share), eligible and failed (the failed degeneracy checks).
    select_by: the tune rate that chooses. mode / alpha: the chosen setting ("none" / NaN when no setting was
    eligible: then nothing is gated on the eval split). choice: `TuneChoice.as_dict()` (best − ungated on the tune
    split with its paired interval, within_noise). site / rebase: where and how the gates act.
    eval: one row per (condition, read-out) on the eval split: rate with its 95% bootstrap interval over facts
    (conditions "ungated" and "gated"; read-outs `READOUTS`). diff: gated − ungated per read-out (paired
    bootstrap over facts). fluency: one row per (split, condition) of generated replies (`facts_fluency.fluency`).
    null: [n_maps] forced-choice context rate on the eval split under within-layer shuffled maps at the chosen
    setting; p: (1 + #{null >= gated}) / (n_maps + 1). replies: every generation (split, condition, mode, alpha,
    index, reply, tokens, nll, named, flags); shuffled-map replies have condition "shuffled k". n_split: facts per
    split.
    """

    model: str
    score_source: str
    scores: np.ndarray
    facts: dict
    alpha_ranges: dict
    allow_out_of_range: bool
    tune: pd.DataFrame
    select_by: str
    mode: str
    alpha: float
    choice: dict
    site: str
    rebase: str
    eval: pd.DataFrame
    diff: pd.DataFrame
    fluency: pd.DataFrame
    null: np.ndarray
    p: float
    replies: pd.DataFrame
    n_split: dict = field(default_factory=dict)

    @property
    def gated(self) -> bool:
        """Whether a setting was chosen (and the eval split gated)."""
        return self.mode != "none"

    def summary(self) -> dict:
        ev = self.eval.set_index(["condition", "readout"])["rate"]
        null = np.asarray(self.null, dtype=float)
        return {"model": self.model, "score_source": self.score_source, "mode": self.mode, "alpha": self.alpha,
                "site": self.site, "rebase": self.rebase, "select_by": self.select_by,
                **{f"n_{k}": v for k, v in self.n_split.items()},
                **{f"tune_{k}": v for k, v in self.choice.items() if k not in ("mode", "alpha")},
                **{f"{c}_{r}": float(v) for (c, r), v in ev.items()}, "n_maps": int(len(null)),
                "null_mean": float(np.mean(null)) if null.size else float("nan"),
                "null_q95": float(np.quantile(null, 0.95)) if null.size else float("nan"),
                "p_gated_vs_null": self.p}

    def to_frame(self) -> pd.DataFrame:
        return self.eval


def _rates(df: pd.DataFrame, fc: np.ndarray | None) -> dict[str, np.ndarray]:
    out = {f"generated_{k}": df[k].to_numpy(dtype=float) for k in ("context", "memory", "distractor")}
    if fc is not None:
        out["forced_choice"] = np.asarray(fc, dtype=float)
    return out


def facts_gating(model, probe_items, tune_items, eval_items, *, scores=None, score_source: str = "self",
                 probe_config=None, alphas: Mapping[str, Sequence[float]] | None = None,
                 alpha_ranges: Mapping[str, Sequence[float]] | None = None, allow_out_of_range: bool = False,
                 select_by: str = "generated_context", site: str = "z", rebase: str = "none", n_maps: int = 100,
                 n_null_replies: int = 2, seed: int = 0, max_new_tokens: int = 12, batch_size: int = 32,
                 progress=None) -> FactsGating:
    """Gating of `model` on the three splits (`split_items`). scores: a [L, H] map to gate with (default: the map of
    `model` on `probe_items`, `probe_map`). alphas: {mode: [α, ...]} (default: the paper's shipped values,
    `PAPER_ALPHAS`); alpha_ranges: {mode: (lo, hi)} (default `PAPER_ALPHA_RANGES`). n_null_replies: shuffled maps
    (the first of the null) whose eval replies are generated and checked. See the module docstring."""
    from interplab.interventions.head_gate import HeadGate, truth_gates
    from interplab.probes.truth.facts_fluency import generation_checks
    from interplab.probes.truth.lineage import within_layer_permutations

    say = progress or (lambda msg: None)
    alphas = {k: list(v) for k, v in (alphas or PAPER_ALPHAS).items()}
    ranges = {k: [float(x) for x in v] for k, v in (alpha_ranges or PAPER_ALPHA_RANGES).items()}
    grid = gate_grid(alphas, ranges, allow_out_of_range=allow_out_of_range)
    if n_maps < 1 or not 0 <= n_null_replies <= n_maps:
        raise InputError(f"need n_maps >= 1 and 0 <= n_null_replies <= n_maps, got {n_maps} and {n_null_replies}")
    s = probe_map(model, probe_items, config=probe_config, seed=seed, batch_size=batch_size) if scores is None \
        else np.asarray(getattr(scores, "scores", scores), dtype=float)
    if s.shape != (model.n_layers, model.n_heads):
        raise ConfigError(f"the map is {s.shape}, the model has {model.n_layers} layers x {model.n_heads} heads")
    say(f"map ({score_source}): max S {s.max():.3f}")

    def gate(map_, mode, a):
        return [HeadGate(truth_gates(map_, mode, a, rebase=rebase), site=site)]

    def generate(items, edits):
        return generated_choice(model, items, edits, max_new_tokens=max_new_tokens, batch_size=batch_size)

    # ---- tune: every setting generates; the degeneracy checks decide which may be chosen
    if select_by not in SELECT_BY:
        raise ConfigError(f"select_by must be one of {SELECT_BY}, got {select_by!r}")
    fc_tune = forced_choice_items(model, tune_items) if select_by == "forced_choice" else None
    gen0 = generate(tune_items, None)
    tune, flags, replies = [], {}, [gen0.assign(split="tune", condition="ungated", mode="ungated", alpha=0.0)]

    def tune_row(mode, a, in_range, gen, edits):
        """The setting's tune row; its per-fact selection flags go to `flags`."""
        f = fluency(gen)
        fc = forced_choice(model, fc_tune, edits) if fc_tune else None
        flags[setting_key(mode, a)] = (fc if select_by == "forced_choice" else gen["context"]).astype(float)
        # the ungated row is checked too (never chosen): a model that is degenerate ungated can show nothing
        checks = generation_checks(gen, None if edits is None else gen0,
                                   subject=f"tune replies, {mode}" + (f" α={a:g}" if edits else ""))
        failed = [c for c in checks if not c.passed]
        return {"mode": mode, "alpha": a, "in_range": in_range, "allowed": in_range or allow_out_of_range,
                "generated_context": gen["context"].mean(), "generated_memory": gen["memory"].mean(),
                "forced_choice": fc.mean() if fc is not None else float("nan"),
                "nll_per_token": f["nll_per_token"], "distinct_token_rate": f["distinct_token_rate"],
                "top_reply_share": f["top_reply_share"], "eligible": not failed,
                "failed": "; ".join(f"{c.kind}: {c.detail}" for c in failed)}

    tune.append(tune_row("ungated", 0.0, True, gen0, None))
    for st in grid:
        edits = gate(s, st.mode, st.alpha)
        gen = generate(tune_items, edits)
        replies.append(gen.assign(split="tune", condition="gated", mode=st.mode, alpha=st.alpha))
        tune.append(tune_row(st.mode, st.alpha, st.in_range, gen, edits))
        say(f"tune {st.mode} α={st.alpha:g}: context {tune[-1]['generated_context']:.3f}, "
            f"{'eligible' if tune[-1]['eligible'] else 'not eligible: ' + tune[-1]['failed']}")
    tune_df = pd.DataFrame(tune)
    best = select_setting(tune_df, select_by)
    choice = tune_choice(best, flags, flags[setting_key("ungated", 0.0)], by=select_by, seed=seed)
    mode, alpha = (str(best["mode"]), float(best["alpha"])) if best is not None else ("none", float("nan"))
    say(f"chosen: {mode} α={alpha:g}" + (" (tune: within noise of no gate)" if choice.within_noise else ""))

    # ---- eval: ungated, gated, shuffled maps
    fc_eval = forced_choice_items(model, eval_items)
    ev0 = generate(eval_items, None)
    replies.append(ev0.assign(split="eval", condition="ungated", mode="ungated", alpha=0.0))
    arms = {"ungated": _rates(ev0, forced_choice(model, fc_eval))}
    null, p = np.zeros(0), float("nan")
    if best is not None:
        ev1 = generate(eval_items, gate(s, mode, alpha))
        replies.append(ev1.assign(split="eval", condition="gated", mode=mode, alpha=alpha))
        arms["gated"] = _rates(ev1, forced_choice(model, fc_eval, gate(s, mode, alpha)))
        say("eval generations done")
        perms = within_layer_permutations(*s.shape, n_maps, seed)
        null = np.empty(n_maps)
        for b in range(n_maps):   # the same gate values on shuffled heads within each layer
            shuffled = gate(np.take_along_axis(s, perms[b], axis=-1), mode, alpha)
            null[b] = forced_choice(model, fc_eval, shuffled).mean()
            if b < n_null_replies:
                replies.append(generate(eval_items, shuffled).assign(split="eval", condition=f"shuffled {b + 1}",
                                                                     mode=mode, alpha=alpha))
            if (b + 1) % 10 == 0:
                say(f"null map {b + 1}/{n_maps}")
        p = float((1 + np.sum(null >= arms["gated"]["forced_choice"].mean() - 1e-9)) / (n_maps + 1))
    ev, diff = [], []
    for readout in READOUTS:
        for cond, r in arms.items():
            iv = intervals(r[readout], method="bootstrap", B=2000, seed=seed)
            ev.append({"condition": cond, "readout": readout, "rate": iv.mean, "lo": iv.lo, "hi": iv.hi,
                       "n": int(len(r[readout]))})
        if "gated" in arms:   # paired over facts: the bootstrap of the per-fact difference
            iv = intervals(arms["gated"][readout] - arms["ungated"][readout], method="bootstrap", B=2000, seed=seed)
            diff.append({"readout": readout, "gated_minus_ungated": iv.mean, "lo": iv.lo, "hi": iv.hi})
    rep = pd.concat(replies, ignore_index=True)
    flu = pd.DataFrame([{"split": sp, "condition": c, "mode": m, "alpha": a, **fluency(g)}
                        for (sp, c, m, a), g in rep.groupby(["split", "condition", "mode", "alpha"], sort=False)])
    lead = ["split", "condition", "mode", "alpha", "index", "relation"]
    return FactsGating(model=str(getattr(model, "name", "") or ""), score_source=score_source, scores=s,
                       facts={k: [int(it["index"]) for it in v] for k, v in (("probe", probe_items),
                                                                              ("tune", tune_items),
                                                                              ("eval", eval_items))},
                       alpha_ranges=ranges, allow_out_of_range=bool(allow_out_of_range), tune=tune_df,
                       select_by=select_by, mode=mode, alpha=alpha, choice=choice.as_dict(), site=site,
                       rebase=rebase, eval=pd.DataFrame(ev),
                       diff=pd.DataFrame(diff, columns=["readout", "gated_minus_ungated", "lo", "hi"]),
                       fluency=flu, null=null, p=p,
                       replies=rep[lead + [c for c in rep.columns if c not in lead]],
                       n_split={"probe": len(probe_items), "tune": len(tune_items), "eval": len(eval_items),
                                "eval_forced_choice": len(fc_eval[0])})
