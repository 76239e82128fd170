"""Layer-wise probes of parse quantities (spec ../shared/methods/pcfg_parse.md §2.6, §5.2–5.3): held-out quality of
probes that read prefix-conditional parse quantities from the residual stream, per (layer, target, span-length
bucket), with random-init and shuffled-label controls, and the local-to-global statistic l*(ℓ)."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from interplab.core.errors import InputError
from interplab.core.record import Record
from interplab.grammar import PCFG, sample_eval_set
from interplab.models.lab_model import LabModel
from interplab.probes.stats import Interval, SlopeInterval, intervals, slope_interval
from interplab.probes.pcfg.capture import collect, random_init_like, require_lab_model
from interplab.probes.pcfg.fit import features, fit_linear, fit_mlp, shuffle_within_token, split_sequences
from interplab.probes.pcfg.targets import PROBE_TARGETS, ProbeData, bucket_label, build_targets
from interplab.train.grammar_eval import max_len_for

__all__ = ["parse_probes", "local_to_global", "lstar_slope", "lstar_slope_by_split", "LstarSlope", "LstarSplitSlopes"]

DEFAULT_TARGETS = ("span_posterior", "inside", "gold_label", "pending", "next_token")


def parse_probes(model: LabModel, g: PCFG, *, targets: Sequence[str] = DEFAULT_TARGETS, probe: str = "linear",
                 seed: int = 0, n_sequences: int = 400, layers: Sequence[int] | None = None, controls: bool = True,
                 n_seeds: int = 1, cap_per_bucket: int = 3000, max_len: int | None = None,
                 eval_set=None) -> pd.DataFrame:
    """Layer-wise probes of parse quantities (spec §2.6, §5.2–5.3).

    For each layer (-1 = embeddings, i.e. ``resid_pre.0``; l = ``resid_post.l``), each target in ``targets`` (keys of
    `PROBE_TARGETS`) and each span-length bucket ℓ ∈ {1, 2-3, 4-7, ...} ("all" for position targets), fits a probe
    on 70% of ``n_sequences`` held-out grammar samples (split by sequence), picks its regulariser / epoch on 15% and
    reports the score on the last 15%: variance-weighted R² for distributions, accuracy for labels. Span targets use
    features [h_t; h_i; h_t − h_i] for span (i, t]; position targets use h_t (BOS excluded).

    ``probe``: "linear" (ridge, closed form, all layers in one batched solve) or "mlp" (one hidden layer of 64,
    full-batch Adam for 120 epochs, best validation epoch kept).
    ``controls``: also fit the same probe on a random-init copy of the architecture (``score_random_init``) and on
    targets shuffled among examples with the same current token (``score_shuffled``; ``selectivity`` = score −
    score_shuffled). ``n_seeds`` > 1 repeats with other splits (``score_std``).

    Returns one row per (layer, target, bucket) with columns layer, target, bucket, span_len_lo, metric, score,
    score_std, score_random_init, score_shuffled, selectivity, n_examples, probe, and ``l_star`` (first layer reaching
    90% of that (target, bucket)'s best score over layers; see `local_to_global`).
    """
    model = require_lab_model(model)
    layers = _check_args(model, targets, probe, layers)
    if eval_set is None:
        toks, lengths, trees = sample_eval_set(g, n_sequences, seed + 31_337, max_len_for(model, max_len))
    else:
        toks, lengths, trees = eval_set
    rng = np.random.default_rng(seed)
    data = build_targets(g, toks, lengths, trees, list(targets), cap_per_bucket=cap_per_bucket, rng=rng)
    models = {"trained": model}
    if controls:
        models["random_init"] = random_init_like(model)
    feats = {name: collect(m, g, toks, lengths, layers) for name, m in models.items()}
    rows = []
    for tname, d in data.items():
        Y = _target_matrix(d)
        for k in np.unique(d.bucket):
            m = d.bucket == k
            if m.sum() < 30:
                continue
            sub = ProbeData(d.b[m], d.t[m], d.i[m], None, d.bucket[m], d.kind, d.tok[m])
            Yk = Y[torch.as_tensor(m)]
            if float(((Yk - Yk.mean(0, keepdim=True)) ** 2).sum()) < 1e-10:
                continue  # a constant target (e.g. the root span of a fixed-length grammar): nothing to probe
            span = PROBE_TARGETS[tname][0] == "span"
            scores = _bucket_scores(feats, layers, sub, span, Yk, toks.shape[0], probe, seed, n_seeds, controls)
            if "trained" in scores:
                base = {"target": tname, "bucket": "all" if k < 0 else bucket_label(int(k)),
                        "span_len_lo": int(2 ** k) if k >= 0 else 0, "metric": d.kind, "n_examples": int(m.sum())}
                rows += _layer_rows(scores, layers, base, probe, seed, controls)
    df = pd.DataFrame(rows)
    if len(df):
        lstar = local_to_global(df)
        df = df.merge(lstar[["target", "bucket", "l_star"]], on=["target", "bucket"], how="left")
    df.attrs["grammar"] = g.name
    df.attrs["layers"] = layers
    return df


def _check_args(model: LabModel, targets, probe: str, layers) -> list[int]:
    if probe not in ("linear", "mlp"):
        raise InputError("probe must be 'linear' or 'mlp'.")
    bad = [t for t in targets if t not in PROBE_TARGETS]
    if bad:
        raise InputError(f"unknown probe targets {bad}; choose from {sorted(PROBE_TARGETS)}.")
    layers = list(range(-1, model.n_layers)) if layers is None else list(layers)
    if any(l < -1 or l >= model.n_layers for l in layers):
        raise InputError(f"layers must lie in -1..{model.n_layers - 1}.")
    return layers


def _target_matrix(d: ProbeData) -> torch.Tensor:
    """Distributions as they are; labels one-hot over the classes present."""
    Y = d.y
    if d.kind == "acc":
        classes, yi = np.unique(Y, return_inverse=True)
        Y = np.eye(len(classes))[yi]
    return torch.as_tensor(np.asarray(Y, dtype=np.float64))


def _bucket_scores(feats, layers, sub: ProbeData, span: bool, Yk, n_seq: int, probe: str, seed: int, n_seeds: int,
                   controls: bool) -> dict:
    """{"trained" | "random_init": [n_seeds, n_layers] test scores, "shuffled": [n_layers]} for one bucket."""
    fit = fit_linear if probe == "linear" else fit_mlp
    scores = {}
    for name in feats:
        X = features(feats[name], layers, sub, span)
        per_seed = []
        for s in range(n_seeds):
            tr, va, te = split_sequences(sub.b, n_seq, seed + 101 * s)
            if tr.sum() < 10 or va.sum() < 3 or te.sum() < 3:
                continue
            kw = {"seed": seed + s} if probe == "mlp" else {}
            per_seed.append(fit(X, Yk, tr, va, te, sub.kind, **kw))
            if name == "trained" and controls and s == 0:
                Ysh = torch.as_tensor(shuffle_within_token(Yk.numpy(), sub.tok, seed + 7))
                scores["shuffled"] = fit(X, Ysh, tr, va, te, sub.kind, **kw)
        if per_seed:
            scores[name] = torch.stack(per_seed, 0)
    return scores


def _layer_rows(scores: dict, layers, base: dict, probe: str, seed: int, controls: bool) -> list[dict]:
    tr_scores = scores["trained"]
    rows = []
    for li, l in enumerate(layers):
        row = {"layer": l, "target": base["target"], "bucket": base["bucket"], "span_len_lo": base["span_len_lo"],
               "metric": base["metric"], "score": float(tr_scores[:, li].mean()),
               "score_std": float(tr_scores[:, li].std()) if tr_scores.shape[0] > 1 else float("nan"),
               "n_examples": base["n_examples"], "probe": probe, "seed": seed}
        # per-split scores, so l*(ℓ) and its slope can also be read split by split (`lstar_slope_by_split`)
        row.update({f"score_split{s}": float(tr_scores[s, li]) for s in range(tr_scores.shape[0])})
        if controls:
            row["score_random_init"] = float(scores["random_init"][:, li].mean()) if "random_init" in scores else float("nan")
            row["score_shuffled"] = float(scores["shuffled"][li]) if "shuffled" in scores else float("nan")
            row["selectivity"] = row["score"] - row["score_shuffled"]
        rows.append(row)
    return rows
def local_to_global(df: pd.DataFrame, frac: float = 0.9) -> pd.DataFrame:
    """l*(ℓ) per (target, bucket): the first layer whose score reaches ``frac`` of the bucket's best over layers
    (scores below 0 are clipped to 0 first). Columns target, bucket, span_len_lo, log2_len, l_star, best_score,
    best_layer."""
    out = []
    for (t, bk), grp in df.groupby(["target", "bucket"], sort=False):
        grp = grp.sort_values("layer")
        s = grp["score"].clip(lower=0).to_numpy()
        best = s.max()
        layers = grp["layer"].to_numpy()
        lstar = int(layers[np.nonzero(s >= frac * best)[0][0]]) if best > 0 else int(layers[-1])
        lo = int(grp["span_len_lo"].iloc[0])
        out.append({"target": t, "bucket": bk, "span_len_lo": lo, "log2_len": math.log2(lo) if lo > 0 else float("nan"),
                    "l_star": lstar, "best_score": float(grp["score"].max()),
                    "best_layer": int(layers[int(np.argmax(grp["score"].to_numpy()))])})
    return pd.DataFrame(out)


class LstarSlope(Record):
    """`lstar_slope`: the `SlopeInterval` keys (slope, intercept, lo, hi, half, se, dof, n: n the buckets used), then
    ci95 (= half) and interval (the interval's name, e.g. "t(2)")."""

    KEYS = SlopeInterval.KEYS + ("ci95", "interval")


class LstarSplitSlopes(Record):
    """`lstar_slope_by_split`: slopes (one per probe split), then the `Interval` keys of their mean (mean, lo, hi, n,
    method, level)."""

    KEYS = ("slopes",) + Interval.KEYS


def lstar_slope(lstar: pd.DataFrame, target: str, *, level: float = 0.95) -> LstarSlope:
    """Least-squares slope of l*(ℓ) against log2 ℓ for one target with a Student-t interval on n − 2 residual dof
    (`stats.slope_interval`; 4 buckets leave 2 dof, so the 95% half-width is 4.30·SE, not 1.96·SE). ``ci95`` is
    that half-width; ``lo``/``hi`` the bounds."""
    d = lstar[(lstar["target"] == target) & lstar["log2_len"].notna()]
    fit = slope_interval(d["log2_len"].to_numpy(float), d["l_star"].to_numpy(float), level=level)
    return LstarSlope({**fit, "ci95": fit["half"], "interval": f"t({fit['dof']})", "n": len(d)})


def lstar_slope_by_split(probes: pd.DataFrame, target: str, *, frac: float = 0.9, level: float = 0.95
                         ) -> LstarSplitSlopes:
    """The secondary view: l*(ℓ) and its slope recomputed from each probe split's scores (columns
    ``score_split<s>`` of `parse_probes`), and a t interval of the mean over the split slopes (`stats.intervals`).
    The splits share one trained model and one sample, so this measures probe-fitting variability only, not
    variability over training seeds. {slopes: [...], mean, lo, hi, n, method, level}."""
    cols = sorted(c for c in probes.columns if c.startswith("score_split"))
    d = probes[probes["target"] == target]
    slopes = []
    for c in cols:
        if d[c].isna().all():
            continue
        ls = local_to_global(d.drop(columns="score").rename(columns={c: "score"}), frac)
        slopes.append(lstar_slope(ls, target)["slope"])
    return LstarSplitSlopes({"slopes": slopes, **intervals(slopes, method="t", level=level)})
