"""FAST vs block training at matched L0 (issue 17, 1c; method spec ../shared/methods/fast_sae.md §2.1-2.3).

The one-seed comparison (`compare.fast_vs_block`) uses one sparsity coefficient for every arm, so the arms end at
different L0 and their reconstruction is compared at different sparsity. Here every arm (FAST, BT(F), BT(P)) is
trained at every point of a sparsity sweep -- TopK k (L0 = k by construction, so the arms are matched exactly) and
the Standard SAE's L1 coefficient (L0 is an outcome; arms are matched by interpolating each seed's curve at common
L0 values) -- with several SAE seeds per point, and every SAE is evaluated on two distributions:

* ``fast``: held-out dialogues one per forward (`evaluate_sae`, paper Eq. 7; the paper's evaluation);
* ``packed``: the same dialogues packed into blocks as BT(F) training packs them (`evaluate_sae_packed`).

Intervals are Student-t over SAE seeds (`interplab.probes.stats.intervals`, applied by the experiment module
`interplab.experiments.sae_pareto`: `pareto_summary`, `matched_l0`). The seed sets the SAE initialisation,
the sample shuffle and the mixing-buffer order; the training and evaluation data are fixed.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from interplab.core.errors import ConfigError, ShapeError
from interplab.core.result import Result
from interplab.sae.compare import METHOD_LABELS, SAERecipe, arm_provider, train_one
from interplab.sae.data import SAEData

__all__ = ["ParetoConfig", "ParetoResult", "sae_pareto", "SPARSITY_PARAM"]

SPARSITY_PARAM = {"topk": "k", "standard": "l1_coefficient"}


@dataclass
class ParetoConfig(SAERecipe):
    """`SAERecipe` (site, expansion, batch_tokens, lr, context_size; `seed` = the data seed) plus: methods (subset of
    fast, bt_f, bt_p); ks: TopK sweep (empty = no TopK arm); l1_coefficients: Standard-SAE sweep (empty = none);
    seeds: SAE seeds per point; steps: training steps (equal for every SAE); evals: distributions every SAE is
    evaluated on (fast, packed); cache_activations: harvest each arm's training activations once and train every
    SAE of that arm from them (`compare.arm_provider`; epochs after the first re-serve the first epoch's harvest, a
    block arm keeps one packing) instead of running the model for every SAE and epoch (a real model's forward costs
    far more than an SAE step). The inherited l1_coefficient / l0_coefficient are not used: the sweep sets the
    sparsity of every SAE."""

    methods: list[str] = field(default_factory=lambda: ["fast", "bt_f", "bt_p"])
    ks: list[int] = field(default_factory=lambda: [8, 16, 32])
    l1_coefficients: list[float] = field(default_factory=lambda: [0.25, 0.5, 1.0, 2.0, 4.0])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    steps: int = 800
    evals: list[str] = field(default_factory=lambda: ["fast", "packed"])
    cache_activations: bool = False

    def validate(self) -> None:
        bad = [m for m in self.methods if m not in METHOD_LABELS]
        if not self.methods or bad:
            raise ConfigError(f"methods must be a non-empty subset of {list(METHOD_LABELS)}, got {self.methods}")
        if not self.ks and not self.l1_coefficients:
            raise ConfigError("nothing to sweep: set ks (TopK) and/or l1_coefficients (Standard)")
        if any(int(k) < 1 for k in self.ks) or any(float(c) <= 0 for c in self.l1_coefficients):
            raise ConfigError(f"ks must be >= 1 and l1_coefficients > 0; got {self.ks}, {self.l1_coefficients}")
        if len(self.seeds) < 2:
            raise ConfigError(f"an interval needs at least 2 SAE seeds per point, got {self.seeds}")
        if self.steps < 1:
            raise ConfigError(f"steps must be >= 1, got {self.steps}")
        if not self.evals or any(e not in ("fast", "packed") for e in self.evals):
            raise ConfigError(f"evals must be a non-empty subset of ['fast', 'packed'], got {self.evals}")

    def points(self) -> list[tuple[str, float]]:
        """(architecture, sparsity value) of every sweep point."""
        return ([("topk", float(k)) for k in self.ks] + [("standard", float(c)) for c in self.l1_coefficients])


@dataclass
class ParetoResult(Result):
    """table: one row per (SAE, eval distribution) with method (label), arm, architecture, sparsity_param,
    sparsity, seed, eval and the metrics of `evaluate_sae` (delta_ce* = ce_sae* - ce_clean*, nats/token);
    config: the ParetoConfig as a dict. The interval tables (statistics live above this layer):
    `interplab.experiments.sae_pareto.pareto_summary` / `matched_l0`."""

    table: pd.DataFrame
    config: dict

    def __post_init__(self):
        need = {"method", "architecture", "sparsity", "seed", "eval", "l0", "log2_mse"}
        if not need <= set(self.table.columns):
            raise ShapeError(f"a Pareto table needs columns {sorted(need)}; got {sorted(self.table.columns)}")

    def to_frame(self) -> pd.DataFrame:
        return self.table


def _row(r: dict, **labels) -> dict:
    out = {**labels, **{k: v for k, v in r.items() if not isinstance(v, (list, str))}}
    for suf in ("", "_response"):
        if f"ce_sae{suf}" in r:
            out[f"delta_ce{suf}"] = r[f"ce_sae{suf}"] - r[f"ce_clean{suf}"]
    return out


def _evaluate(model: Any, sae_dir: Path, data: SAEData, cfg: ParetoConfig,
              refs: dict | None = None) -> dict[str, dict]:
    """Both distributions of the same held-out dialogues; CE-based metrics over all and over answer positions.
    refs: one `downstream_metrics` reference dict per distribution, kept across the sweep's SAEs."""
    from interplab.core.errors import DataError
    from interplab.sae.evals import evaluate_sae, evaluate_sae_packed
    from interplab.sae.steering import template_token_ids

    special = template_token_ids(model.tokenizer)
    out = {}
    for ev in cfg.evals:
        fn = (lambda m, s, d, **kw: evaluate_sae(m, s, d, micro_batch=cfg.micro_batch, **kw)) if ev == "fast" else (
            lambda m, s, d, **kw: evaluate_sae_packed(m, s, d, context_size=cfg.context_size, **kw))
        ref = refs.setdefault(ev, {}) if refs is not None else None
        try:
            out[ev] = fn(model, sae_dir, data.eval, special_token_ids=special, positions="both", reference=ref)
        except DataError:  # a template whose answer spans cannot be located: all positions only
            out[ev] = fn(model, sae_dir, data.eval, special_token_ids=special, reference=ref)
    return out


def sae_pareto(model: Any, data: SAEData, cfg: ParetoConfig | None = None, *, out_dir=None,
               progress: Callable[[str], None] | None = None,
               on_rows: Callable[[pd.DataFrame], None] | None = None) -> ParetoResult:
    """Train every (point, method, seed) SAE and evaluate it on each distribution of `cfg.evals`.

    out_dir: where the SAEs are written (one SAELens directory each); None = a temporary folder deleted at the end
    (the sweep's weights are not kept). on_rows(table) is called after every SAE (a partial table for long runs)."""
    cfg = cfg or ParetoConfig()
    cfg.validate()
    rows: list[dict] = []
    refs: dict = {}   # the clean / zero-ablation forwards of each evaluation set, run once for every SAE
    cached = {}
    if cfg.cache_activations:
        for m in cfg.methods:
            if progress:
                progress(f"harvesting {METHOD_LABELS[m]} activations")
            t0 = time.perf_counter()
            cached[m] = arm_provider(model, data, m, site=cfg.site, context_size=cfg.context_size, seed=cfg.seed,
                                     exclude_massive=cfg.exclude_massive, micro_batch=cfg.micro_batch).harvest()
            cached[m].harvest_seconds = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(out_dir) if out_dir is not None else Path(tmp)
        for arch, value in cfg.points():
            param = SPARSITY_PARAM[arch]
            kw = {"k": int(value)} if arch == "topk" else {"l1_coefficient": float(value)}
            for m in cfg.methods:
                for s in cfg.seeds:
                    tag = f"{arch}_{param}={value:g}_{m}_seed{int(s)}"
                    if progress:
                        progress(tag)
                    t0 = time.perf_counter()
                    d = train_one(model, data, root / tag, method=m, architecture=arch, site=cfg.site,
                                  steps=cfg.steps, batch_tokens=cfg.batch_tokens, lr=cfg.lr, expansion=cfg.expansion,
                                  context_size=cfg.context_size, seed=int(s), overwrite=True,
                                  exclude_massive=cfg.exclude_massive, micro_batch=cfg.micro_batch,
                                  provider=cached[m].reseeded(int(s)) if m in cached else None, **kw)
                    train_s = time.perf_counter() - t0
                    for ev, r in _evaluate(model, d, data, cfg, refs).items():
                        rows.append(_row(r, method=METHOD_LABELS[m], arm=m, architecture=arch, sparsity_param=param,
                                         sparsity=value, seed=int(s), eval=ev, train_seconds=train_s,
                                         harvest_seconds=getattr(cached.get(m), "harvest_seconds", float("nan"))))
                    if on_rows is not None:
                        on_rows(pd.DataFrame(rows))
    c = asdict(cfg)
    return ParetoResult(table=pd.DataFrame(rows), config=c)
