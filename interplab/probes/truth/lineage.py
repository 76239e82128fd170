"""Inheritance of Truth-Score maps along model lineages (spec truth_scores.md §2.3).

The repo's metric is Pearson r over the flattened maps. interplab adds Spearman, the within-layer-centred Pearson
(each layer's mean subtracted first, so a shared depth trend does not count as inheritance), the top-k Jaccard
overlap of the best heads, and a permutation p-value under a within-layer head-shuffle null
(p = (#{null >= observed} + 1) / (B + 1)).
"""
from __future__ import annotations

import itertools
import os
import re
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from interplab.core.errors import ConfigError, DataError, ShapeError
from interplab.core.record import Record
from interplab.probes import stats

SHARED_DATA_ENV = "INTERPLAB_SHARED_DATA"
RELEASED_SUBDIR = "truthprobe_scores"

# The lineages of the released maps (spec §2.3): Llama-2 -> Vicuna -> LLaVA-1.5 / LLaVA-NeXT; Qwen2.5 -> VL / Omni.
RELEASED_PAIRS = (
    ("llama2", "vicuna"), ("vicuna", "llava1.5"), ("vicuna", "llava_next"), ("llava1.5", "llava_next"),
    ("qwen2.5", "qwen2.5_vl_instruct"), ("qwen2.5", "qwen2.5_vl_omni"),
    ("qwen2.5_vl_instruct", "qwen2.5_vl_omni"),
)


def _as_map(x, name: str) -> np.ndarray:
    s = getattr(x, "scores", x)
    s = np.asarray(s, dtype=np.float64)
    if s.ndim != 2:
        raise ShapeError(f"{name} must be a 2-D [n_layers, n_heads] map (or TruthScores), got shape {s.shape}")
    return s


def topk_jaccard(a, b, top_k_frac: float = 0.05, k: int | None = None) -> float:
    """|top-k(a) ∩ top-k(b)| / |top-k(a) ∪ top-k(b)| over heads, k = max(1, round(top_k_frac * n_heads_total))."""
    a, b = _as_map(a, "a").ravel(), _as_map(b, "b").ravel()
    ok = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ok], b[ok]
    if k is None:
        k = max(1, int(round(top_k_frac * a.size)))
    ta = set(np.argsort(-a, kind="stable")[:k].tolist())
    tb = set(np.argsort(-b, kind="stable")[:k].tolist())
    return len(ta & tb) / len(ta | tb)


def within_layer_permutations(n_layers: int, n_heads: int, n_permutations: int, seed: int = 0) -> np.ndarray:
    """[B, L, H] independent head permutations of every layer (argsort of uniform noise)."""
    rng = np.random.default_rng(seed)
    return np.argsort(rng.random((n_permutations, n_layers, n_heads)), axis=-1)


def _row_mean(X: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Mean of each row of X over the entries where `ok`, [L, 1]; NaN for a row with none (np.nanmean would warn
    "Mean of empty slice")."""
    cnt = ok.sum(1, keepdims=True)
    tot = np.where(ok, X, 0.0).sum(1, keepdims=True)
    return np.divide(tot, cnt, out=np.full(tot.shape, np.nan), where=cnt > 0)


class LineageCorrelation(Record):
    """`lineage_correlation`: pearson, spearman, pearson_centered, topk_jaccard, perm_p, null_mean, null_q95, n, k,
    pearson_display; null (the permutation null) with return_null."""

    KEYS = ("pearson", "spearman", "pearson_centered", "topk_jaccard", "perm_p", "null_mean", "null_q95", "n", "k",
            "pearson_display")
    OPTIONAL = ("null",)


def lineage_correlation(a, b, *, top_k_frac: float = 0.05, n_permutations: int = 1000, seed: int = 0,
                        clip_negative: bool = False, return_null: bool = False) -> LineageCorrelation:
    """Similarity of two Truth-Score maps of the same architecture.

    a, b: TruthScores or [n_layers, n_heads] arrays of identical shape (ShapeError otherwise). Positions that are NaN
    in either map are dropped (the repo's mask).
    Returns a `LineageCorrelation` (a dict) with
      pearson: Pearson r of the flattened maps (the repo's metric);
      spearman: Spearman rank correlation;
      pearson_centered: Pearson r after subtracting each layer's mean from both maps;
      topk_jaccard: Jaccard overlap of the top max(1, round(top_k_frac * n)) heads;
      perm_p: one-sided p-value of `pearson` under a null that shuffles heads within each layer of b
              (B = n_permutations; p = (#{null >= obs} + 1) / (B + 1));
    plus null_mean, null_q95 (of the permutation null), n (heads compared), k (top-k size),
    pearson_display (pearson clipped at 0 when clip_negative, the repo's bar-plot option), and the null itself
    under "null" when return_null.
    """
    A, Bm = _as_map(a, "a"), _as_map(b, "b")
    if A.shape != Bm.shape:
        raise ShapeError(f"maps have different shapes {A.shape} vs {Bm.shape}; lineage correlation compares heads of "
                         "the same architecture ([n_layers, n_heads] each). Use correlation_matrix(..., "
                         "align='intersect') for the repo's common-index comparison across shapes.")
    if n_permutations < 0 or not (0 < top_k_frac <= 1):
        raise ConfigError("need n_permutations >= 0 and 0 < top_k_frac <= 1")
    L, H = A.shape
    ok = ~(np.isnan(A) | np.isnan(Bm))
    av, bv = A[ok], Bm[ok]
    if av.size < 3:
        raise DataError(f"only {av.size} heads are non-NaN in both maps; need at least 3")
    pearson = float(stats.pearson(av, bv))
    spearman = stats.spearman(av, bv)
    Ac = A - _row_mean(A, ok)       # a layer with no head valid in both maps has no mean (and no entry in [ok])
    Bc = Bm - _row_mean(Bm, ok)
    centered = float(stats.pearson(Ac[ok], Bc[ok]))
    jac = topk_jaccard(np.where(ok, A, np.nan), np.where(ok, Bm, np.nan), top_k_frac)
    k = max(1, int(round(top_k_frac * av.size)))
    out = LineageCorrelation(pearson=pearson, spearman=spearman, pearson_centered=centered, topk_jaccard=jac,
                             perm_p=float("nan"), null_mean=float("nan"), null_q95=float("nan"), n=int(av.size), k=k,
                             pearson_display=max(pearson, 0.0) if clip_negative else pearson)
    if n_permutations > 0:
        perm = within_layer_permutations(L, H, n_permutations, seed)
        Bp = np.take_along_axis(np.broadcast_to(Bm, (n_permutations, L, H)), perm, axis=-1)
        okp = np.take_along_axis(np.broadcast_to(ok, (n_permutations, L, H)), perm, axis=-1) & ok
        if okp.all():
            null = stats.pearson(np.broadcast_to(A.ravel(), (n_permutations, L * H)), Bp.reshape(n_permutations, -1))
        else:  # NaNs move with their heads: mask per permutation
            Af = np.broadcast_to(A, Bp.shape)
            m = okp.astype(float)
            cnt = m.reshape(n_permutations, -1).sum(-1)
            a0, b0 = np.where(okp, Af, 0.0), np.where(okp, Bp, 0.0)
            am = a0.reshape(n_permutations, -1).sum(-1) / cnt
            bm = b0.reshape(n_permutations, -1).sum(-1) / cnt
            ac = (a0 - am[:, None, None]) * m
            bc = (b0 - bm[:, None, None]) * m
            num = (ac * bc).reshape(n_permutations, -1).sum(-1)
            den = np.sqrt((ac ** 2).reshape(n_permutations, -1).sum(-1) * (bc ** 2).reshape(n_permutations, -1).sum(-1))
            null = num / den
        out["perm_p"] = float((np.sum(null >= pearson) + 1) / (n_permutations + 1))
        finite = null[np.isfinite(null)]        # a permutation with zero variance has no correlation
        out["null_mean"] = float(finite.mean()) if finite.size else float("nan")
        out["null_q95"] = float(np.quantile(finite, 0.95)) if finite.size else float("nan")
        if return_null:
            out["null"] = null
    return out


def per_layer_correlation(a, b) -> np.ndarray:
    """[n_layers] Pearson r between the two maps' head scores within each layer (NaN for a constant layer)."""
    A, Bm = _as_map(a, "a"), _as_map(b, "b")
    if A.shape != Bm.shape:
        raise ShapeError(f"maps have different shapes {A.shape} vs {Bm.shape}")
    return stats.pearson(A, Bm)


STATISTICS = ("pearson", "spearman", "pearson_centered", "topk_jaccard")


def correlation_matrix(maps: Mapping[str, object], statistic: str = "pearson", *, align: str = "strict",
                       top_k_frac: float = 0.05):
    """K x K DataFrame of a statistic between named maps.

    align="strict": maps of different shapes get NaN entries. align="intersect" reproduces the repo's
    `correlation.py`: every map is cut to the layers and heads common to all files (leading indices), positions NaN
    in any file are dropped, then the statistic is computed on the flattened maps."""
    import pandas as pd

    if statistic not in STATISTICS:
        raise ConfigError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
    names = list(maps)
    arrs = {n: _as_map(maps[n], n) for n in names}
    if align == "intersect":
        L = min(a.shape[0] for a in arrs.values())
        H = min(a.shape[1] for a in arrs.values())
        arrs = {n: a[:L, :H] for n, a in arrs.items()}
        common = np.all([~np.isnan(a) for a in arrs.values()], axis=0)
        arrs = {n: np.where(common, a, np.nan) for n, a in arrs.items()}
    elif align != "strict":
        raise ConfigError(f"align must be 'strict' or 'intersect', got {align!r}")
    M = np.full((len(names), len(names)), np.nan)
    for i, j in itertools.product(range(len(names)), repeat=2):
        a, b = arrs[names[i]], arrs[names[j]]
        if a.shape != b.shape:
            continue
        if statistic == "topk_jaccard":
            M[i, j] = topk_jaccard(a, b, top_k_frac)
        else:
            M[i, j] = lineage_correlation(a, b, n_permutations=0, top_k_frac=top_k_frac)[statistic]
    return pd.DataFrame(M, index=names, columns=names)


def lineage_table(maps: Mapping[str, object], pairs: Sequence[tuple[str, str]] | None = None, *,
                  top_k_frac: float = 0.05, n_permutations: int = 1000, seed: int = 0):
    """One row per pair with all five statistics (+ null mean/q95). Default pairs: all same-shape pairs."""
    import pandas as pd

    names = list(maps)
    if pairs is None:
        pairs = [(a, b) for a, b in itertools.combinations(names, 2)
                 if _as_map(maps[a], a).shape == _as_map(maps[b], b).shape]
    rows = []
    for a, b in pairs:
        if a not in maps or b not in maps:
            raise DataError(f"pair ({a!r}, {b!r}) names a map that is not given; have {names}")
        st = lineage_correlation(maps[a], maps[b], top_k_frac=top_k_frac, n_permutations=n_permutations, seed=seed)
        rows.append({"a": a, "b": b, **{k: st[k] for k in ("pearson", "spearman", "pearson_centered",
                                                             "topk_jaccard", "perm_p", "null_mean", "null_q95", "n")}})
    return pd.DataFrame(rows)


_RELEASED_RE = re.compile(r"converted_score_cv5_head_metrics_(?P<model>.+)_(?P<data>halueval|rlhfv)_(?P<n>\d+)\.npy$")


def released_dir() -> Path:
    """The folder of the authors' released maps: $INTERPLAB_SHARED_DATA/truthprobe_scores when the variable is set,
    else shared/data/truthprobe_scores beside the project folder (a checkout's `../shared`). DataError when absent."""
    env = os.environ.get(SHARED_DATA_ENV)
    if env:
        d = Path(env).expanduser() / RELEASED_SUBDIR
        where = f"${SHARED_DATA_ENV}={env}"
    else:
        import interplab

        d = Path(interplab.__file__).resolve().parents[2] / "shared" / "data" / RELEASED_SUBDIR
        where = "the project's ../shared/data"
    if not d.is_dir():
        raise DataError(f"the released TruthProbe maps are not at {d} ({where}); set {SHARED_DATA_ENV} to the "
                        f"folder that holds {RELEASED_SUBDIR}/, or pass the maps' folder explicitly")
    return d


def load_released_maps(directory=None) -> dict:
    """The authors' released maps as {model: TruthScores} (model = the file's model tag, e.g. 'llama2');
    default folder: `released_dir()`."""
    from interplab.probes.truth.scores import TruthScores

    d = Path(directory) if directory is not None else released_dir()
    if not d.is_dir():
        raise DataError(f"released-map directory {d} does not exist (expected the TruthProbe truth_scores/*.npy)")
    out = {}
    for p in sorted(d.glob("*.npy")):
        m = _RELEASED_RE.search(p.name)
        if not m:
            continue
        ts = TruthScores.from_npy(p, model=m["model"])
        ts.provenance.update({"data": m["data"], "n_probe_samples": int(m["n"])})
        out[m["model"]] = ts
    if not out:
        raise DataError(f"no converted_score_cv5_head_metrics_*.npy files in {d}")
    return out
