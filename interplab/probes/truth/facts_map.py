"""A Truth-Score map on counterfactual world facts, with its label-permutation null (spec truth_scores.md §9 "On a real
model"; issue 27 §1).

Each known fact gives three verification texts that differ only in the answer: the chat-templated question with a
context that states another object of the relation (and a true sentence of the same relation about another subject),
answered with the context's value (label 1), the memory value or the in-context distractor (label 0)
(`interplab.data.world_facts`, `counterfactual_items(distractor=True)`). The distractor matters: with context and
memory answers only, "the answer occurs in the context" gives the label, and a head that merely detects a repeated
token scores high; with it, that shortcut is worth the majority rate (2/3) only. Without distractors (pairs) the
same code runs. Every head's z at the answer's last token is probed as in §2.2, with folds that keep a fact's texts
together (otherwise the probe could match a held-out twin of a training row).

The null permutes the labels within each fact's texts (the same folds, solver and activations): under it no head
can separate the answers, and each head's map value gets a permutation p. Multiple testing over the
L x H heads: the family-wise maxT rule (a head is significant when its S exceeds the (1-alpha) quantile of the
null maps' maxima, Westfall-Young) and Benjamini-Hochberg q-values.

    >>> rows = fact_probe_rows(model, items)                 # items: world_facts.counterfactual_items(...)
    >>> fm = facts_truth_map(model, rows, n_null=200)
    >>> fm.significant().sum(), fm.per_layer()
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from interplab.core.errors import DataError, InputError, ShapeError
from interplab.core.result import Result
from interplab.probes.stats import bh_qvalues, wilson_interval
from interplab.probes.truth.scores import TruthScores, TruthScoresConfig, capture_head_outputs, evidence_attention

ROW_KEYS = ("text", "label", "index", "relation", "candidate_kind", "evidence")


def _encode(tokenizer, prompt: str, answer: str, value: str) -> tuple[list[int], list[int]]:
    """Token ids of prompt + answer and the positions of the context's value in the prompt. A chat-templated prompt
    carries the template's own <bos> where there is one, so special tokens are added only for a model without a
    template (a base model reads the plain message, with its <bos>)."""
    templated = bool(getattr(tokenizer, "chat_template", None))
    text = prompt + ("" if templated else " ") + answer     # a plain prompt ends in "Answer:"
    enc = tokenizer(text, add_special_tokens=not templated, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
    start = prompt.find("Context: ")
    at = prompt.find(value, start)
    if start < 0 or at < 0:
        raise DataError(f"the context of {prompt[-120:]!r} does not state {value!r}")
    end = at + len(value)
    ev = [i for i, (a, b) in enumerate(offsets) if a < end and b > at]
    if not ev:
        raise DataError(f"no token covers the context value {value!r}")
    return ids, ev


def fact_probe_rows(model, items: Sequence[Mapping], *, seed: int = 0) -> list[dict]:
    """Verification rows for the probe: {"text" (token ids), "label", "index", "relation", "candidate_kind",
    "evidence" (token positions of the context's value)}, two or three per item (`world_facts.verification_rows`)."""
    from interplab.data.world_facts import generation_prompt, verification_rows

    if not items:
        raise InputError("no counterfactual items given")
    by_index = {int(it["index"]): it for it in items}
    rows = []
    for r in verification_rows(items, seed=seed):
        it = by_index[int(r["index"])]
        prompt = generation_prompt({"context": r["knowledge"], "question": r["question"]}, model.tokenizer)
        ids, ev = _encode(model.tokenizer, prompt, str(r["answer"]), str(it["context_value"]))
        rows.append({"text": ids, "label": int(r["label"]), "index": int(r["index"]), "relation": r["relation"],
                     "candidate_kind": r["candidate_kind"], "evidence": ev})
    return rows


def group_folds(groups: Sequence[int], n_folds: int = 5, seed: int = 42) -> list[tuple[np.ndarray, np.ndarray]]:
    """K folds that keep every group (a fact's pair) on one side: groups shuffled with `seed`, dealt round-robin."""
    g = np.asarray(groups)
    uniq = np.unique(g)
    if len(uniq) < n_folds:
        raise InputError(f"need at least {n_folds} facts for {n_folds} folds, got {len(uniq)}")
    perm = np.random.default_rng(seed).permutation(uniq)
    fold_of_group = {int(v): i % n_folds for i, v in enumerate(perm)}
    fold = np.array([fold_of_group[int(v)] for v in g])
    return [(np.flatnonzero(fold != f), np.flatnonzero(fold == f)) for f in range(n_folds)]


def group_permutations(labels: np.ndarray, groups: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """[n, N] label vectors, each a random permutation of the labels within every group (a fact's two or three
    texts): every null keeps the class balance and the one-positive-per-fact structure of the real labels."""
    labels, groups = np.asarray(labels), np.asarray(groups)
    _, inv = np.unique(groups, return_inverse=True)
    by_group = labels[np.argsort(inv, kind="stable")]      # labels listed group by group
    rng = np.random.default_rng(seed)
    out = np.empty((n, len(labels)), dtype=labels.dtype)
    for b in range(n):
        # rows listed group by group in a random order within each group receive the listed labels
        out[b, np.lexsort((rng.random(len(labels)), inv))] = by_group
    return out


@dataclass
class FactsTruthMap(Result):
    """A Truth-Score map on counterfactual world facts with its label-permutation null.

    model: the scored model. scores: the TruthScores (fold mean accuracy; provenance has the folds).
    null_maps: [n_null, L, H] maps under labels permuted within each fact (same folds, solver, activations).
    p_perm: [L, H] per-head permutation p, (1 + #{null >= S}) / (n_null + 1). p_maxt: [L, H] family-wise
    (Westfall-Young maxT) p, the same against each null map's maximum. q_bh: Benjamini-Hochberg q of p_perm.
    evidence_mass: [L, H] attention of the answer's last token onto the context's value tokens (mean over rows).
    seed_maps: [n_seeds, L, H] maps under other fold seeds (stability). alpha: the significance level.
    rows: one row per probed text (index, relation, candidate_kind, label).
    null_auroc / seed_auroc: the null's and the other fold seeds' maps of the balanced metric, the held-out ROC AUC
    (`scores.auroc`; chance 0.5 at any class ratio, where S's chance is the majority rate).
    half_maps / half_auroc: [2, L, H] maps from two disjoint halves of the facts (split-half reliability).
    intervals: per head S and AUROC with fact-bootstrap intervals (`map_stats.head_intervals`; empty: not computed).
    best_held_out: the best head by AUROC chosen on half of the facts, scored on the other half
    (`map_stats.held_out_best_head`; empty: not computed).
    """

    model: str
    scores: TruthScores
    null_maps: np.ndarray
    p_perm: np.ndarray
    p_maxt: np.ndarray
    q_bh: np.ndarray
    evidence_mass: np.ndarray
    seed_maps: np.ndarray
    rows: pd.DataFrame
    alpha: float = 0.05
    timings: dict = field(default_factory=dict)
    null_auroc: np.ndarray | None = None
    seed_auroc: np.ndarray | None = None
    half_maps: np.ndarray | None = None
    half_auroc: np.ndarray | None = None
    intervals: pd.DataFrame | None = None
    best_held_out: dict = field(default_factory=dict)

    def __post_init__(self):
        shape = self.scores.scores.shape
        for name in ("p_perm", "p_maxt", "q_bh", "evidence_mass"):
            arr = np.asarray(getattr(self, name), dtype=float)
            if arr.shape != shape:
                raise ShapeError(f"{name} must be {shape} like the map, got {arr.shape}")
            setattr(self, name, arr)
        for name in ("null_auroc", "seed_auroc", "half_maps", "half_auroc"):   # maps saved before issue 46 lack them
            if getattr(self, name) is None:
                setattr(self, name, np.zeros((0, *shape)))
        if self.intervals is None:
            self.intervals = pd.DataFrame()
        for name in ("null_maps", "seed_maps", "null_auroc", "seed_auroc", "half_maps", "half_auroc"):
            arr = np.asarray(getattr(self, name), dtype=float)
            if arr.ndim != 3 or arr.shape[1:] != shape:
                raise ShapeError(f"{name} must be [n, {shape[0]}, {shape[1]}], got {arr.shape}")
            setattr(self, name, arr)

    @property
    def n_null(self) -> int:
        return int(self.null_maps.shape[0])

    def significant(self, rule: str = "maxt", metric: str = "S") -> np.ndarray:
        """[L, H] bool: "maxt" (family-wise, p_maxt <= alpha) or "bh" (false discovery rate, q <= alpha), on S
        (metric "S", the faithful map) or on the balanced metric ("auroc", against its own null maps)."""
        if metric == "auroc":
            p_perm, p_maxt = self.p_values("auroc")
            q = bh_qvalues(p_perm)
        elif metric == "S":
            p_maxt, q = self.p_maxt, self.q_bh
        else:
            raise InputError(f"metric must be 'S' or 'auroc', got {metric!r}")
        if rule == "maxt":
            return p_maxt <= self.alpha
        if rule == "bh":
            return q <= self.alpha
        raise InputError(f"rule must be 'maxt' or 'bh', got {rule!r}")

    def p_values(self, metric: str = "auroc") -> tuple[np.ndarray, np.ndarray]:
        """(p_perm, p_maxt) [L, H] of `metric` against its label-permutation null maps (see `_perm_p`)."""
        if metric == "S":
            return self.p_perm, self.p_maxt
        if metric != "auroc":
            raise InputError(f"metric must be 'S' or 'auroc', got {metric!r}")
        if not len(self.null_auroc):
            raise InputError("this map has no AUROC null maps (saved before issue 46); rerun truth-scores")
        return _perm_p(self.scores.auroc, self.null_auroc)

    def has_balanced(self) -> bool:
        """Whether the balanced metric, its null and the fact-level intervals were computed (maps since issue 46)."""
        return bool(len(self.null_auroc)) and not self.intervals.empty

    def effect_counts(self) -> dict:
        """Significant heads (maxT) on S and on AUROC, with how many of each clear the effect margins of
        `map_stats` (S ≥ majority + S_MARGIN; AUROC and its fact-bootstrap lower bound ≥ 0.5 + AUROC_MARGIN)."""
        from interplab.probes.truth.map_stats import effect_counts

        kw = dict(majority=self.scores.majority_rate, S=self.scores.scores, auroc=self.scores.auroc)
        return {"S": effect_counts(self.significant("maxt", "S"), self.intervals, **kw),
                "auroc": effect_counts(self.significant("maxt", "auroc"), self.intervals, **kw)}

    def split_half(self) -> dict:
        """Split-half reliability: Pearson r of the two half-facts maps and its Spearman-Brown full-length value
        2r / (1 + r), for S and AUROC (NaN without half maps)."""
        out = {}
        for name, maps in (("S", self.half_maps), ("auroc", self.half_auroc)):
            r = (float(np.corrcoef(maps[0].ravel(), maps[1].ravel())[0, 1])
                 if len(maps) == 2 and np.ptp(maps[0]) and np.ptp(maps[1]) else float("nan"))
            out[name] = {"r_half": r, "r_full": 2 * r / (1 + r) if np.isfinite(r) and r > -1 else float("nan")}
        return out

    def null_max_threshold(self) -> float:
        """The (1 - alpha) quantile of the null maps' maxima: the S a head must beat (maxT)."""
        return float(np.quantile(self.null_maps.reshape(self.n_null, -1).max(1), 1 - self.alpha))

    def per_layer(self) -> pd.DataFrame:
        """Per layer: significant heads (maxT, BH), the layer's best S and its head."""
        s = self.scores.scores
        return pd.DataFrame({"layer": np.arange(s.shape[0]), "n_sig_maxt": self.significant("maxt").sum(1),
                             "n_sig_bh": self.significant("bh").sum(1), "max_S": s.max(1),
                             "best_head": s.argmax(1)})

    def top_head(self) -> dict:
        """The best head by S with its interval: resampling facts (`intervals`, the sampling unit) when computed,
        else (maps saved before issue 46) the Wilson interval over the N pooled held-out texts."""
        s = self.scores.scores
        layer, head = np.unravel_index(int(np.argmax(s)), s.shape)
        out = {"layer": int(layer), "head": int(head), "S": float(s[layer, head]),
               "p_maxt": float(self.p_maxt[layer, head])}
        if not self.intervals.empty:
            r = self.intervals.set_index(["layer", "head"]).loc[(int(layer), int(head))]
            return {**out, "lo": float(r["S_lo"]), "hi": float(r["S_hi"]), "n": int(r["n_facts"]), "unit": "fact",
                    "auroc": float(r["auroc"]), "auroc_lo": float(r["auroc_lo"]), "auroc_hi": float(r["auroc_hi"])}
        n = int(self.scores.n_val.sum())
        lo, hi = wilson_interval(float(s[layer, head]), n)
        return {**out, "lo": lo, "hi": hi, "n": n, "unit": "text"}

    def top_auroc_head(self) -> dict:
        """The best head by AUROC with its fact-bootstrap interval (chosen and scored on the same facts: see
        `best_held_out` for the unbiased value)."""
        a = self.scores.auroc
        layer, head = np.unravel_index(int(np.nanargmax(a)), a.shape)
        out = {"layer": int(layer), "head": int(head), "auroc": float(a[layer, head]),
               "S": float(self.scores.scores[layer, head])}
        if not self.intervals.empty:
            r = self.intervals.set_index(["layer", "head"]).loc[(int(layer), int(head))]
            out.update(lo=float(r["auroc_lo"]), hi=float(r["auroc_hi"]), n=int(r["n_facts"]))
        return out

    def stability(self, metric: str = "S") -> dict:
        """How much the map depends on the fold split: Pearson r of the other seeds' maps with this one, and the
        top-10 overlap (metric "S" or "auroc")."""
        s, maps = ((self.scores.scores, self.seed_maps) if metric == "S" else (self.scores.auroc, self.seed_auroc))
        from interplab.probes.stats import top_k_overlap

        s = s.ravel()
        rs = [float(np.corrcoef(s, m.ravel())[0, 1]) if np.ptp(s) and np.ptp(m) else float("nan")
              for m in maps]
        jac = [top_k_overlap(s, m, min(10, s.size)) for m in maps]
        return {"n_seeds": len(rs), "r_min": min(rs, default=float("nan")), "top10_overlap_min":
                min(jac, default=float("nan"))}

    def summary(self) -> dict:
        sig = self.significant("maxt")
        layers = np.flatnonzero(sig.any(1))
        null_max = self.null_maps.reshape(self.n_null, -1).max(1)
        return {"model": self.model, "n_texts": int(self.scores.n_samples),
                "n_facts": int(self.rows["index"].nunique()), "candidates": sorted(set(self.rows.get(
                    "candidate_kind", pd.Series(dtype=str)))),
                "n_heads": int(sig.size), "solver": self.scores.config.solver if self.scores.config else "",
                "n_null": self.n_null, "alpha": self.alpha, "mean_S": float(self.scores.scores.mean()),
                "null_mean_S": float(self.null_maps.mean()), "null_max_median": float(np.median(null_max)),
                "null_max_threshold": self.null_max_threshold(), "n_sig_maxt": int(sig.sum()),
                "n_sig_bh": int(self.significant("bh").sum()),
                "sig_layers": [int(v) for v in layers], "top_head": self.top_head(), "stability": self.stability(),
                "rho_S_evidence": self.rho_evidence(), **self.balanced_summary(), **self.timings}

    def balanced_summary(self) -> dict:
        """The balanced metric's part of the summary (empty for maps saved before issue 46)."""
        if not len(self.null_auroc):
            return {}
        a = self.scores.auroc
        sig = self.significant("maxt", "auroc")
        null_max = self.null_auroc.reshape(len(self.null_auroc), -1).max(1)
        out = {"majority_rate": self.scores.majority_rate, "mean_auroc": float(np.nanmean(a)),
               "mean_balanced_accuracy": float(np.nanmean(self.scores.balanced_accuracy)),
               "null_mean_auroc": float(np.nanmean(self.null_auroc)),
               "null_max_threshold_auroc": float(np.quantile(null_max, 1 - self.alpha)),
               "n_sig_maxt_auroc": int(sig.sum()), "n_sig_bh_auroc": int(self.significant("bh", "auroc").sum()),
               "sig_layers_auroc": [int(v) for v in np.flatnonzero(sig.any(1))],
               "top_auroc_head": self.top_auroc_head(), "stability_auroc": self.stability("auroc"),
               "split_half": self.split_half(), "rho_auroc_evidence": self.rho_evidence("auroc")}
        if not self.intervals.empty:
            out["effects"] = self.effect_counts()
        if self.best_held_out:
            out["best_held_out"] = {k: v for k, v in self.best_held_out.items() if not k.endswith("_facts")}
        return out

    def rho_evidence(self, metric: str = "S") -> float:
        """Spearman rho between S (or "auroc") and evidence attention over heads (NaN when either is constant)."""
        from interplab.probes.stats import spearman

        s = self.scores.scores if metric == "S" else self.scores.auroc
        if np.ptp(self.evidence_mass) == 0 or not np.isfinite(s).all() or np.ptp(s) == 0:
            return float("nan")
        return float(spearman(s.ravel(), self.evidence_mass.ravel()))

    def to_frame(self) -> pd.DataFrame:
        """One row per head: S, fold spread, null p-values, significance and evidence mass."""
        df = self.scores.to_frame()
        L, H = self.scores.scores.shape
        extra = pd.DataFrame({"layer": np.repeat(np.arange(L), H), "head": np.tile(np.arange(H), L),
                              "p_perm": self.p_perm.ravel(), "p_maxt": self.p_maxt.ravel(), "q_bh": self.q_bh.ravel(),
                              "sig_maxt": self.significant("maxt").ravel(), "sig_bh": self.significant("bh").ravel(),
                              "evidence_mass": self.evidence_mass.ravel()})
        if len(self.null_auroc):
            p_perm, p_maxt = self.p_values("auroc")
            extra["p_perm_auroc"], extra["p_maxt_auroc"] = p_perm.ravel(), p_maxt.ravel()
            extra["sig_maxt_auroc"] = self.significant("maxt", "auroc").ravel()
        df = df.merge(extra, on=["layer", "head"], how="left")
        if not self.intervals.empty:
            cols = [c for c in self.intervals.columns if c.endswith(("_lo", "_hi"))] + ["n_facts"]
            df = df.merge(self.intervals[["layer", "head", *cols]], on=["layer", "head"], how="left")
        return df


def _perm_p(obs: np.ndarray, null: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(per-head permutation p, family-wise maxT p) of an observed map against null maps [n, L, H]. Values are
    ratios of small integers: a tie with the null counts against the head on every CPU (tolerance 1e-9)."""
    n = len(null)
    p_perm = (1 + (null >= obs[None] - 1e-9).sum(0)) / (n + 1)
    null_max = np.nanmax(null.reshape(n, -1), axis=1)
    p_maxt = (1 + (null_max[:, None, None] >= obs[None] - 1e-9).sum(0)) / (n + 1)
    return p_perm, p_maxt


def facts_map_from_activations(X, y, groups, *, config: TruthScoresConfig | None = None, n_null: int = 200,
                               null_seed: int = 0, fold_seeds: Sequence[int] = (1, 2), alpha: float = 0.05,
                               evidence_mass=None, rows: pd.DataFrame | None = None, model: str = "",
                               provenance: dict | None = None, split_half: bool = True, n_boot: int = 1000,
                               half_seed: int = 0) -> FactsTruthMap:
    """The map, its null and its fold-seed maps from collected activations X [N, L, H, D], labels y [N] and the
    pair of each row `groups` [N] (see `facts_truth_map`). evidence_mass: [L, H] (default zeros).
    split_half: also fit the maps of two disjoint halves of the facts (`half_seed`; reliability). n_boot: fact
    resamples of the per-head intervals and of the held-out best head (0: none)."""
    from interplab.probes.truth.probe_core import fit_head_probes
    from interplab.probes.truth.scores import truth_scores_from_activations

    cfg = (config or TruthScoresConfig()).validate()
    if n_null < 1:
        raise InputError(f"n_null must be >= 1, got {n_null}")
    if not 0 < alpha < 1:
        raise InputError(f"alpha must lie in (0, 1), got {alpha}")
    y, groups = np.asarray(y, dtype=np.int64), np.asarray(groups)
    if groups.shape != y.shape:
        raise ShapeError(f"groups must be [N={len(y)}] like the labels, got {groups.shape}")
    mixed = pd.DataFrame({"g": groups, "y": y}).groupby("g")["y"].nunique()
    if not (mixed > 1).any():
        raise InputError("no group holds both labels: permuting labels within groups (the null) would change "
                         "nothing; group each positive text with the negatives it competes with (a fact's answers)")
    folds = group_folds(groups, cfg.folds, cfg.seed)
    fit_kw = dict(epochs=cfg.epochs, lr=cfg.lr, weight_decay=cfg.weight_decay, batch_size=cfg.batch_size,
                  dtype=getattr(torch, cfg.dtype), solver=cfg.solver, C=cfg.C, tol=cfg.tol, max_iter=cfg.max_iter)
    t0 = time.perf_counter()
    ts = truth_scores_from_activations(X, y, cfg, model=model, splits=folds, provenance={
        "fold_groups": "pair (fact index)", **(provenance or {})})
    t_fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    null, null_auc = [], []
    for yb in group_permutations(y, groups, n_null, seed=null_seed):   # one fit at a time: each holds its margins
        fit = fit_head_probes(X, yb, folds=folds, **fit_kw)
        null.append(fit.accuracy.mean(0))
        null_auc.append(_fold_mean(fit.auroc))
    null, null_auc = np.stack(null), np.stack(null_auc)
    t_null = time.perf_counter() - t0
    empty = np.zeros((0, *ts.scores.shape))
    seed_fits = [fit_head_probes(X, y, folds=group_folds(groups, cfg.folds, sd), **fit_kw) for sd in fold_seeds]
    seed_maps = np.stack([f.accuracy.mean(0) for f in seed_fits]) if seed_fits else empty
    seed_auc = np.stack([_fold_mean(f.auroc) for f in seed_fits]) if seed_fits else empty
    half_maps, half_auc = empty, empty
    if split_half:
        half_maps, half_auc = _half_maps(X, y, groups, cfg, fit_kw, half_seed)
    s = ts.scores
    p_perm, p_maxt = _perm_p(s, null)
    em = np.zeros(s.shape) if evidence_mass is None else np.asarray(evidence_mass, dtype=float)
    meta = rows if rows is not None else pd.DataFrame({"index": groups, "label": y})
    t0 = time.perf_counter()
    intervals, best = pd.DataFrame(), {}
    if n_boot:
        from interplab.probes.truth.map_stats import head_intervals, held_out_best_head

        intervals = head_intervals(ts, y, groups, B=n_boot)
        best = held_out_best_head(ts, y, groups, metric="auroc", B=n_boot, seed=half_seed)
    return FactsTruthMap(model=model, scores=ts, null_maps=null, p_perm=p_perm, p_maxt=p_maxt, q_bh=bh_qvalues(p_perm),
                         evidence_mass=em, seed_maps=seed_maps, rows=meta, alpha=alpha,
                         timings={"fit_s": t_fit, "null_s": t_null, "intervals_s": time.perf_counter() - t0},
                         null_auroc=null_auc, seed_auroc=seed_auc, half_maps=half_maps, half_auroc=half_auc,
                         intervals=intervals, best_held_out=best)


def _fold_mean(a: np.ndarray) -> np.ndarray:
    from interplab.probes.truth.scores import _fold_mean as fm

    return fm(a)


def _half_maps(X, y, groups, cfg, fit_kw, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """[2, L, H] maps of S and of AUROC, each fitted on one half of the facts (`map_stats.split_groups`) with the
    recipe's grouped folds inside that half."""
    from interplab.probes.truth.map_stats import split_groups
    from interplab.probes.truth.probe_core import fit_head_probes

    s_maps, a_maps = [], []
    for half in split_groups(groups, seed=seed):
        idx = np.flatnonzero(np.isin(groups, half))
        Xh = X[torch.as_tensor(idx)] if isinstance(X, torch.Tensor) else X[idx]
        fit = fit_head_probes(Xh, y[idx], folds=group_folds(groups[idx], cfg.folds, cfg.seed), **fit_kw)
        s_maps.append(fit.accuracy.mean(0))
        a_maps.append(_fold_mean(fit.auroc))
    return np.stack(s_maps), np.stack(a_maps)


def facts_truth_map(model, rows: Sequence[Mapping], *, config: TruthScoresConfig | None = None, n_null: int = 200,
                    null_seed: int = 0, fold_seeds: Sequence[int] = (1, 2), alpha: float = 0.05,
                    capture_batch_size: int = 32, progress=None, split_half: bool = True,
                    n_boot: int = 1000) -> FactsTruthMap:
    """The map of `model` on `fact_probe_rows` with `n_null` label-permutation null maps (see the module docstring).

    config: the probe recipe (`TruthScoresConfig`; its folds count and seed make the grouped folds).
    fold_seeds: extra fold seeds whose maps measure the split's influence (no null for them).
    split_half, n_boot: see `facts_map_from_activations`."""
    cfg = (config or TruthScoresConfig()).validate()
    missing = [k for k in ROW_KEYS if rows and k not in rows[0]]
    if not rows or missing:
        raise InputError(f"rows must be fact_probe_rows(...) output with keys {ROW_KEYS}; missing {missing}")
    t0 = time.perf_counter()
    X = capture_head_outputs(model, [r["text"] for r in rows], batch_size=capture_batch_size,
                             dtype=getattr(torch, cfg.dtype), progress=progress)
    t_cap = time.perf_counter() - t0
    t0 = time.perf_counter()
    em = evidence_attention(model, [{"text": r["text"], "evidence": r["evidence"]} for r in rows],
                            batch_size=capture_batch_size)
    t_em = time.perf_counter() - t0
    meta = pd.DataFrame([{k: r[k] for k in ("index", "relation", "candidate_kind", "label")} for r in rows])
    fm = facts_map_from_activations(
        X, meta["label"].to_numpy(), meta["index"].to_numpy(), config=cfg, n_null=n_null, null_seed=null_seed,
        fold_seeds=fold_seeds, alpha=alpha, evidence_mass=em, rows=meta, model=str(getattr(model, "name", "") or ""),
        split_half=split_half, n_boot=n_boot,
        provenance={"data": "world facts, counterfactual context (interplab.data.world_facts)",
                    "n_layers": model.n_layers, "n_heads": model.n_heads, "d_head": model.d_head})
    fm.scores.check_shape(model.n_layers, model.n_heads)
    fm.timings.update(capture_s=t_cap, evidence_s=t_em)
    return fm
