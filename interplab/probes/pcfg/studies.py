"""Studies over PCFG organisms (spec §5): the depth sweep of the distribution match and a probe study with l*(ℓ)
slopes, as typed results."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from interplab.core.result import Result
from interplab.grammar import PCFG
from interplab.models.lab_model import LabModel
from interplab.probes.pcfg.kl import kl_summary, pcfg_kl
from interplab.probes.pcfg.parse import local_to_global, lstar_slope, lstar_slope_by_split, parse_probes

__all__ = ["DepthSweep", "depth_sweep", "ProbeStudy", "probe_study"]


@dataclass
class DepthSweep(Result):
    """``summary``: one row per model (model, n_layers, grammar, the `kl_summary` fields); ``by_position``: the
    `pcfg_kl` frames stacked with a leading ``model`` column; ``log2_n``: log2 of the string length for a
    uniform-binary grammar (None otherwise)."""

    grammar: str
    summary: pd.DataFrame
    by_position: pd.DataFrame
    log2_n: float | None = None

    def to_frame(self) -> pd.DataFrame:
        return self.summary

    def frames(self) -> dict[str, pd.DataFrame]:
        """{model: its per-position frame}, in sweep order."""
        bp = self.by_position
        return {m: bp[bp["model"] == m].drop(columns="model").reset_index(drop=True) for m in bp["model"].unique()}

    def headline(self) -> dict:
        """KL (and its standard error) per model next to the shared baselines and entropy-rate floor."""
        recs = self.summary.to_dict("records")
        return {"grammar": self.grammar, "log2_n": self.log2_n,
                "kl": {r["model"]: r["kl"] for r in recs}, "kl_se": {r["model"]: r["kl_se"] for r in recs},
                "kl_bigram": float(self.summary["kl_bigram"].iloc[0]),
                "kl_unigram": float(self.summary["kl_unigram"].iloc[0]),
                "entropy_rate": float(self.summary["entropy_rate"].iloc[0])}


def _log2_n(g: PCFG) -> float | None:
    if g.levels.max() > 0 and not g.auxiliary.any():
        return float(g.levels.max())  # uniform binary: n = 2^L
    return None


def depth_sweep(models: Sequence[LabModel], names: Sequence[str], g: PCFG, n_sequences: int = 512,
                seed: int = 0) -> DepthSweep:
    """`pcfg_kl` of each model (all trained on ``g``) on the same held-out samples."""
    frames, rows = [], []
    for m, name in zip(models, names):
        df = pcfg_kl(m, g, n_sequences, seed)
        rows.append({"model": name, "n_layers": m.n_layers, "grammar": g.name, **kl_summary(df)})
        frames.append(df.assign(model=name)[["model", *df.columns]])
    return DepthSweep(grammar=g.to_dict()["name"], summary=pd.DataFrame(rows),
                      by_position=pd.concat(frames, ignore_index=True), log2_n=_log2_n(g))


@dataclass
class ProbeStudy(Result):
    """``probes``: the `parse_probes` frame; ``l_star``: `local_to_global` of it; ``slopes``: {target: the
    `lstar_slope` dict (t interval on the bucket points) with ``by_split``: the `lstar_slope_by_split` view}."""

    probes: pd.DataFrame
    l_star: pd.DataFrame
    slopes: dict

    def to_frame(self) -> pd.DataFrame:
        return self.probes


def probe_study(model: LabModel, g: PCFG, targets: Sequence[str], probe: str = "linear", n_sequences: int = 400,
                n_seeds: int = 3, seed: int = 0, cap_per_bucket: int = 3000, max_len: int | None = None) -> ProbeStudy:
    """`parse_probes` with l*(ℓ) per (target, bucket) and its slope against log2 ℓ per target."""
    df = parse_probes(model, g, targets=targets, probe=probe, seed=seed, n_sequences=n_sequences, n_seeds=n_seeds,
                      cap_per_bucket=cap_per_bucket, max_len=max_len or None)
    ls = local_to_global(df) if len(df) else pd.DataFrame(columns=["target", "bucket", "span_len_lo", "log2_len",
                                                                     "l_star", "best_score", "best_layer"])
    return ProbeStudy(probes=df, l_star=ls, slopes={t: {**lstar_slope(ls, t), "by_split": lstar_slope_by_split(df, t)}
                                                    for t in ls["target"].unique()})
