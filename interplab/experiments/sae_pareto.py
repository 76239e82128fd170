"""FAST vs BT(F) vs BT(P) SAEs at matched L0 (`sae-pareto`; issue 17 1c; docs/sae.md "Matched L0 on toy-chat").

The training and evaluation live in `interplab.sae.pareto` (`sae_pareto`: every arm at every point of a TopK k and
a Standard L1 sweep, several SAE seeds, each SAE evaluated on the FAST and on the packed distribution). Here: the
interval tables (`pareto_summary`, `matched_l0`; Student-t over SAE seeds from `interplab.probes.stats`, which the
sae layer may not import), the experiment and its figures. A separate experiment rather than a sweep mode of
`sae-fast-vs-block`: that one runs GSNR, leakage and steering on one SAE per arm, which a 72-SAE sweep neither needs
nor can afford."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure
from interplab.sae.pareto import ParetoConfig

__all__ = ["SAEParetoConfig", "pareto_summary", "matched_l0", "PARETO_METRICS", "MATCHED_METRICS"]

# metrics summarised per point (eval distribution x architecture x sparsity value x method)
PARETO_METRICS = ("l0", "log2_mse", "log2_mse_special", "explained_variance", "dead_features", "dense_features",
                  "delta_ce", "delta_loss_pct", "ce_loss_score", "kl_sae", "delta_ce_response",
                  "delta_loss_pct_response", "ce_loss_score_response", "kl_sae_response")
# metrics compared at matched L0 (interpolated in log L0 along each seed's sweep)
MATCHED_METRICS = ("log2_mse", "explained_variance", "delta_ce_response", "ce_loss_score_response",
                   "kl_sae_response")


def pareto_summary(table: pd.DataFrame, metrics=PARETO_METRICS) -> pd.DataFrame:
    """One row per (eval, architecture, sparsity, method): `<metric>_mean/_lo/_hi` (95% Student-t interval over
    seeds, `stats.intervals`) for every metric present, and n (seeds)."""
    from interplab.probes.stats import intervals

    rows = []
    keys = ["eval", "architecture", "sparsity", "method"]
    for key, g in table.groupby(keys, sort=False):
        row = dict(zip(keys, key))
        row["n"] = int(len(g))
        for m in metrics:
            if m in g:
                ci = intervals(g[m])
                row.update({f"{m}_mean": ci["mean"], f"{m}_lo": ci["lo"], f"{m}_hi": ci["hi"]})
        rows.append(row)
    return pd.DataFrame(rows)


def _l0_targets(table: pd.DataFrame, n_targets: int) -> list[float]:
    """Common L0 values every (method, seed) curve of `table` reaches: a geometric grid over the overlap of their
    L0 ranges (empty when the ranges do not overlap)."""
    lo = max(g["l0"].min() for _, g in table.groupby(["method", "seed"]))
    hi = min(g["l0"].max() for _, g in table.groupby(["method", "seed"]))
    if not (lo > 0 and hi >= lo):
        return []
    if n_targets == 1 or math.isclose(lo, hi):
        return [float(math.sqrt(lo * hi))]
    return [float(v) for v in np.geomspace(lo, hi, n_targets)]


def matched_l0(table: pd.DataFrame, metrics=MATCHED_METRICS, n_targets: int = 3) -> pd.DataFrame:
    """Matched-L0 comparison. TopK: the sweep points themselves (L0 = k). Standard (L0 is an outcome): each
    (method, seed) curve is interpolated linearly in log L0 at `n_targets` common L0 values inside the range every
    curve covers (no extrapolation). Per (eval, architecture, target, method): mean and 95% t interval over seeds
    of each metric, and for BT arms the difference FAST - BT paired by seed (same seed = same SAE initialisation)."""
    from interplab.probes.stats import intervals

    rows = []
    for (ev, arch), t in table.groupby(["eval", "architecture"], sort=False):
        targets = (sorted(t["sparsity"].unique()) if arch == "topk" else _l0_targets(t, n_targets))
        per: dict[tuple[str, float], dict[int, dict]] = {}
        for (m, s), g in t.groupby(["method", "seed"], sort=False):
            g = g.sort_values("l0")
            x = np.log(g["l0"].to_numpy(float))
            for tg in targets:
                if arch == "topk":
                    h = g[g["sparsity"] == tg]
                    vals = {mt: float(h[mt].iloc[0]) for mt in metrics if mt in h}
                    vals["l0"] = float(h["l0"].iloc[0])
                else:
                    vals = {mt: float(np.interp(math.log(tg), x, g[mt].to_numpy(float))) for mt in metrics if mt in g}
                    vals["l0"] = float(tg)
                per.setdefault((m, tg), {})[int(s)] = vals
        for (m, tg), by_seed in per.items():
            row = {"eval": ev, "architecture": arch, "l0_target": float(tg), "method": m, "n": len(by_seed)}
            for mt in (*[x for x in metrics if x in t], "l0"):
                ci = intervals([v[mt] for v in by_seed.values()])
                row.update({f"{mt}_mean": ci["mean"], f"{mt}_lo": ci["lo"], f"{mt}_hi": ci["hi"]})
            fast = per.get(("FAST", tg))
            if m != "FAST" and fast:
                common = sorted(set(fast) & set(by_seed))
                for mt in (x for x in metrics if x in t):
                    ci = intervals([fast[s][mt] - by_seed[s][mt] for s in common])
                    row.update({f"fast_minus_{mt}_mean": ci["mean"], f"fast_minus_{mt}_lo": ci["lo"],
                                f"fast_minus_{mt}_hi": ci["hi"]})
            rows.append(row)
    return pd.DataFrame(rows)


@dataclass
class SAEParetoConfig(ParetoConfig):
    """FAST vs BT(F) vs BT(P) at matched L0 (`ParetoConfig`: methods, ks, l1_coefficients, seeds, steps, evals and
    the `SAERecipe` fields, `seed` = data seed). model: model to load; threads: torch threads; data: "" = the toy
    dialogues, "offline-chat" = the built-in chat set for a real chat model (`interplab.data.chat_corpus`), or a chat
    file of your own (docs/data.md). n_train, n_text, n_eval: dialogues for FAST/BT(F), plain
    texts for BT(P), held-out evaluation dialogues (both eval distributions use the same ones). keep_saes: keep
    every SAE directory in the run folder (default off: the sweep's weights are deleted)."""

    model: str = "zoo:toy-chat"
    threads: int = 1
    data: str = ""
    n_train: int = 1500
    n_text: int = 1500
    n_eval: int = 128
    keep_saes: bool = False


PARETO_FIGURES = ("log2_mse", "delta_ce_response", "explained_variance", "ce_loss_score_response")


@register_experiment("sae-pareto", config=SAEParetoConfig,
                     help="FAST vs BT(F) vs BT(P) SAEs at matched L0: TopK k and Standard L1 sweeps, several SAE seeds "
                          "per point, each SAE evaluated on the FAST and the packed distribution; Pareto curves of MSE "
                          "and CE against L0 with t intervals")
def sae_pareto_experiment(cfg: SAEParetoConfig, run) -> None:
    import time
    from pathlib import Path

    import torch

    from interplab.experiments.sae_verdicts import pareto_verdicts
    from interplab.figures.sae import pareto_figure
    from interplab.models.loading import load_model
    from interplab.probes.validity import VALIDITY_RESULT, ValidityReport
    from interplab.sae.data import load_sae_data
    from interplab.sae.pareto import sae_pareto

    t0 = time.perf_counter()
    cfg.validate()
    torch.set_num_threads(cfg.threads)
    model = load_model(cfg.model)
    data = load_sae_data(model, cfg.data, cfg.n_train, cfg.n_eval, cfg.n_text, cfg.seed)
    res = sae_pareto(model, data, cfg, out_dir=Path(run.path) / "saes" if cfg.keep_saes else None,
                     progress=lambda s: print(f"  training {s}", flush=True),
                     on_rows=lambda df: run.save_table("runs", df, overwrite=True))
    run.save_result("pareto", res)
    run.save_table("runs", res.table, overwrite=True)
    summary, matched = pareto_summary(res.table), matched_l0(res.table)
    run.save_table("summary", summary)
    run.save_table("matched_l0", matched)
    for m in PARETO_FIGURES:
        save_figure(run, f"pareto_{m}", pareto_figure(summary, m))
    run.save_json("summary", {"wall_seconds": time.perf_counter() - t0, "n_saes": int(len(res.table) // len(cfg.evals)),
                              "n_eval_dialogues": len(data.eval), "config": res.config})
    verdicts = pareto_verdicts(res.table)      # the TopK points' FAST-vs-BT claims (issue 46)
    if verdicts:
        run.save_result(VALIDITY_RESULT, ValidityReport.of(verdicts))
