"""The seeded depth sweep (spec ../shared/methods/pcfg_parse.md §5.1–5.3, §7; issue 17 part 2): PCFG organisms of
several depths trained at one fixed step budget with several training seeds each, then per organism the distribution
match to the exact grammar (`pcfg_kl`) and the layer-wise probe statistic l*(ℓ) with its slope against log2 ℓ
(`probe_study`, the same path as `interplab run pcfg-probes`).

Intervals (`interplab.probes.stats`): KL per depth is a Student-t interval over training seeds (`intervals`, n − 1
dof); the l*(ℓ) slope per depth is a t interval over the per-seed slopes (each seed's slope is fitted on its span
buckets), and, as a secondary view, over the per-(seed, probe split) slopes (splits share a model and a sample, so
that view adds probe-fitting noise only). Consecutive depths are compared by the seed-paired KL difference (the same
seed gives both depths the same stream of training batches).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from interplab.core.errors import ConfigError, ShapeError
from interplab.core.result import Result
from interplab.probes.pcfg.kl import kl_summary, pcfg_kl
from interplab.probes.pcfg.studies import probe_study
from interplab.probes.pcfg.targets import PROBE_TARGETS
from interplab.probes.stats import intervals

__all__ = ["DepthSeedSweepConfig", "DepthSeedSweep", "depth_seed_sweep", "measure_organism", "summarise_sweep"]

KL_FIELDS = ("kl", "kl_se", "tv", "excess_nll", "entropy_rate", "kl_unigram", "kl_bigram")


@dataclass
class DepthSeedSweepConfig:
    """depths: layer counts to train; seeds: training seeds (init and batch stream) per depth; steps: optimiser steps
    for every organism (a fixed step budget, not a wall-clock one); batch_size: fresh grammar samples per step.
    n_sequences: held-out samples for the KL; kl_seed: their seed (the same samples for every organism).
    probe_targets: `PROBE_TARGETS` span targets whose l*(ℓ) slope is reported; probe_sequences: held-out samples for
    the probes; n_splits: probe split seeds (the secondary view); probe_seed: their base seed; cap_per_bucket: max
    examples per (target, span bucket). level: interval level. threads: torch CPU threads. keep_weights: keep each
    organism's checkpoint under the work folder (else it is deleted once measured)."""

    depths: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 6, 8])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    steps: int = 1500
    batch_size: int = 32
    n_sequences: int = 512
    kl_seed: int = 0
    probe_targets: list[str] = field(default_factory=lambda: ["span_posterior", "inside"])
    probe_sequences: int = 400
    n_splits: int = 3
    probe_seed: int = 0
    cap_per_bucket: int = 3000
    level: float = 0.95
    threads: int = 1
    keep_weights: bool = True

    def validate(self) -> "DepthSeedSweepConfig":
        if not self.depths or any(int(d) < 1 for d in self.depths) or len(set(self.depths)) != len(self.depths):
            raise ConfigError(f"depths must be distinct layer counts >= 1, got {self.depths}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds must be a non-empty list of distinct training seeds, got {self.seeds}")
        if self.steps < 1 or self.batch_size < 1:
            raise ConfigError(f"need steps >= 1 and batch_size >= 1, got {self.steps}, {self.batch_size}")
        if self.n_sequences < 2 or self.probe_sequences < 20:
            raise ConfigError("need n_sequences >= 2 (KL) and probe_sequences >= 20 (70/15/15 probe splits)")
        bad = [t for t in self.probe_targets if PROBE_TARGETS.get(t, ("?",))[0] != "span"]
        if not self.probe_targets or bad:
            span = sorted(t for t, v in PROBE_TARGETS.items() if v[0] == "span")
            raise ConfigError(f"probe_targets must be span targets (l*(ℓ) is per span length), got {bad or []}; "
                              f"choose from {span}")
        if self.n_splits < 1 or self.cap_per_bucket < 30:
            raise ConfigError("need n_splits >= 1 and cap_per_bucket >= 30")
        if not 0 < self.level < 1 or self.threads < 1:
            raise ConfigError(f"need 0 < level < 1 and threads >= 1, got {self.level}, {self.threads}")
        return self


ORGANISM_COLS = ("n_layers", "seed", "steps_done", "train_s", "n_params", *KL_FIELDS, "kl_ratio_bigram")
SLOPE_COLS = ("n_layers", "seed", "target", "view", "slope", "lo", "hi", "dof")
BY_DEPTH_COLS = ("n_layers", "mean", "lo", "hi", "n")


@dataclass
class DepthSeedSweep(Result):
    """The seeded depth sweep (module docstring).

    ``organisms``: one row per (n_layers, seed): steps_done, train_s, n_params and the `kl_summary` fields plus
    kl_ratio_bigram. ``kl_by_depth``: per n_layers the t interval of the mean KL over seeds (mean, lo, hi, n, sd) and
    the mean kl_ratio_bigram. ``kl_steps``: per pair of consecutive depths the seed-paired KL difference (deeper −
    shallower; mean, lo, hi, n). ``slopes``: per (n_layers, seed, target) the l*(ℓ) slope fitted on the span buckets
    (view "buckets", with its own t interval on n − 2 dof) and per probe split (view "split<s>"). ``slope_by_depth``:
    per (n_layers, target, view) the t interval of the mean slope, view "seeds" (one point per training seed) or
    "splits" (one per seed × split). ``l_star``: `local_to_global` rows with n_layers and seed. ``probes``: the
    `parse_probes` rows with n_layers and seed. ``steps``: the step budget; ``log2_n``: log2 of the string length."""

    grammar: str
    steps: int
    level: float
    log2_n: float | None
    organisms: pd.DataFrame
    kl_by_depth: pd.DataFrame
    kl_steps: pd.DataFrame
    slopes: pd.DataFrame
    slope_by_depth: pd.DataFrame
    l_star: pd.DataFrame
    probes: pd.DataFrame

    def __post_init__(self):
        for name, cols in (("organisms", ORGANISM_COLS), ("slopes", SLOPE_COLS), ("kl_by_depth", BY_DEPTH_COLS)):
            missing = [c for c in cols if c not in getattr(self, name).columns]
            if missing:
                raise ShapeError(f"DepthSeedSweep.{name} lacks columns {missing}")
        if self.organisms.duplicated(["n_layers", "seed"]).any():
            raise ShapeError("DepthSeedSweep.organisms has more than one row per (n_layers, seed)")
        if len(self.kl_by_depth) != self.organisms["n_layers"].nunique():
            raise ShapeError("DepthSeedSweep.kl_by_depth needs one row per depth of `organisms`")

    def to_frame(self) -> pd.DataFrame:
        return self.organisms

    def headline(self) -> dict:
        """{kl: {n_layers: [mean, lo, hi]}, slope: {target: {n_layers: [mean, lo, hi]}} (view "seeds"), steps}."""
        kl = {int(r.n_layers): [float(r.mean), float(r.lo), float(r.hi)] for r in self.kl_by_depth.itertuples()}
        sd = self.slope_by_depth[self.slope_by_depth["view"] == "seeds"]
        slope = {t: {int(r.n_layers): [float(r.mean), float(r.lo), float(r.hi)] for r in d.itertuples()}
                 for t, d in sd.groupby("target", sort=False)}
        return {"grammar": self.grammar, "steps": self.steps, "level": self.level, "log2_n": self.log2_n,
                "kl": kl, "slope": slope}


def measure_organism(model, g, cfg: DepthSeedSweepConfig) -> tuple[dict, object]:
    """(the `kl_summary` of `pcfg_kl` on cfg.n_sequences held-out samples, the `probe_study` of cfg.probe_targets
    with linear probes over cfg.n_splits splits) for one trained organism."""
    s = kl_summary(pcfg_kl(model, g, cfg.n_sequences, cfg.kl_seed))
    kl = {k: float(s[k]) for k in KL_FIELDS}
    kl["kl_ratio_bigram"] = kl["kl"] / max(kl["kl_bigram"], 1e-12)
    study = probe_study(model, g, cfg.probe_targets, "linear", cfg.probe_sequences, cfg.n_splits, cfg.probe_seed,
                        cfg.cap_per_bucket)
    return kl, study


def _slope_rows(study, n_layers: int, seed: int) -> list[dict]:
    rows = []
    for t, s in study.slopes.items():
        base = {"n_layers": n_layers, "seed": seed, "target": t}
        rows.append({**base, "view": "buckets", "slope": s["slope"], "lo": s["lo"], "hi": s["hi"], "dof": s["dof"]})
        rows += [{**base, "view": f"split{i}", "slope": v, "lo": np.nan, "hi": np.nan, "dof": s["dof"]}
                 for i, v in enumerate(s["by_split"]["slopes"])]
    return rows


def _by_depth(df: pd.DataFrame, value: str, keys: Sequence[str], level: float) -> pd.DataFrame:
    rows = []
    for k, d in df.groupby(list(keys), sort=True):
        iv = intervals(d[value].to_numpy(float), method="t", level=level)
        k = k if isinstance(k, tuple) else (k,)
        rows.append({**dict(zip(keys, k)), **{c: iv[c] for c in ("mean", "lo", "hi", "n")},
                     "sd": float(d[value].std(ddof=1)) if len(d) > 1 else np.nan})
    return pd.DataFrame(rows)


def summarise_sweep(organisms: pd.DataFrame, slopes: pd.DataFrame, level: float = 0.95) -> dict:
    """kl_by_depth, kl_steps, slope_by_depth from the per-organism rows (see `DepthSeedSweep`)."""
    kl = _by_depth(organisms, "kl", ["n_layers"], level)
    kl["kl_ratio_bigram"] = organisms.groupby("n_layers")["kl_ratio_bigram"].mean().to_numpy()
    depths = sorted(organisms["n_layers"].unique())
    steps = []
    wide = organisms.pivot(index="seed", columns="n_layers", values="kl")
    for a, b in zip(depths[:-1], depths[1:]):
        diff = (wide[b] - wide[a]).dropna().to_numpy(float)
        steps.append({"from_layers": int(a), "to_layers": int(b),
                      **{c: v for c, v in intervals(diff, method="t", level=level).items() if c in BY_DEPTH_COLS}})
    seeds = slopes[slopes["view"] == "buckets"]
    by_seed = _by_depth(seeds, "slope", ["n_layers", "target"], level).assign(view="seeds")
    splits = slopes[slopes["view"].str.startswith("split")]
    by_split = _by_depth(splits, "slope", ["n_layers", "target"], level).assign(view="splits") if len(splits) else None
    sbd = pd.concat([by_seed, by_split], ignore_index=True) if by_split is not None else by_seed
    return {"kl_by_depth": kl, "kl_steps": pd.DataFrame(steps, columns=["from_layers", "to_layers", "mean", "lo",
                                                                          "hi", "n"]),
            "slope_by_depth": sbd}


def depth_seed_sweep(cfg: DepthSeedSweepConfig, workdir, progress: Callable[[str], None] | None = None
                     ) -> DepthSeedSweep:
    """Train every (depth, seed) organism for cfg.steps steps into ``workdir``/organisms/L<d>-s<seed> (the
    recipe machinery of `interplab.zoo.recipes.pcfg`: `train_depth_organism`), measure it (`measure_organism`) and
    summarise. Organisms are trained and measured one at a time, so memory stays that of one tiny model."""
    import shutil

    import torch

    from interplab.models.loading import load_model
    from interplab.zoo.recipes.pcfg import UB_SPEC, grammar_of, make_grammar, train_depth_organism

    cfg.validate()
    torch.set_num_threads(int(cfg.threads))
    root = Path(workdir) / "organisms"
    root.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _m: None)
    orgs, slope_rows, lstars, probes = [], [], [], []
    g = make_grammar(UB_SPEC)
    for L in cfg.depths:
        for seed in cfg.seeds:
            out = root / f"L{L}-s{seed}"
            rep = train_depth_organism(int(L), int(seed), cfg.steps, out, num_threads=int(cfg.threads),
                                       batch_size=cfg.batch_size)
            m = load_model(str(out))
            g = grammar_of(m)
            kl, study = measure_organism(m, g, cfg)
            tr = rep["train"]
            orgs.append({"n_layers": int(L), "seed": int(seed), "steps_done": int(tr["steps_done"]),
                         "train_s": float(tr["seconds"]), "n_params": int(rep["n_params"]), **kl})
            slope_rows += _slope_rows(study, int(L), int(seed))
            tag = {"n_layers": int(L), "seed": int(seed)}
            lstars.append(study.l_star.assign(**tag))
            probes.append(study.probes.assign(**tag))
            say(f"L{L} seed {seed}: {tr['steps_done']} steps in {tr['seconds']:.0f} s, KL {kl['kl']:.4f}, "
                + ", ".join(f"{t} slope {s['slope']:.2f}" for t, s in study.slopes.items()))
            del m
            if not cfg.keep_weights:
                shutil.rmtree(out, ignore_errors=True)
    organisms = pd.DataFrame(orgs, columns=list(ORGANISM_COLS))
    slopes = pd.DataFrame(slope_rows, columns=list(SLOPE_COLS))
    summ = summarise_sweep(organisms, slopes, cfg.level)
    lg = float(g.levels.max()) if g.levels.max() > 0 and not g.auxiliary.any() else None
    return DepthSeedSweep(grammar=g.name, steps=int(cfg.steps), level=float(cfg.level), log2_n=lg,
                          organisms=organisms, slopes=slopes, l_star=pd.concat(lstars, ignore_index=True),
                          probes=pd.concat(probes, ignore_index=True), **summ)
