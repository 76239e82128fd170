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

    def __post_init__(self):
        shape = self.scores.scores.shape
        for name in ("p_perm", "p_maxt", "q_bh", "evidence_mass"):
            arr = np.asarray(getattr(self, name), dtype=float)
            if arr.shape != shape:
                raise ShapeError(f"{name} must be {shape} like the map, got {arr.shape}")
            setattr(self, name, arr)
        for name in ("null_maps", "seed_maps"):
            arr = np.asarray(getattr(self, name), dtype=float)
            if arr.ndim != 3 or arr.shape[1:] != shape:
                raise ShapeError(f"{name} must be [n, {shape[0]}, {shape[1]}], got {arr.shape}")
            setattr(self, name, arr)

    @property
    def n_null(self) -> int:
        return int(self.null_maps.shape[0])

    def significant(self, rule: str = "maxt") -> np.ndarray:
        """[L, H] bool: "maxt" (family-wise, p_maxt <= alpha) or "bh" (false discovery rate, q <= alpha)."""
        if rule == "maxt":
            return self.p_maxt <= self.alpha
        if rule == "bh":
            return self.q_bh <= self.alpha
        raise InputError(f"rule must be 'maxt' or 'bh', got {rule!r}")

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
        """The best head with its held-out accuracy's Wilson interval over the N pooled held-out rows."""
        s = self.scores.scores
        layer, head = np.unravel_index(int(np.argmax(s)), s.shape)
        n = int(self.scores.n_val.sum())
        lo, hi = wilson_interval(float(s[layer, head]), n)
        return {"layer": int(layer), "head": int(head), "S": float(s[layer, head]), "lo": lo, "hi": hi, "n": n,
                "p_maxt": float(self.p_maxt[layer, head])}

    def stability(self) -> dict:
        """How much the map depends on the fold split: Pearson r of the other seeds' maps with this one, and the
        top-10 overlap."""
        s = self.scores.scores.ravel()
        top = set(np.argsort(-s)[:10].tolist())
        rs = [float(np.corrcoef(s, m.ravel())[0, 1]) if np.ptp(s) and np.ptp(m) else float("nan")
              for m in self.seed_maps]
        jac = [len(top & set(np.argsort(-m.ravel())[:10].tolist())) / 10 for m in self.seed_maps]
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
                "rho_S_evidence": self.rho_evidence(), **self.timings}

    def rho_evidence(self) -> float:
        """Spearman rho between S and evidence attention over heads (NaN when the evidence mass is constant)."""
        from interplab.probes.stats import spearman

        if np.ptp(self.evidence_mass) == 0 or np.ptp(self.scores.scores) == 0:
            return float("nan")
        return float(spearman(self.scores.scores.ravel(), self.evidence_mass.ravel()))

    def to_frame(self) -> pd.DataFrame:
        """One row per head: S, fold spread, null p-values, significance and evidence mass."""
        df = self.scores.to_frame()
        L, H = self.scores.scores.shape
        extra = pd.DataFrame({"layer": np.repeat(np.arange(L), H), "head": np.tile(np.arange(H), L),
                              "p_perm": self.p_perm.ravel(), "p_maxt": self.p_maxt.ravel(), "q_bh": self.q_bh.ravel(),
                              "sig_maxt": self.significant("maxt").ravel(), "sig_bh": self.significant("bh").ravel(),
                              "evidence_mass": self.evidence_mass.ravel()})
        return df.merge(extra, on=["layer", "head"], how="left")


def facts_map_from_activations(X, y, groups, *, config: TruthScoresConfig | None = None, n_null: int = 200,
                               null_seed: int = 0, fold_seeds: Sequence[int] = (1, 2), alpha: float = 0.05,
                               evidence_mass=None, rows: pd.DataFrame | None = None, model: str = "",
                               provenance: dict | None = None) -> FactsTruthMap:
    """The map, its null and its fold-seed maps from collected activations X [N, L, H, D], labels y [N] and the
    pair of each row `groups` [N] (see `facts_truth_map`). evidence_mass: [L, H] (default zeros)."""
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
    folds = group_folds(groups, cfg.folds, cfg.seed)
    fit_kw = dict(epochs=cfg.epochs, lr=cfg.lr, weight_decay=cfg.weight_decay, batch_size=cfg.batch_size,
                  dtype=getattr(torch, cfg.dtype), solver=cfg.solver, C=cfg.C, tol=cfg.tol, max_iter=cfg.max_iter)
    t0 = time.perf_counter()
    ts = truth_scores_from_activations(X, y, cfg, model=model, splits=folds, provenance={
        "fold_groups": "pair (fact index)", **(provenance or {})})
    t_fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    null = np.stack([fit_head_probes(X, yb, folds=folds, **fit_kw).accuracy.mean(0)
                     for yb in group_permutations(y, groups, n_null, seed=null_seed)])
    t_null = time.perf_counter() - t0
    seed_maps = (np.stack([fit_head_probes(X, y, folds=group_folds(groups, cfg.folds, sd), **fit_kw).accuracy.mean(0)
                           for sd in fold_seeds]) if fold_seeds else np.zeros((0, *ts.scores.shape)))
    s = ts.scores
    # accuracies are ratios of small integers: a tie with the null counts against the head on every CPU
    p_perm = (1 + (null >= s[None] - 1e-9).sum(0)) / (n_null + 1)
    null_max = null.reshape(n_null, -1).max(1)
    p_maxt = (1 + (null_max[:, None, None] >= s[None] - 1e-9).sum(0)) / (n_null + 1)
    em = np.zeros(s.shape) if evidence_mass is None else np.asarray(evidence_mass, dtype=float)
    meta = rows if rows is not None else pd.DataFrame({"index": groups, "label": y})
    return FactsTruthMap(model=model, scores=ts, null_maps=null, p_perm=p_perm, p_maxt=p_maxt, q_bh=bh_qvalues(p_perm),
                         evidence_mass=em, seed_maps=seed_maps, rows=meta, alpha=alpha,
                         timings={"fit_s": t_fit, "null_s": t_null})


def facts_truth_map(model, rows: Sequence[Mapping], *, config: TruthScoresConfig | None = None, n_null: int = 200,
                    null_seed: int = 0, fold_seeds: Sequence[int] = (1, 2), alpha: float = 0.05,
                    capture_batch_size: int = 32, progress=None) -> FactsTruthMap:
    """The map of `model` on `fact_probe_rows` with `n_null` label-permutation null maps (see the module docstring).

    config: the probe recipe (`TruthScoresConfig`; its folds count and seed make the grouped folds).
    fold_seeds: extra fold seeds whose maps measure the split's influence (no null for them)."""
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
        provenance={"data": "world facts, counterfactual context (interplab.data.world_facts)",
                    "n_layers": model.n_layers, "n_heads": model.n_heads, "d_head": model.d_head})
    fm.scores.check_shape(model.n_layers, model.n_heads)
    fm.timings.update(capture_s=t_cap, evidence_s=t_em)
    return fm
