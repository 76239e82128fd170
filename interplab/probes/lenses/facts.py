"""The lenses over many clean / corrupt fact pairs, aggregated with intervals over pairs (issue 27 §3, "Lenses and
the atlas" on a real model; docs/lenses.md, "Lenses over many fact pairs").

One pair (`interplab.data.fact_pairs.FactPair`: "The capital of France is" -> " Paris" vs "The capital of Italy
is" -> " Rome") shows one circuit reading; a claim about the model needs the spread over pairs. For every pair, with
the metric logit[answer] - logit[wrong] at the last token (answer and wrong from the facts file):

- logit lens (`logit_lens`): the rank of the answer at the last position after every layer (resid_post.L);
- exact activation patching, denoising (`patch_grid`, the grid of `activation_patching`): resid_pre per layer x
  position, and attn_z per query head with every position patched at once (the atlas's head map); normalised,
  1 = the patch restores the clean logit difference, 0 = the corrupt run's;
- attribution patching (`attribution_grid`, the estimate of `attribution_patching`), gradient and integrated
  gradients, on the same two grids, and its agreement with the exact grid (`compare_to_exact`: Spearman, Pearson,
  max error per pair and site);
- direct logit attribution per head of the clean prompt (`direct_logit_attribution`, one batched call for all
  pairs).

Aggregates (over the pairs whose clean - corrupt logit difference is at least `min_span`; the logit-lens ranks over
every pair): the answer's rank per layer (median and IQR), the mean resid_pre map by token role (positions differ in
number across pairs, so they are pooled by role: see `position_roles`) and the mean head maps with percentile
bootstrap intervals over pairs, the per-pair Spearman of attribution vs exact (median with a bootstrap interval),
and how stable the top-k heads are across pairs: the fraction of bootstrap resamples of the pairs in which each head
is in the top k (by |mean|), and the top-k overlap and Spearman of the mean maps of random halves of the pairs.

    >>> from interplab.probes.lenses.facts import fact_lens_study
    >>> study = fact_lens_study(model, pairs)               # pairs: data.fact_pairs.fact_pairs(model.tokenizer)
    >>> study.rank_per_layer(); study.top_heads("patching"); study.split_half("dla")
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from interplab.core.errors import ConfigError, InputError, ShapeError
from interplab.core.record import Record
from interplab.core.result import Result
from interplab.probes.lenses.attribution import attribution_grid, compare_to_exact
from interplab.probes.lenses.common import PromptPair, logit_diff_metric, token_strings
from interplab.probes.lenses.dla import DLAResult, direct_logit_attribution
from interplab.probes.lenses.logit_lens import logit_lens
from interplab.probes.lenses.patching import PatchingResult, PatchingSweep, patch_grid, run_pair

__all__ = ["SITES", "ROLES", "METHODS", "HEAD_MAPS", "FactLensConfig", "FactLensStudy", "SplitHalf", "MapAgreement",
           "position_roles", "fact_lens_study"]

SITES = ("resid_pre", "attn_z")
METHODS = ("gradient", "ig")
HEAD_MAPS = ("patching", "dla")
# token roles of a prompt, from where the clean and corrupt tokens differ (the swapped subject)
ROLES = ("prefix", "subject", "subject_last", "after", "last")


def position_roles(clean_ids: Sequence[int], corrupt_ids: Sequence[int]) -> np.ndarray:
    """[n_pos] index into ROLES of every position: "last" (the final token, where the metric is read),
    "subject_last" (the last position where the prompts differ), "subject" (earlier positions from the first
    differing one on), "prefix" (before it, <bos> included), "after" (between the subject and the last token)."""
    c, k = np.asarray(clean_ids), np.asarray(corrupt_ids)
    if c.shape != k.shape or c.ndim != 1 or c.size == 0:
        raise ShapeError(f"clean and corrupt must be equally long token lists, got {c.shape} and {k.shape}")
    diff = np.flatnonzero(c != k)
    if diff.size == 0:
        raise InputError("clean and corrupt prompts are identical: no subject to patch")
    first, last_diff, n = int(diff[0]), int(diff[-1]), c.size
    pos = np.arange(n)
    roles = np.where(pos < first, 0, np.where(pos < last_diff, 1, np.where(pos == last_diff, 2, 3)))
    roles[n - 1] = 4
    return roles


@dataclass
class FactLensConfig:
    """How `fact_lens_study` measures and aggregates (spec: issue 27 §3; docs/lenses.md).

    sites: which exact grids to patch, a subset of SITES (resid_pre per layer x position, attn_z per head over all
        positions). ig_steps: integrated-gradients points. batch_size: patched copies per forward.
    top_k: heads in a top set. n_boot: bootstrap resamples of the pairs (intervals, top-k frequencies).
    n_splits: random half splits of the pairs (split-half agreement). level: interval level.
    min_span: pairs whose clean - corrupt logit difference is below it (the pair barely moves the metric, so the
        normalised effects divide by ~0) are left out of the patching and attribution aggregates (kept in `pairs`).
    seed: the bootstrap and split seed."""

    sites: list[str] = field(default_factory=lambda: list(SITES))
    ig_steps: int = 8
    batch_size: int = 32
    top_k: int = 10
    n_boot: int = 1000
    n_splits: int = 200
    level: float = 0.95
    min_span: float = 1.0
    seed: int = 0

    def validate(self) -> "FactLensConfig":
        if isinstance(self.sites, str):
            self.sites = [s for s in self.sites.split(",") if s]
        bad = [s for s in self.sites if s not in SITES]
        if bad or not self.sites:
            raise ConfigError(f"sites must be a non-empty subset of {SITES}, got {self.sites}")
        if self.ig_steps < 1 or self.batch_size < 1 or self.top_k < 1 or self.n_boot < 1 or self.n_splits < 1:
            raise ConfigError("ig_steps, batch_size, top_k, n_boot and n_splits must all be >= 1")
        if not 0 < self.level < 1:
            raise ConfigError(f"level must lie in (0, 1), got {self.level}")
        if self.min_span < 0:
            raise ConfigError(f"min_span must be >= 0, got {self.min_span}")
        return self


class SplitHalf(Record):
    """`FactLensStudy.split_half`: map (patching | dla), k, n_splits, n_pairs (included pairs), and over random
    half splits of the pairs the top-k overlap |A ∩ B| / k of the halves' mean maps (overlap_mean, overlap_lo,
    overlap_hi: the 2.5 / 97.5 % quantiles over splits) and their Spearman ρ over heads (rho_mean, rho_lo,
    rho_hi)."""

    KEYS = ("map", "k", "n_splits", "n_pairs", "overlap_mean", "overlap_lo", "overlap_hi", "rho_mean", "rho_lo",
            "rho_hi")


class MapAgreement(Record):
    """`FactLensStudy.map_agreement`: the top-k overlap and Spearman ρ of |mean patching| and |mean DLA| over heads,
    with k, and the overlap a random pair of k-sets would have in expectation (k / n_heads)."""

    KEYS = ("k", "overlap", "rho", "chance_overlap")


@dataclass
class FactLensStudy(Result):
    """Per-pair lens reads of many fact pairs and their aggregates (see the module docstring).

    model: the model's name. config: the FactLensConfig. pairs: one row per pair (`data.fact_pairs.pairs_frame`
        columns plus clean_metric, corrupt_metric, span = clean - corrupt, included = span >= min_span,
        final_rank = the answer's rank in the model's own logits, seconds).
    answer_rank / answer_prob: [n, L] logit-lens rank (0 = top) and probability of the answer at the last position
        after each layer. roles: [n, P] role index per position (ROLES; -1 beyond a pair's length, P = the longest
        pair). resid_patch: [n, L, P] normalised exact resid_pre patching (NaN beyond a pair's length or when
        resid_pre was not swept). resid_attr: [2, n, L, P] the gradient and IG estimates, normalised.
    head_patch: [n, L, H] normalised exact attn_z patching, every position of the head at once; head_attr:
        [2, n, L, H] its estimates (NaN when attn_z was not swept). dla: the DLAResult of all clean prompts (heads
        [n, L, H], in logits). attribution: per pair, site and method, `compare_to_exact`'s row (spearman, pearson,
        max_abs_error, in metric units) and `pair`. n_kv_heads: KV groups (head h reads group h // (H / n_kv))."""

    model: str
    config: FactLensConfig
    pairs: pd.DataFrame
    answer_rank: np.ndarray
    answer_prob: np.ndarray
    roles: np.ndarray
    resid_patch: np.ndarray
    resid_attr: np.ndarray
    head_patch: np.ndarray
    head_attr: np.ndarray
    dla: DLAResult
    attribution: pd.DataFrame
    n_kv_heads: int = 0
    timings: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("answer_rank", "answer_prob", "resid_patch", "resid_attr", "head_patch", "head_attr"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.float64))
        self.roles = np.asarray(self.roles, dtype=np.int64)
        n, L, H = self.head_patch.shape if self.head_patch.ndim == 3 else (-1, -1, -1)
        if n < 1 or len(self.pairs) != n:
            raise ShapeError(f"head_patch must be [n_pairs={len(self.pairs)}, L, H], got {self.head_patch.shape}")
        P = self.roles.shape[1] if self.roles.ndim == 2 else -1
        want = {"answer_rank": (n, L), "answer_prob": (n, L), "roles": (n, P), "resid_patch": (n, L, P),
                "resid_attr": (len(METHODS), n, L, P), "head_attr": (len(METHODS), n, L, H)}
        for name, shape in want.items():
            if getattr(self, name).shape != shape:
                raise ShapeError(f"{name} must be {shape} (n pairs, L layers, P positions, H heads), got "
                                 f"{getattr(self, name).shape}")
        if self.dla.heads.shape != (n, L, H):
            raise ShapeError(f"dla.heads must be [{n}, {L}, {H}], got {self.dla.heads.shape}")

    # ------------------------------------------------------------------ shapes and selections
    @property
    def n_pairs(self) -> int:
        return int(self.head_patch.shape[0])

    @property
    def n_layers(self) -> int:
        return int(self.head_patch.shape[1])

    @property
    def n_heads(self) -> int:
        return int(self.head_patch.shape[2])

    @property
    def included(self) -> np.ndarray:
        """[n] bool: the pairs in the patching and attribution aggregates (span >= min_span)."""
        return self.pairs["included"].to_numpy(dtype=bool)

    def dla_of(self, rows) -> DLAResult:
        """The DLA of the pairs selected by `rows` (a boolean mask or indices), e.g. `study.dla_of(study.included)`."""
        d = self.dla
        sel = np.arange(self.n_pairs)[np.asarray(rows)]
        return DLAResult(d.heads[sel], d.mlp[sel], d.attn_bias[sel], d.embed[sel], d.const[sel], d.total[sel],
                         [d.answers[i] for i in sel] if d.answers else [], [d.wrongs[i] for i in sel] if d.wrongs
                         else [], d.n_kv_heads, d.model)

    def head_values(self, kind: str) -> np.ndarray:
        """[n_included, L, H] per-pair head map: "patching" (normalised attn_z patching) or "dla" (logits)."""
        if kind == "patching":
            return self.head_patch[self.included]
        if kind == "dla":
            return self.dla.heads[self.included]
        raise InputError(f"head map must be one of {HEAD_MAPS}, got {kind!r}")

    def role_values(self) -> np.ndarray:
        """[n_included, L, len(ROLES)] per-pair resid_pre patching averaged over each role's positions (NaN where a
        pair has no position of that role)."""
        x, r = self.resid_patch[self.included], self.roles[self.included]
        out = np.full(x.shape[:2] + (len(ROLES),), np.nan)
        for j in range(len(ROLES)):
            m = (r == j)[:, None, :]                       # [n, 1, P]
            cnt = m.sum(-1)
            s = np.where(m, np.nan_to_num(x), 0.0).sum(-1)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[..., j] = np.where(cnt > 0, s / np.maximum(cnt, 1), np.nan)
        return out

    # ------------------------------------------------------------------ bootstrap over pairs
    def _rng(self, salt: int) -> np.random.Generator:
        return np.random.default_rng([int(self.config.seed), salt])

    def _boot_idx(self, n: int, salt: int = 0) -> np.ndarray:
        from interplab.probes.stats import resample_indices

        return resample_indices(n, int(self.config.n_boot), self._rng(salt))

    def mean_interval(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean, lo, hi) over the first axis (pairs; NaNs skipped) with a percentile bootstrap interval over pairs."""
        x = np.asarray(values, dtype=np.float64)
        if x.shape[0] == 0:
            nan = np.full(x.shape[1:], np.nan)
            return nan, nan, nan
        from interplab.probes.stats import percentile_interval

        with np.errstate(invalid="ignore"), _quiet():
            mean = np.nanmean(x, 0)
            boot = np.nanmean(x[self._boot_idx(x.shape[0])], 1)          # [B, ...]
            lo, hi = percentile_interval(boot, level=self.config.level, skip_nan=True)
        return mean, lo, hi

    # ------------------------------------------------------------------ aggregates
    def rank_per_layer(self) -> pd.DataFrame:
        """Per layer, over every pair: the answer's logit-lens rank at the last position (median, q25, q75, mean),
        the fraction of pairs where it is top-1 and top-10, and its mean probability."""
        r = self.answer_rank
        return pd.DataFrame({"layer": np.arange(self.n_layers), "median": np.median(r, 0),
                             "q25": np.quantile(r, 0.25, 0), "q75": np.quantile(r, 0.75, 0), "mean": r.mean(0),
                             "top1": (r == 0).mean(0), "top10": (r < 10).mean(0),
                             "mean_prob": self.answer_prob.mean(0), "n_pairs": self.n_pairs})

    def role_map(self) -> pd.DataFrame:
        """The mean resid_pre patching map by token role: layer, role, mean, lo, hi, n (pairs with that role)."""
        v = self.role_values()
        mean, lo, hi = self.mean_interval(v)
        n = np.isfinite(v).sum(0)
        L, R = mean.shape
        return pd.DataFrame({"layer": np.repeat(np.arange(L), R), "role": np.tile(ROLES, L), "mean": mean.ravel(),
                             "lo": lo.ravel(), "hi": hi.ravel(), "n": n.ravel()})

    def mean_patching(self, site: str) -> PatchingResult:
        """The mean normalised exact patching map over the included pairs as a `PatchingResult` in normalised units
        (clean_metric 1, corrupt_metric 0, so `.normalized` is the mean): resid_pre by token role ([L, ROLES], the
        roles as its tokens) or attn_z per head ([L, H]); for the lens figures (`patching_figure`)."""
        if site == "resid_pre":
            mean, tokens = self.mean_interval(self.role_values())[0], list(ROLES)
        elif site == "attn_z":
            mean, tokens = self.mean_interval(self.head_values("patching"))[0], []
        else:
            raise InputError(f"site must be one of {SITES}, got {site!r}")
        return PatchingResult(site, mean, np.arange(self.n_layers), tokens, 1.0, 0.0, n_kv_heads=self.n_kv_heads,
                              model=self.model)

    def top_k_frequency(self, kind: str) -> np.ndarray:
        """[L, H] fraction of bootstrap resamples of the pairs in which each head is in the top k by |mean|."""
        x = np.abs(np.nanmean(self.head_values(kind)[self._boot_idx(int(self.included.sum()), 1)], 1))  # [B, L, H]
        k = min(self.config.top_k, self.n_layers * self.n_heads)
        flat = x.reshape(x.shape[0], -1)
        top = np.argpartition(-flat, k - 1, axis=1)[:, :k]
        counts = np.zeros(flat.shape[1])
        np.add.at(counts, top.ravel(), 1)
        return (counts / flat.shape[0]).reshape(self.n_layers, self.n_heads)

    def top_heads(self, kind: str, k: int | None = None) -> pd.DataFrame:
        """The top-k heads of a head map by |mean over pairs|: rank, layer, head, kv_group, mean, lo, hi (bootstrap
        interval) and boot_freq (fraction of resamples in which the head is in the top k)."""
        k = k or self.config.top_k
        mean, lo, hi = self.mean_interval(self.head_values(kind))
        freq = self.top_k_frequency(kind)
        order = np.argsort(-np.abs(np.nan_to_num(mean)).ravel(), kind="stable")[:k]
        layer, head = np.unravel_index(order, mean.shape)
        group = max(1, self.n_heads // max(1, self.n_kv_heads or self.n_heads))
        return pd.DataFrame({"map": kind, "rank": np.arange(1, len(order) + 1), "layer": layer, "head": head,
                             "kv_group": head // group, "mean": mean[layer, head], "lo": lo[layer, head],
                             "hi": hi[layer, head], "boot_freq": freq[layer, head]})

    def split_half(self, kind: str) -> SplitHalf:
        """Agreement of the head map between random halves of the included pairs (see SplitHalf)."""
        from interplab.probes.stats import percentile_interval, spearman, top_k_overlap

        x = self.head_values(kind)
        n, k = x.shape[0], min(self.config.top_k, self.n_layers * self.n_heads)
        rng = self._rng(2)
        ov, rho = [], []
        for _ in range(int(self.config.n_splits) if n >= 2 else 0):
            perm = rng.permutation(n)
            a = np.abs(np.nanmean(x[perm[: n // 2]], 0)).ravel()
            b = np.abs(np.nanmean(x[perm[n // 2: 2 * (n // 2)]], 0)).ravel()
            ov.append(top_k_overlap(a, b, k))
            rho.append(spearman(a, b) if np.ptp(a) > 0 and np.ptp(b) > 0 else np.nan)
        ov_a, rho_a = np.asarray(ov, float), np.asarray(rho, float)

        def stats3(v):
            v = v[np.isfinite(v)]
            if not v.size:
                return (float("nan"),) * 3
            lo, hi = percentile_interval(v, level=self.config.level)
            return float(v.mean()), float(lo), float(hi)
        (om, ol, oh), (rm, rl, rh) = stats3(ov_a), stats3(rho_a)
        return SplitHalf(map=kind, k=k, n_splits=len(ov), n_pairs=n, overlap_mean=om, overlap_lo=ol, overlap_hi=oh,
                         rho_mean=rm, rho_lo=rl, rho_hi=rh)

    def map_agreement(self) -> MapAgreement:
        """Do the patching and DLA head maps name the same heads? (|mean| maps over the included pairs)."""
        from interplab.probes.stats import spearman, top_k_overlap

        a = np.abs(np.nanmean(self.head_values("patching"), 0)).ravel()
        b = np.abs(np.nanmean(self.head_values("dla"), 0)).ravel()
        k = min(self.config.top_k, a.size)
        ov = top_k_overlap(a, b, k)
        rho = spearman(a, b) if np.isfinite(a).all() and np.ptp(a) > 0 and np.ptp(b) > 0 else float("nan")
        return MapAgreement(k=k, overlap=ov, rho=float(rho), chance_overlap=k / a.size)

    def head_agreement(self, external: dict[str, np.ndarray] | None = None) -> pd.DataFrame:
        """How far the head maps name the same heads, with intervals (the atlas's agreement over many pairs).

        Maps: |mean patching| and |mean DLA| over the included pairs (patching only when attn_z was swept) and each
        `external` [L, H] map read as it is (e.g. a Truth-Score map: higher = more truth-tracking). One row per
        pair of maps: Spearman ρ over heads with a percentile bootstrap interval over *pairs* (the study's maps are
        recomputed on each resample; an external map stays fixed: its own uncertainty is not in the interval), a
        two-sided head-permutation p (`stats.spearman_interval`, heads taken as i.i.d.), the top-k
        overlap with its bootstrap interval and the overlap two random k-sets have in expectation
        (k / n_heads); and the reading with the layer partialled out (`depth.depth_partialled`):
        rho_partial, p_partial against heads permuted within their layer, n_eff (heads less
        layers), p_holm (Holm over the rows) and `correction`."""
        from interplab.probes.stats import (holm_adjust, pearson, percentile_interval, rankdata,
                                            spearman_interval)

        L, H = self.n_layers, self.n_heads
        own = [k for k in HEAD_MAPS if k == "dla" or "attn_z" in self.config.sites]
        ext = {}
        for name, m in (external or {}).items():
            m = np.asarray(getattr(m, "scores", m), dtype=np.float64)
            if m.shape != (L, H):
                raise ShapeError(f"external head map {name!r} has shape {m.shape}, the model has ({L}, {H})")
            ext[name] = m.ravel()
        n = int(self.included.sum())
        if n == 0:
            return pd.DataFrame(columns=["map_a", "map_b", "rho", "rho_lo", "rho_hi", "p_perm", "k", "overlap",
                                         "overlap_lo", "overlap_hi", "chance_overlap", "n_pairs",
                                         "rho_partial", "p_partial", "n_eff", "p_holm",
                                         "correction"])
        idx = self._boot_idx(n, 5)
        full, boot = {}, {}
        with np.errstate(invalid="ignore"), _quiet():
            for k in own:
                v = self.head_values(k).reshape(n, L * H)
                full[k] = np.abs(np.nanmean(v, 0))
                boot[k] = np.abs(np.nanmean(v[idx], 1))                      # [B, L*H]
        for name, m in ext.items():
            full[name], boot[name] = m, np.broadcast_to(m, (idx.shape[0], m.size))
        k_top = min(int(self.config.top_k), L * H)
        level = self.config.level

        def top_mask(x):                                                     # [..., L*H] -> bool, True in the top k
            m = np.zeros(x.shape, bool)
            np.put_along_axis(m, np.argsort(-x, axis=-1, kind="stable")[..., :k_top], True, -1)
            return m

        # ranks and top-k sets of every resample once per map (an external map's are those of its one row)
        ranks = {k: rankdata(v[:1]) if k in ext else rankdata(v) for k, v in boot.items()}
        tops = {k: top_mask(v[:1]) if k in ext else top_mask(v) for k, v in boot.items()}
        rows = []
        names = list(full)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                si = spearman_interval(full[a], full[b], B=200, n_perm=int(self.config.n_boot), seed=int(self.config.seed))
                rb = pearson(ranks[a], ranks[b])
                rb = rb[np.isfinite(rb)]
                ov_b = (tops[a] & tops[b]).sum(-1) / k_top
                rho_lo, rho_hi = (percentile_interval(rb, level=level) if rb.size
                                  else (float("nan"), float("nan")))
                ov_lo, ov_hi = percentile_interval(ov_b, level=level)
                rows.append(dict(map_a=a, map_b=b, rho=si.rho, rho_lo=float(rho_lo), rho_hi=float(rho_hi),
                                 p_perm=si.p,
                                 k=k_top, overlap=float((top_mask(full[a]) & top_mask(full[b])).sum()) / k_top,
                                 overlap_lo=float(ov_lo), overlap_hi=float(ov_hi),
                                 chance_overlap=k_top / (L * H), n_pairs=n,
                                 **_partialled(full[a], full[b], L, H, self.config)))
        out = pd.DataFrame(rows)
        if len(out):  # the pairs of maps are read together: their p-values are corrected
            p = out["p_partial"].to_numpy(float)
            out["p_holm"] = holm_adjust(p)
            out["correction"] = f"holm over {int(np.isfinite(p).sum())} pairs"
        return out

    def attribution_summary(self) -> pd.DataFrame:
        """Per site and method, over the included pairs: the median per-pair Spearman ρ of attribution vs exact
        patching with a percentile bootstrap interval of the median (lo, hi), the mean with its bootstrap interval
        (`stats.intervals`), and the median Pearson r."""
        from interplab.probes.stats import intervals, percentile_interval

        keep = set(np.flatnonzero(self.included).tolist())
        df = self.attribution[self.attribution["pair"].isin(keep)]
        rows = []
        for (site, method), g in df.groupby(["site", "method"], sort=False):
            rho = g["spearman"].to_numpy(float)
            rho = rho[np.isfinite(rho)]
            if rho.size:
                med = np.median(rho[self._boot_idx(rho.size, 3)], 1)
                lo, hi = map(float, percentile_interval(med, level=self.config.level))
            else:
                lo = hi = float("nan")
            iv = intervals(rho, method="bootstrap", level=self.config.level, B=int(self.config.n_boot),
                           seed=int(self.config.seed))
            rows.append(dict(site=site, method=method, n_pairs=int(rho.size),
                             median=float(np.median(rho)) if rho.size else float("nan"), lo=lo, hi=hi,
                             mean=iv.mean, mean_lo=iv.lo, mean_hi=iv.hi,
                             pearson_median=float(np.nanmedian(g["pearson"])) if len(g) else float("nan")))
        return pd.DataFrame(rows)

    def summary(self) -> dict:
        """A JSON-ready digest: pair counts, metrics, final ranks, top heads, agreement and timings."""
        inc = self.included
        out = {"model": self.model, "n_pairs": self.n_pairs, "n_included": int(inc.sum()),
               "min_span": self.config.min_span, "relations": self.pairs.get("relation", pd.Series(dtype=str))
               .value_counts().to_dict(), "median_clean_metric": float(self.pairs["clean_metric"].median()),
               "median_corrupt_metric": float(self.pairs["corrupt_metric"].median()),
               "final_top1": float((self.pairs["final_rank"] == 0).mean()), "sites": list(self.config.sites),
               "top_k": self.config.top_k, **{f"{k}_s": v for k, v in self.timings.items()}}
        if inc.sum() >= 1:
            for kind in HEAD_MAPS:
                if kind == "patching" and "attn_z" not in self.config.sites:
                    continue
                top = self.top_heads(kind)
                out[f"top_heads_{kind}"] = [dict(layer=int(r.layer), head=int(r.head), mean=float(r.mean),
                                                 boot_freq=float(r.boot_freq)) for r in top.itertuples()]
                out[f"split_half_{kind}"] = dict(self.split_half(kind))
            if "attn_z" in self.config.sites:
                out["patching_vs_dla"] = dict(self.map_agreement())
            out["attribution"] = self.attribution_summary().to_dict(orient="records")
        return out

    def to_frame(self) -> pd.DataFrame:
        """One row per head: layer, head, kv_group, mean patching and DLA over the included pairs with bootstrap
        intervals, and each map's top-k bootstrap frequency."""
        L, H = self.n_layers, self.n_heads
        group = max(1, H // max(1, self.n_kv_heads or H))
        data = {"layer": np.repeat(np.arange(L), H), "head": np.tile(np.arange(H), L),
                "kv_group": np.tile(np.arange(H) // group, L)}
        for kind in HEAD_MAPS:
            swept = kind == "dla" or "attn_z" in self.config.sites
            mean, lo, hi = self.mean_interval(self.head_values(kind))
            data.update({f"{kind}_mean": mean.ravel(), f"{kind}_lo": lo.ravel(), f"{kind}_hi": hi.ravel(),
                         f"{kind}_top{self.config.top_k}_freq": (self.top_k_frequency(kind).ravel()
                                                                 if self.included.any() and swept else np.nan)})
        return pd.DataFrame(data)


def _partialled(a: np.ndarray, b: np.ndarray, L: int, H: int, cfg: FactLensConfig) -> dict:
    """The depth-partialled columns of one `head_agreement` row (maps flattened [L*H])."""
    from interplab.probes.lenses.depth import depth_partialled

    t = depth_partialled("layer x head", a.reshape(L, H), b.reshape(L, H), n_perm=int(cfg.n_boot),
                         seed=int(cfg.seed))
    return {"rho_partial": t.rho_partial, "p_partial": t.p, "n_eff": t.n_eff}


class _quiet:
    """Silence numpy's "mean of empty slice" warnings: a role a pair lacks is NaN by design."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._w.__exit__(*exc)


def _pair_reads(model, pair, cfg: FactLensConfig, edits) -> dict:
    """Every per-pair read of `fact_lens_study` for one pair (one shared clean / corrupt capture)."""
    L, H = model.n_layers, model.n_heads
    layers = list(range(L))
    c, k = list(pair.clean_ids), list(pair.corrupt_ids)
    metric = logit_diff_metric(int(pair.answer_id), int(pair.wrong_id))
    sites = [f"{kind}.{layer}" for kind in cfg.sites for layer in layers]
    capture = sorted(set(sites) | {"resid_pre.0"})
    c_cache, k_cache, m_clean, m_corrupt = run_pair(model, PromptPair(c, k, int(pair.answer_id), int(pair.wrong_id)),
                                                    capture, metric, edits)
    span = m_clean - m_corrupt
    tokens = token_strings(model, k)
    P = len(c)
    out = {"clean_metric": m_clean, "corrupt_metric": m_corrupt,
           "resid": np.full((L, P), np.nan), "heads": np.full((L, H), np.nan),
           "resid_attr": np.full((len(METHODS), L, P), np.nan), "heads_attr": np.full((len(METHODS), L, H), np.nan),
           "attribution": []}
    exact: dict[str, PatchingResult] = {}
    src = {s: c_cache[s] for s in sites}
    if "resid_pre" in cfg.sites:
        v = patch_grid(model, k, src, "resid_pre", layers, metric, per_position=True, edits=edits,
                       batch_size=cfg.batch_size)
        exact["resid_pre"] = PatchingResult("resid_pre", v, np.array(layers), tokens, m_clean, m_corrupt,
                                            n_kv_heads=model.n_kv_heads, model=model.name)
    if "attn_z" in cfg.sites:
        v = patch_grid(model, k, src, "attn_z", layers, metric, per_position=False, edits=edits,
                       batch_size=cfg.batch_size)
        exact["attn_z"] = PatchingResult("attn_z", v, np.array(layers), tokens, m_clean, m_corrupt,
                                         n_kv_heads=model.n_kv_heads, model=model.name)
    for kind, r in exact.items():
        out["resid" if kind == "resid_pre" else "heads"] = r.normalized
    for j, method in enumerate(METHODS):
        est = attribution_grid(model, k, {s: k_cache[s] for s in capture}, {s: c_cache[s] for s in capture}, sites,
                               metric, method=method, ig_steps=cfg.ig_steps, edits=edits)
        approx = {}
        for kind in cfg.sites:
            grid = torch.stack([est[f"{kind}.{layer}"] for layer in layers]).numpy()   # [L, P] or [L, P, H]
            if kind == "attn_z":
                grid = grid.sum(1)            # every position at once: first order, the sum over positions
            approx[kind] = PatchingResult(kind, m_corrupt + grid, np.array(layers), tokens, m_clean, m_corrupt,
                                          method=method, n_kv_heads=model.n_kv_heads, model=model.name)
            out["resid_attr" if kind == "resid_pre" else "heads_attr"][j] = approx[kind].normalized
        out["attribution"].append(compare_to_exact(
            PatchingSweep(approx, token_strings(model, c), tokens, pair.answer, pair.wrong),
            PatchingSweep(exact, token_strings(model, c), tokens, pair.answer, pair.wrong)))
    ll = logit_lens(model, c, top_k=1, target=int(pair.answer_id), edits=edits)
    out["rank"], out["prob"] = ll.target_rank[:, -1], ll.target_prob[:, -1]
    out["span"] = span
    return out


def fact_lens_study(model, pairs: Sequence, config: FactLensConfig | None = None, *, edits=None, progress=None,
                    dla_batch_size: int = 16, **overrides) -> FactLensStudy:
    """Run every lens of the module docstring on each pair and aggregate over pairs.

    pairs: `interplab.data.fact_pairs.FactPair`s (token ids, answer_id, wrong_id), e.g. from `fact_pairs(
    model.tokenizer, known=...)` or `pairs_from_rows`. config / overrides: `FactLensConfig` fields. edits: applied
    underneath every forward, as in every lens. progress: called as progress(done, total) after each pair."""
    from interplab.data.fact_pairs import pairs_frame

    cfg = dataclasses.replace(config or FactLensConfig(), **overrides).validate()
    pairs = list(pairs)
    if not pairs:
        raise InputError("no pairs given")
    for p in pairs:
        if len(p.clean_ids) != len(p.corrupt_ids):
            raise InputError(f"pair {p.clean!r} / {p.corrupt!r}: clean and corrupt must have the same token length")
    n, L, H = len(pairs), model.n_layers, model.n_heads
    P = max(len(p.clean_ids) for p in pairs)
    roles = np.full((n, P), -1, np.int64)
    resid = np.full((n, L, P), np.nan)
    resid_attr = np.full((len(METHODS), n, L, P), np.nan)
    heads = np.full((n, L, H), np.nan)
    heads_attr = np.full((len(METHODS), n, L, H), np.nan)
    rank, prob = np.zeros((n, L)), np.zeros((n, L))
    frame = pairs_frame(pairs)
    cols: dict[str, list] = {"clean_metric": [], "corrupt_metric": [], "seconds": []}
    tables = []
    t_all = time.perf_counter()
    for i, p in enumerate(pairs):
        t0 = time.perf_counter()
        r = _pair_reads(model, p, cfg, edits)
        m = len(p.clean_ids)
        roles[i, :m] = position_roles(p.clean_ids, p.corrupt_ids)
        resid[i, :, :m], resid_attr[:, i, :, :m] = r["resid"], r["resid_attr"]
        heads[i], heads_attr[:, i] = r["heads"], r["heads_attr"]
        rank[i], prob[i] = r["rank"], r["prob"]
        for t in r["attribution"]:
            tables.append(t.assign(pair=i))
        cols["clean_metric"].append(r["clean_metric"])
        cols["corrupt_metric"].append(r["corrupt_metric"])
        cols["seconds"].append(time.perf_counter() - t0)
        if progress is not None:
            progress(i + 1, n)
    t_pairs = time.perf_counter() - t_all
    t0 = time.perf_counter()
    dla = _batched_dla(model, pairs, edits, dla_batch_size)
    t_dla = time.perf_counter() - t0
    for key, v in cols.items():
        frame[key] = v
    frame["span"] = frame["clean_metric"] - frame["corrupt_metric"]
    frame["included"] = frame["span"] >= cfg.min_span
    frame["final_rank"] = rank[:, -1].astype(int)
    attribution = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(
        columns=["site", "method", "n_cells", "spearman", "pearson", "max_abs_error", "pair"])
    return FactLensStudy(model=str(model.name), config=cfg, pairs=frame, answer_rank=rank, answer_prob=prob,
                         roles=roles, resid_patch=resid, resid_attr=resid_attr, head_patch=heads,
                         head_attr=heads_attr, dla=dla, attribution=attribution, n_kv_heads=int(model.n_kv_heads),
                         timings={"pairs": t_pairs, "dla": t_dla})


def _batched_dla(model, pairs, edits, batch_size: int) -> DLAResult:
    """DLA of every clean prompt (answer - wrong), `batch_size` prompts per left-padded forward, as one result."""
    parts = []
    for s in range(0, len(pairs), batch_size):
        chunk = pairs[s:s + batch_size]
        parts.append(direct_logit_attribution(model, [list(p.clean_ids) for p in chunk],
                                              [int(p.answer_id) for p in chunk], [int(p.wrong_id) for p in chunk],
                                              edits=edits))
    cat = {f: np.concatenate([getattr(d, f) for d in parts]) for f in ("heads", "mlp", "attn_bias", "embed", "const",
                                                                        "total")}
    return DLAResult(**cat, answers=sum((d.answers for d in parts), []), wrongs=sum((d.wrongs for d in parts), []),
                     n_kv_heads=parts[0].n_kv_heads, model=parts[0].model)
