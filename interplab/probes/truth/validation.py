"""Truth Scores validated end to end on an organism with planted evidence heads (issue 16, DESIGN.md "Ground truth").

The organism (`interplab.zoo.validation.truth_scores`) is built by construction: its designated heads, and only
those, carry the verdict "the candidate is the context's value" in z at the candidate token. The unchanged method
API (`truth_scores`, `lineage_correlation`, `truth_gates` + `HeadGate`, `context_following`) runs on it, and
recovery is scored against the planted heads:

- recovery: AUROC of S for planted vs all other heads (Mann-Whitney from average ranks), the worst planted rank,
  and whether every planted head is in the top |planted| + 2;
- negative control 1 (shuffled labels): the same organism and prompts with the labels permuted must not recover;
- lineage: a descendant (every 2-D weight perturbed by `perturb_scale` x its RMS, a seeded stand-in for a
  fine-tune) keeps the map (Pearson r, within-layer permutation p); an organism with other designated heads
  (negative control 2) does not;
- gating (spec §6.8): the descendant is gated with the base's map; alpha is chosen on a tuning split of conflict
  prompts, context-following is measured on a disjoint evaluation split, and the null is 200 within-layer shuffles
  of the base map, each taking the maximum over every alpha searched (so the search is paid for in the null).
Each seed draws new probe data, a new descendant, new conflict prompts and new shuffles.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from interplab.core.errors import ConfigError
from interplab.core.record import Record
from interplab.core.result import Result
from interplab.probes import stats
from interplab.probes.truth.scores import TruthScores

# the bars: (metric, comparison, threshold)
TARGETS = (
    ("auroc", ">=", 0.95), ("all_in_top", ">=", 1.0),
    ("shuffled_auroc", "<", 0.95), ("shuffled_all_in_top", "<", 1.0),
    ("r_descendant", ">=", 0.8), ("p_descendant", "<", 0.01), ("r_other", "<=", 0.3),
    ("gating_frac_below", ">=", 0.95),
)


class PlantedRecovery(Record):
    """`planted_recovery`: auroc (planted vs other heads), worst_planted_rank (1 = best), all_in_top (1.0 when every
    planted head is in the top |planted| + 2, else 0.0)."""

    KEYS = ("auroc", "worst_planted_rank", "all_in_top")


def planted_recovery(scores, planted_mask) -> PlantedRecovery:
    """How well a score map singles out the planted heads: AUROC planted vs rest (ties count one half), the
    worst (largest) rank of a planted head (1 = best), and whether all planted heads are in the top |planted| + 2."""
    s = np.asarray(getattr(scores, "scores", scores), dtype=float).ravel()
    m = np.asarray(planted_mask, dtype=bool).ravel()
    if s.shape != m.shape or not m.any() or m.all():
        raise ConfigError(f"need a mask of {s.size} heads with some planted and some not, got {m.sum()} planted")
    r = stats.rankdata(s)                                   # ascending average ranks
    n_p, n_r = int(m.sum()), int((~m).sum())
    auroc = (r[m].sum() - n_p * (n_p + 1) / 2) / (n_p * n_r)
    desc_rank = stats.rankdata(-s)
    worst = float(desc_rank[m].max())
    return PlantedRecovery(auroc=float(auroc), worst_planted_rank=worst, all_in_top=float(worst <= n_p + 2))


def gating_null(model, items, scores, *, alphas: Sequence[float], n_maps: int = 200, seed: int = 0,
                mode: str = "normalize", site: str = "z") -> np.ndarray:
    """[n_maps] null of context-following: for each within-layer shuffle of the map, the best context-following
    over `alphas` (the maximum over every cell searched)."""
    from interplab.interventions.head_gate import HeadGate, truth_gates
    from interplab.probes.truth.data import context_following
    from interplab.probes.truth.lineage import within_layer_permutations

    s = np.asarray(getattr(scores, "scores", scores), dtype=float)
    perms = within_layer_permutations(*s.shape, n_maps, seed)
    null = np.empty(n_maps)
    for b in range(n_maps):  # each shuffled map is its own set of generations
        sb = np.take_along_axis(s, perms[b], axis=-1)
        null[b] = max(context_following(model, items, [HeadGate(truth_gates(sb, mode, a), site=site)],
                                        max_new_tokens=1)["context_acc"] for a in alphas)
    return null


class GatingCheck(Record):
    """`gating_check`: alpha_star, ctx_baseline (ungated), ctx_gated (at alpha_star), gating_frac_below (share of
    the null below ctx_gated), gating_p, null ([n_maps] array), tune_curve (context-following per alpha)."""

    KEYS = ("alpha_star", "ctx_baseline", "ctx_gated", "gating_frac_below", "gating_p", "null", "tune_curve")


def gating_check(model, scores, tune_items, eval_items, *, alphas: Sequence[float], n_maps: int = 200,
                 seed: int = 0, mode: str = "normalize", site: str = "z") -> GatingCheck:
    """alpha* = argmax context-following on `tune_items` (ties: the smallest alpha); the evaluation split's
    context-following at alpha* against `gating_null` on the same split."""
    from interplab.interventions.head_gate import HeadGate, truth_gates
    from interplab.probes.truth.data import context_following

    def acc(items, a):
        edits = [HeadGate(truth_gates(scores, mode, a), site=site)] if a else None
        return context_following(model, items, edits, max_new_tokens=1)["context_acc"]

    tune = [acc(tune_items, a) for a in alphas]
    a_star = float(alphas[int(np.argmax(tune))])
    obs, base = acc(eval_items, a_star), acc(eval_items, 0.0)
    null = gating_null(model, eval_items, scores, alphas=alphas, n_maps=n_maps, seed=seed, mode=mode, site=site)
    return GatingCheck(alpha_star=a_star, ctx_baseline=base, ctx_gated=obs,
                       gating_frac_below=float(np.mean(null < obs)), gating_p=stats.permutation_p(obs, null),
                       null=null, tune_curve=tune)


@dataclass
class TruthValidation(Result):
    """Recovery of planted evidence heads by Truth Scores, per seed, with its negative controls.

    per_seed: one row per seed: auroc, worst_planted_rank, all_in_top, min_planted_S, max_decoy_S (base organism);
        shuffled_* (labels permuted; shuffled_max_S / shuffled_min_S: the map's range);
        r/p_descendant, r/p_other (lineage vs the descendant and vs the other-heads organism); alpha_star,
        ctx_baseline, ctx_gated, gating_frac_below, gating_p (gating the descendant with the base map).
    planted_heads / other_heads: the designated heads of the organism and of the negative-control organism.
    base, descendant, other, shuffled: the first seed's maps (for figures). gating_null / lineage_null: the first
        seed's nulls. settings: what was run (n_samples, perturb_scale, alphas, n_maps, ...)."""

    per_seed: pd.DataFrame
    planted_heads: list
    other_heads: list
    base: TruthScores
    descendant: TruthScores
    other: TruthScores
    shuffled: TruthScores
    gating_null: np.ndarray
    lineage_null: np.ndarray
    settings: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("descendant", "other", "shuffled"):
            getattr(self, name).check_shape(self.base.n_layers, self.base.n_heads)

    def recovery_table(self) -> pd.DataFrame:
        """One row per target: mean, 95% t interval and range over seeds, the bar, and whether every seed meets it
        (`stats.target_row`, the NaN policy of every recovery table)."""
        return pd.DataFrame([{"metric": metric, **stats.target_row(self.per_seed[metric], op, thr)}
                             for metric, op, thr in TARGETS])

    def passed(self) -> bool:
        return bool(self.recovery_table()["pass"].all())

    def summary(self) -> dict:
        t = self.recovery_table()
        return {"passed": self.passed(), "planted_heads": self.planted_heads, "other_heads": self.other_heads,
                **{f"{r.metric}_mean": r.mean for r in t.itertuples()}, "settings": self.settings}

    def to_frame(self) -> pd.DataFrame:
        return self.per_seed


def _seed_row(base_m, desc_m, other_m, mask, items, shuffled_items, conflict, cfg: dict, seed: int):
    from interplab.probes.truth.lineage import lineage_correlation
    from interplab.probes.truth.scores import truth_scores

    kw = cfg["probe"]
    maps = {k: truth_scores(m, it, **kw) for k, m, it in (("base", base_m, items), ("descendant", desc_m, items),
                                                             ("other", other_m, items),
                                                             ("shuffled", base_m, shuffled_items))}
    rec = planted_recovery(maps["base"], mask)
    sh = planted_recovery(maps["shuffled"], mask)
    ld = lineage_correlation(maps["base"], maps["descendant"], n_permutations=cfg["n_permutations"], seed=seed,
                             return_null=True)
    lo = lineage_correlation(maps["base"], maps["other"], n_permutations=cfg["n_permutations"], seed=seed)
    g = gating_check(desc_m, maps["base"], conflict[0], conflict[1], alphas=cfg["alphas"], n_maps=cfg["n_maps"],
                     seed=seed)
    sb, ss = maps["base"].scores, maps["shuffled"].scores
    spread = {"min_planted_S": float(sb[mask].min()), "max_decoy_S": float(sb[~mask].max()),
              "shuffled_max_S": float(ss.max()), "shuffled_min_S": float(ss.min())}
    row = {"seed": seed, **rec, **spread, **{f"shuffled_{k}": v for k, v in sh.items()},
           "r_descendant": ld["pearson"], "p_descendant": ld["perm_p"], "r_other": lo["pearson"],
           "p_other": lo["perm_p"], **{k: v for k, v in g.items() if k not in ("null", "tune_curve")}}
    return row, maps, g["null"], ld["null"]


def _seed_job(job: dict, models=None):
    """One seed: descendant, probe data, shuffled labels, conflict splits, then `_seed_row`."""
    import interplab
    from interplab.zoo.validation.truth_scores import (PlantedTruthSpec, perturb_checkpoint, planted_conflict_items,
                                                       planted_truth_items)

    if models is None:  # a worker process
        import torch

        torch.set_num_threads(1)
    load = lambda p: interplab.load_model(str(p), backend=job["backend"], device="cpu")  # noqa: E731
    base_m, other_m = models if models is not None else (load(job["base_dir"]), load(job["other_dir"]))
    seed, spec = job["seed"], PlantedTruthSpec()
    M = spec.memory_map()
    desc_m = load(perturb_checkpoint(job["base_dir"], Path(job["workdir"]) / f"descendant-s{seed}",
                                     scale=job["perturb_scale"], seed=seed))
    items = planted_truth_items(job["n_samples"], seed=seed, memory_map=M)
    y = np.random.default_rng(10_000 + seed).permutation([it["label"] for it in items])
    shuffled = [{**it, "label": int(lab)} for it, lab in zip(items, y)]
    conflict = (planted_conflict_items(job["n_tune"], seed=100 + seed, memory_map=M),
                planted_conflict_items(job["n_eval"], seed=200 + seed, memory_map=M))
    return _seed_row(base_m, desc_m, other_m, spec.planted_mask(), items, shuffled, conflict, job["cfg"], seed)


def validate_truth_scores(*, seeds: Sequence[int] = (0, 1, 2), n_samples: int = 292, perturb_scale: float = 0.05,
                          other_heads: Sequence[Sequence[int]] = ((0, 2), (1, 6), (2, 0), (3, 4)),
                          alphas: Sequence[float] = (0.25, 0.5, 1.0), n_maps: int = 200, n_tune: int = 64,
                          n_eval: int = 64, n_permutations: int = 1000, probe: dict | None = None,
                          workdir=None, backend: str = "bridge", workers: int = 1,
                          progress=None) -> TruthValidation:
    """Build the planted organism, its descendants (one per seed) and the other-heads organism under `workdir`
    (a temporary folder by default), run Truth Scores, lineage and gating on them, and score recovery.
    workers > 1 runs the seeds in that many spawned processes with one torch thread each (the same
    computation; float reductions may differ from workers=1 in the last bits)."""
    import interplab
    from interplab.zoo.validation.truth_scores import PlantedTruthSpec, build_planted_truth_organism

    if not seeds:
        raise ConfigError("need at least one seed")
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="interplab-validate-truth-")
        workdir = tmp.name
    wd = Path(workdir)
    spec = PlantedTruthSpec()
    other_spec = PlantedTruthSpec(heads=[tuple(h) for h in other_heads]).validate()
    base_dir = build_planted_truth_organism(wd / "planted", spec)
    other_dir = build_planted_truth_organism(wd / "other-heads", other_spec)
    load = lambda p: interplab.load_model(str(p), backend=backend, device="cpu")  # noqa: E731
    base_m, other_m = (load(base_dir), load(other_dir)) if workers <= 1 or len(seeds) < 2 else (None, None)
    cfg = {"probe": dict(probe or {}), "n_permutations": n_permutations, "alphas": [float(a) for a in alphas],
           "n_maps": n_maps}
    jobs = [dict(seed=int(seed), base_dir=str(base_dir), other_dir=str(other_dir), workdir=str(wd),
                 n_samples=n_samples, perturb_scale=perturb_scale, n_tune=n_tune, n_eval=n_eval, backend=backend,
                 cfg=cfg) for seed in seeds]
    if workers > 1 and len(jobs) > 1:
        # seeds are independent: separate processes (spawned, one torch thread each) share a loaded CPU better
        import concurrent.futures as cf
        import multiprocessing as mp

        with cf.ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=mp.get_context("spawn")) as ex:
            outs = list(ex.map(_seed_job, jobs))
    else:
        outs = []
        for i, job in enumerate(jobs):
            outs.append(_seed_job(job, models=(base_m, other_m)))
            if progress is not None:
                progress(i + 1, len(jobs))
    rows = [o[0] for o in outs]
    first = outs[0][1:]
    maps, gnull, lnull = first
    settings = {"seeds": list(seeds), "n_samples": n_samples, "perturb_scale": perturb_scale, "alphas": cfg["alphas"],
                "n_maps": n_maps, "n_tune": n_tune, "n_eval": n_eval, "n_permutations": n_permutations,
                "workers": workers, "gating": "normalize, z site",
                "organism": "zoo.validation.truth_scores (by construction)"}
    res = TruthValidation(per_seed=pd.DataFrame(rows), planted_heads=[list(h) for h in spec.heads],
                          other_heads=[list(h) for h in other_spec.heads], base=maps["base"],
                          descendant=maps["descendant"], other=maps["other"], shuffled=maps["shuffled"],
                          gating_null=gnull, lineage_null=lnull, settings=settings)
    if tmp is not None:
        tmp.cleanup()
    return res
