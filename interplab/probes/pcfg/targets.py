"""Probe targets: exact parse quantities per (sequence, position[, span start]) from the grammar (spec §2.6)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from interplab.grammar import PCFG, prefix, prefix_span_posteriors, span_marginals

__all__ = ["PROBE_TARGETS", "ProbeData", "build_targets", "bucket_label"]

PROBE_TARGETS = {
    "span_posterior": ("span", "r2", "P(A spans (i,t] | w≤t) over non-auxiliary A (prefix-conditional, exact)"),
    "inside": ("span", "r2", "normalised inside vector softmax_A log β[A,i,t] of spans ending at t"),
    "gold_label": ("span", "acc", "label of the gold constituent (i,t] (longest in the bucket ending at t)"),
    "marginal": ("span", "r2", "non-causal control: full-sentence span marginal μ(A,i,t)"),
    "pending": ("position", "r2", "pending-demand summary q_t = F_t / ΣF_t"),
    "next_token": ("position", "r2", "grammar next-token distribution p_G(·|w≤t) (V terminals + EOS)"),
}


def _bucket_of(ell: int) -> int:
    return int(math.floor(math.log2(ell)))


def bucket_label(k: int) -> str:
    lo, hi = 2 ** k, 2 ** (k + 1) - 1
    return str(lo) if lo == hi else f"{lo}-{hi}"


@dataclass
class ProbeData:
    """Examples for one target: (row b, position t, start i or -1), target matrix, bucket id, token at t."""

    b: np.ndarray
    t: np.ndarray
    i: np.ndarray
    y: np.ndarray
    bucket: np.ndarray
    kind: str  # "r2" | "acc"
    tok: np.ndarray


def _cap(bucket: np.ndarray, cap: int, rng) -> np.ndarray:
    """Indices kept: at most ``cap`` per bucket (random, sorted), buckets in increasing order."""
    sel = []
    for k in np.unique(bucket):
        idx = np.nonzero(bucket == k)[0]
        if len(idx) > cap:
            idx = rng.choice(idx, cap, replace=False)
        sel.append(np.sort(idx))
    return np.concatenate(sel) if sel else np.zeros(0, int)


def build_targets(g: PCFG, toks, lengths, trees, targets, *, cap_per_bucket: int, rng) -> dict[str, ProbeData]:
    """{target: ProbeData} for the requested keys of `PROBE_TARGETS` (``rng`` draws the per-bucket caps)."""
    g64 = g.to(torch.float64)
    pre = prefix(g64, toks, lengths)
    tok_np = toks.numpy()

    def tokat(bb, tt):
        return np.where(tt > 0, tok_np[bb, np.maximum(tt - 1, 0)], g.V + 1)  # BOS id at t = 0

    out: dict[str, ProbeData] = {}
    if any(PROBE_TARGETS[t][0] == "span" for t in targets):
        out.update(_span_targets(g, g64, pre, toks, lengths, targets, cap_per_bucket, rng, tokat))
        if "gold_label" in targets:
            out["gold_label"] = _gold_labels(g, trees, cap_per_bucket, rng, tokat)
    if any(PROBE_TARGETS[t][0] == "position" for t in targets):
        out.update(_position_targets(g, pre, lengths, targets, cap_per_bucket, rng, tokat))
    return out


def _span_targets(g, g64, pre, toks, lengths, targets, cap, rng, tokat) -> dict[str, ProbeData]:
    keep_nt = torch.tensor(~g.auxiliary)
    post = prefix_span_posteriors(g64, toks, lengths, pre=pre).exp()[..., keep_nt]  # [B, i, t, A]
    dense = pre.chart.dense()[..., keep_nt]  # log β [B, i, j, A]
    mu = span_marginals(g64, toks, lengths)[..., keep_nt] if "marginal" in targets else None
    bi, ii, ti = torch.nonzero(post.sum(-1) > 1e-3, as_tuple=True)  # possible constituents (i, t]
    ell = (ti - ii).numpy()
    bk = np.array([_bucket_of(x) for x in ell])
    sel = _cap(bk, cap, rng)
    bs, is_, ts = bi.numpy()[sel], ii.numpy()[sel], ti.numpy()[sel]
    out = {}
    if "span_posterior" in targets:
        out["span_posterior"] = ProbeData(bs, ts, is_, post[bs, is_, ts].numpy(), bk[sel], "r2", tokat(bs, ts))
    if "inside" in targets:
        lb = dense[bs, is_, ts]
        y = torch.softmax(torch.where(torch.isfinite(lb), lb, torch.full_like(lb, -1e30)), -1).numpy()
        out["inside"] = ProbeData(bs, ts, is_, y, bk[sel], "r2", tokat(bs, ts))
    if "marginal" in targets:
        # full-sentence marginals are defined for t <= length only (all selected spans satisfy it)
        out["marginal"] = ProbeData(bs, ts, is_, mu[bs, is_, ts].numpy(), bk[sel], "r2", tokat(bs, ts))
    return out


def _gold_labels(g, trees, cap, rng, tokat) -> ProbeData:
    """Per (end t, bucket): the label of the longest gold constituent ending at t in that bucket."""
    rows = []
    for b, tr in enumerate(trees):
        best: dict = {}
        for s, e, lab, _ in tr.spans:
            if e < 0 or g.auxiliary[lab] or e - s < 1:
                continue
            k = _bucket_of(int(e - s))
            key = (int(e), k)
            if key not in best or (e - s) > best[key][1] - best[key][0]:
                best[key] = (int(s), int(e), int(lab))
        for (e, k), (s, _, lab) in best.items():
            rows.append((b, e, s, lab, k))
    rows = np.array(rows, dtype=np.int64).reshape(-1, 5)
    if len(rows):
        rows = rows[_cap(rows[:, 4], cap, rng)]
    return ProbeData(rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4], "acc", tokat(rows[:, 0], rows[:, 1]))


def _position_targets(g, pre, lengths, targets, cap, rng, tokat) -> dict[str, ProbeData]:
    L = lengths.numpy()
    bt = [(b, t) for b in range(len(L)) for t in range(1, int(L[b]) + 1)]  # BOS excluded from regression targets
    bt = np.array(bt, dtype=np.int64).reshape(-1, 2)
    if "pending" in targets:  # nothing pending after a complete fixed-length sentence: drop those positions
        alive = torch.isfinite(pre.log_F[bt[:, 0], bt[:, 1]]).any(-1).numpy()
        bt = bt[alive]
    if len(bt) > 4 * cap:
        bt = bt[np.sort(rng.choice(len(bt), 4 * cap, replace=False))]
    bb, tt = bt[:, 0], bt[:, 1]
    out = {}
    if "pending" in targets:
        F = pre.log_F[bb, tt]
        out["pending"] = ProbeData(bb, tt, -np.ones_like(tt), torch.softmax(F, -1).numpy(), np.full(len(tt), -1),
                                   "r2", tokat(bb, tt))
    if "next_token" in targets:
        nt = pre.next_token_logprobs()[bb, tt].exp().numpy()
        out["next_token"] = ProbeData(bb, tt, -np.ones_like(tt), nt, np.full(len(tt), -1), "r2", tokat(bb, tt))
    return out
