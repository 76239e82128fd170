"""DecodeShare stage-aligned steering ranking (spec methods/decodeshare.md, "Steering", Tables 4/5; figure 11),
adapted to the toy multitask organisms.

For every vector v of a pool {family: [n, d]} (unit-norm rows, added as `scale * v` at `resid_post.layer`) three
scores, each a Delta generation exact-match accuracy vs the unsteered baseline, averaged over tasks:

  * TRAD   : steer only in the prefill forward, at the last prompt token (`Steer(phases=("prefill",),
             positions="last_prompt")`), on the ranking sets;
  * DECODE : steer only on decode steps, staged to the first `stage` generated tokens (`Steer(phases=("decode",),
             positions=<position < T + stage>)`), on the ranking sets;
  * REAL   : DECODE-style steering on other, held-out example sets (the toy stand-in for "3 other template
             seeds"), averaged over those sets.

Decode step s feeds generated token g_s (plain loop), so DECODE can change g2 onward, never g1. Every (vector,
task, condition) is one batched greedy generation over all examples of the task. A zero vector is skipped by
`Steer` and scores exactly 0. Metrics per proxy (TRAD, DECODE) and family (plus "all"): Spearman rho(proxy, REAL),
regret@1 = max REAL - REAL(proxy's top pick), top-k overlap |top_k(proxy) & top_k(REAL)| / k.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from interplab.core.errors import ConfigError, InputError, ShapeError
from interplab.core.result import Result
from interplab.probes.decodeshare.model import generate_exact_match
from interplab.probes.stats import spearman

__all__ = ["RankingResult", "steering_ranking", "ranking_metrics", "trad_edit", "decode_edit", "unit_rows"]

PROXIES = ("trad", "decode")


def trad_edit(layer: int, vector, scale: float = 1.0):
    """Steer only the prefill forward at the last prompt token."""
    from interplab.interventions import Steer

    return Steer(f"resid_post.{int(layer)}", vector, positions="last_prompt", scale=scale, phases=("prefill",))


def decode_edit(layer: int, vector, scale: float = 1.0, stage: int | None = None):
    """Steer only generated tokens (decode steps); with `stage`, only the first `stage` of them (positions < T +
    stage, as `SubspaceProjection(stage=...)`)."""
    from interplab.interventions import Steer, first_decode_steps

    if stage is not None and int(stage) < 1:
        raise ConfigError(f"stage must be >= 1; got {stage}")
    pos = "all" if stage is None else first_decode_steps(int(stage))
    return Steer(f"resid_post.{int(layer)}", vector, positions=pos, scale=scale, phases=("decode",))


def unit_rows(x) -> np.ndarray:
    """Rows scaled to unit norm (zero rows stay zero)."""
    x = np.atleast_2d(np.asarray(x, float))
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return np.where(n > 0, x / np.where(n > 0, n, 1.0), 0.0)


def _rho(a, b) -> float:
    """Spearman rho, NaN for fewer than 2 vectors or a constant side."""
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return spearman(a, b)


def ranking_metrics(scores, *, top_k: int = 10, group: str | None = "family"):
    """Metrics of each proxy against REAL from a score table with columns trad, decode, real (and `group`).

    One row per (group value incl. "all", proxy): n, rho (Spearman), regret1 = max real - real[argmax proxy] (first
    index on ties), top_pick (row label of the proxy's argmax), top_k, overlap = |top_k(proxy) & top_k(real)| / k
    with k = min(top_k, n) (stable sort, first index wins ties)."""
    df = scores.reset_index(drop=True)
    groups = [("all", df)]
    if group is not None and group in df:
        groups += [(str(g), d) for g, d in df.groupby(group, sort=False)]
    rows = []
    for gname, d in groups:
        real = d["real"].to_numpy(float)
        n = len(d)
        k = min(int(top_k), n)
        top_real = set(np.argsort(-real, kind="stable")[:k])
        for p in PROXIES:
            x = d[p].to_numpy(float)
            i = int(np.argmax(x))
            top_p = set(np.argsort(-x, kind="stable")[:k])
            label = d["name"].iloc[i] if "name" in d else int(d.index[i])
            rows.append({"group": gname, "proxy": p, "n": n, "rho": _rho(x, real),
                         "regret1": float(real.max() - real[i]), "top_pick": label, "top_pick_real": float(real[i]),
                         "best_real": float(real.max()), "top_k": k, "overlap": len(top_p & top_real) / k if k else
                         float("nan")})
    return pd.DataFrame(rows)


@dataclass
class RankingResult(Result):
    """scores: one row per vector (family, index, name, norm, trad, decode, real, real_<i> per held-out set, and
    per-task deltas trad:<task>, decode:<task>); metrics: `ranking_metrics(scores)`; info: settings and baseline
    accuracies."""
    scores: pd.DataFrame
    metrics: pd.DataFrame
    info: dict = field(default_factory=dict)

    def to_frame(self):
        return self.scores

    def metric(self, proxy: str, name: str = "rho", group: str = "all") -> float:
        m = self.metrics
        r = m[(m["proxy"] == proxy) & (m["group"] == group)]
        if r.empty:
            raise InputError(f"no metrics for proxy={proxy!r}, group={group!r}")
        return float(r[name].iloc[0])


def _accs(model, sets: Mapping[str, Any], edits, max_new_tokens: int) -> dict[str, float]:
    out = {}
    for t, s in sets.items():
        g = generate_exact_match(model, s.prompts, s.answers, max_new_tokens=max_new_tokens, edits=edits,
                                 batch_size=max(len(s.prompts), 1), stop_tokens=[s.stop])
        out[str(t)] = g.accuracy
    return out


def steering_ranking(model, layer: int, pool: Mapping[str, Any], rank_sets: Mapping[str, Any],
                     real_sets: Sequence[Mapping[str, Any]], *, scale: float = 1.0, stage: int = 4,
                     max_new_tokens: int = 12, top_k: int = 10,
                     progress: Callable[[str], None] | None = None) -> RankingResult:
    """TRAD / DECODE / REAL scores of every pool vector and the proxy metrics (module doc).

    pool: {family: [n, d]} unit-norm vectors (they are re-normalised; zero rows stay zero). scale: the added norm
    (edit = scale * v). rank_sets / real_sets: {task: set with .prompts, .answers (ids without stop), .stop}
    (e.g. `multitask_sets`); REAL averages the DECODE-style score over `real_sets`."""
    say = progress or (lambda msg: None)
    real_sets = list(real_sets)
    if not rank_sets or not real_sets or any(not r for r in real_sets):
        raise InputError("steering_ranking needs non-empty rank_sets and at least one non-empty real set")
    d = model.d_model
    vecs = []
    for fam, arr in pool.items():
        a = np.atleast_2d(np.asarray(arr, float))
        if a.ndim != 2 or a.shape[1] != d:
            raise ShapeError(f"pool family {fam!r} must be [n, d_model={d}]; got {a.shape}")
        for i, v in enumerate(unit_rows(a)):
            vecs.append((str(fam), i, v))
    if not vecs:
        raise InputError("the vector pool is empty")
    say("ranking: baselines")
    base_rank = _accs(model, rank_sets, [], max_new_tokens)
    base_real = [_accs(model, rs, [], max_new_tokens) for rs in real_sets]
    rows = []
    for j, (fam, i, v) in enumerate(vecs):
        say(f"ranking: vector {j + 1}/{len(vecs)} ({fam} {i})")
        tr = _accs(model, rank_sets, [trad_edit(layer, v, scale)], max_new_tokens)
        de = _accs(model, rank_sets, [decode_edit(layer, v, scale, stage)], max_new_tokens)
        row = {"family": fam, "index": i, "name": f"{fam}:{i}", "norm": float(np.linalg.norm(v) * scale)}
        dt = {t: tr[t] - base_rank[t] for t in tr}
        dd = {t: de[t] - base_rank[t] for t in de}
        row["trad"] = float(np.mean(list(dt.values())))
        row["decode"] = float(np.mean(list(dd.values())))
        reals = []
        for r, (rs, br) in enumerate(zip(real_sets, base_real)):
            ra = _accs(model, rs, [decode_edit(layer, v, scale, stage)], max_new_tokens)
            reals.append(float(np.mean([ra[t] - br[t] for t in ra])))
            row[f"real_{r}"] = reals[-1]
        row["real"] = float(np.mean(reals))
        row.update({f"trad:{t}": x for t, x in dt.items()})
        row.update({f"decode:{t}": x for t, x in dd.items()})
        rows.append(row)
    scores = pd.DataFrame(rows)
    info = {"layer": int(layer), "scale": float(scale), "stage": int(stage), "max_new_tokens": int(max_new_tokens),
            "top_k": int(top_k), "tasks": [str(t) for t in rank_sets],
            "n_per_task": {str(t): len(s.prompts) for t, s in rank_sets.items()}, "n_real_sets": len(real_sets),
            "baseline_rank": base_rank, "baseline_real": base_real,
            "pool": {str(f): int(np.atleast_2d(np.asarray(a)).shape[0]) for f, a in pool.items()}}
    return RankingResult(scores, ranking_metrics(scores, top_k=top_k), info)
