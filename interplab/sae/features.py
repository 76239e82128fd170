"""Feature statistics for the feature browser, computed from per-sample (FAST) forwards, so top-activating
contexts never contain another sample's tokens (no packing leakage; SAEDashboard #46).

One streaming pass over the samples keeps, per feature: activation frequency (density), max and mean activation,
the top-k samples by per-sample max activation (paper App. E: "top-5 sentences by max activation"), and a histogram
of log10(activation) over active tokens (fixed edges, so no second pass is needed). A second pass re-runs only the
unique top samples to store each top context's per-token activation trace. Logit effects are W_dec @ W_U (the
final norm is not applied: a direction-level approximation, as in sae-dashboard). Special-token ranking follows
the paper's App. F: for each special token id and feature, the per-sample max activation over that token's
positions, averaged over the samples containing the token."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from interplab.core.errors import ConfigError, InputError, ShapeError
from interplab.core.result import Result


@dataclass
class FeatureStatsConfig:
    """k: top contexts kept per feature. hist_lo, hist_hi, n_bins: log10(activation) histogram edges.
    n_logit_tokens: top/bottom tokens kept per feature for logit effects. special_token_ids: ids ranked for the
    special-token table (None -> the tokenizer's special tokens plus single-token role names). truncate, micro_batch:
    FAST provider settings. site: None -> the SAE's site."""

    k: int = 5
    hist_lo: float = -4.0
    hist_hi: float = 3.0
    n_bins: int = 35
    n_logit_tokens: int = 10
    special_token_ids: tuple[int, ...] | None = None
    truncate: int | None = 8192
    micro_batch: int = 16
    site: str | None = None


@dataclass
class FeatureStats(Result):
    """Per-feature statistics of one SAE on one set of samples. Arrays are numpy, first axis = feature."""

    config: FeatureStatsConfig
    density: np.ndarray          # [F] fraction of tokens where the feature is active
    max_act: np.ndarray          # [F]
    mean_act: np.ndarray         # [F] mean over active tokens (0 if never active)
    top_values: np.ndarray       # [F, k] per-sample max activation of the top samples (descending; -inf if none)
    top_samples: np.ndarray      # [F, k] sample index (-1 if none)
    top_positions: np.ndarray    # [F, k] argmax position inside the sample
    top_traces: np.ndarray       # [F, k, Lmax] per-token activation of the feature over the sample (NaN padded)
    hist_counts: np.ndarray      # [F, n_bins] counts of log10(activation) over active tokens
    hist_edges: np.ndarray       # [n_bins + 1]
    logit_top_ids: np.ndarray    # [F, n] tokens most promoted by W_dec[f] @ W_U^T
    logit_top_vals: np.ndarray
    logit_bottom_ids: np.ndarray
    logit_bottom_vals: np.ndarray
    special_ids: np.ndarray      # [S]
    special_scores: np.ndarray   # [S, F] mean over samples of the per-sample max activation on that token
    special_counts: np.ndarray   # [S] number of samples containing the token (tokens with 0 are not ranked)
    samples: list[list[int]] = field(default_factory=list)
    token_strs: dict[int, str] = field(default_factory=dict)
    n_tokens: int = 0
    sae_path: str | None = None
    model_name: str | None = None
    site: str | None = None

    def __post_init__(self):
        # token ids come back from JSON as strings
        self.token_strs = {int(k): v for k, v in self.token_strs.items()}

    @property
    def d_sae(self) -> int:
        return int(self.density.shape[0])

    def to_frame(self):
        import pandas as pd

        tok = lambda ids: " ".join(self.token_strs.get(int(i), str(int(i))) for i in ids)
        return pd.DataFrame({
            "feature": np.arange(self.d_sae), "density": self.density,
            "log10_density": np.log10(np.maximum(self.density, 1e-10)), "max_act": self.max_act,
            "mean_act": self.mean_act, "dead": self.density == 0,
            "top_logits": [tok(r[:5]) for r in self.logit_top_ids],
        })

    def special_ranking(self, top: int = 5):
        """Tidy table: for each special token, its `top` features by mean per-sample max activation."""
        import pandas as pd

        rows = []
        for si, t in enumerate(self.special_ids):
            if self.special_counts[si] == 0:
                continue
            order = np.argsort(-self.special_scores[si])[:top]
            for rank, f in enumerate(order):
                rows.append({"token_id": int(t), "token": self.token_strs.get(int(t), str(int(t))),
                             "rank": rank + 1, "feature": int(f), "score": float(self.special_scores[si, f])})
        return pd.DataFrame(rows)

    def contexts(self, feature: int) -> list[dict]:
        """Top contexts of a feature: tokens (strings), per-token activations, max value, sample index."""
        if not 0 <= feature < self.d_sae:
            raise InputError(f"feature {feature} out of range (d_sae={self.d_sae})")
        out = []
        for j in range(self.top_samples.shape[1]):
            s = int(self.top_samples[feature, j])
            if s < 0 or not np.isfinite(self.top_values[feature, j]) or self.top_values[feature, j] <= 0:
                continue
            ids = self.samples[s]
            acts = self.top_traces[feature, j, :len(ids)]
            out.append({"sample": s, "max": float(self.top_values[feature, j]),
                        "position": int(self.top_positions[feature, j]), "token_ids": list(ids),
                        "tokens": [self.token_strs.get(int(i), str(int(i))) for i in ids],
                        "acts": [float(a) for a in acts]})
        return out


def logit_effects(sae: Any, W_U: torch.Tensor, n: int = 10) -> tuple[torch.Tensor, ...]:
    """(top_ids, top_vals, bottom_ids, bottom_vals), each [F, n], of W_dec @ W_U. W_U: [d, V] (`model.unembedding()`)."""
    if W_U.ndim != 2 or W_U.shape[0] != sae.cfg.d_in:
        raise ShapeError(f"W_U must be [{sae.cfg.d_in}, V], got {tuple(W_U.shape)}")
    eff = sae.W_dec.detach().float() @ W_U.detach().float().to(sae.W_dec.device)
    n = min(n, eff.shape[1])
    tv, ti = eff.topk(n, dim=1)
    bv, bi = (-eff).topk(n, dim=1)
    return ti, tv, bi, -bv


def _encode(sae_obj: Any, acts: torch.Tensor) -> torch.Tensor:
    """Feature activations [L, F] of one sequence's activations; an SAE trained without the massive positions
    (`exclude_massive` in its metadata) gets 0 there: those positions were never its input, and a ~100x-norm
    attention sink would otherwise top every feature's contexts (SAEDashboard #46, the packed-BOS analogue)."""
    from interplab.sae.sites import sae_exclude_massive

    f = sae_obj.encode(acts.to(sae_obj.W_dec.device, sae_obj.W_dec.dtype)).float().cpu()
    factor = sae_exclude_massive(sae_obj)
    if factor and acts.shape[0]:
        from interplab.core.scale import massive_mask

        f[massive_mask(acts, factor).cpu()] = 0.0
    return f


def _top_traces(model: Any, sae_obj: Any, samples: list, top_s: torch.Tensor, top_v: torch.Tensor, site: str,
                micro_batch: int) -> torch.Tensor:
    """[F, k, Lmax] per-token activations over each top context: a second pass over the unique top samples only."""
    from interplab.sae.providers import fast_provider

    F, k = top_s.shape
    Lmax = max(len(s) for s in samples)
    traces = torch.full((F, k, Lmax), float("nan"))
    valid = (top_s >= 0) & (top_v > 0)
    uniq = sorted(set(top_s[valid].tolist()))
    if uniq:
        sub = fast_provider(model, [samples[i] for i in uniq], site=site, truncate=None, micro_batch=micro_batch,
                            shuffle=False)
        with torch.no_grad():
            for ch in sub.iter_chunks():
                s_global = uniq[int(ch.sample[0])]
                f = _encode(sae_obj, ch.acts)
                where = (top_s == s_global) & valid  # [F, k]
                fi, ji = where.nonzero(as_tuple=True)
                traces[fi, ji, :f.shape[0]] = f[:, fi].T
    return traces


def feature_statistics(model: Any, sae: Any, samples: Sequence[Any], config: FeatureStatsConfig | None = None,
                       progress=None, **kw: Any) -> FeatureStats:
    """Compute `FeatureStats` of an SAE (object or SAELens directory) over dialogues / texts, one per forward."""
    from interplab.sae.sites import load_sae, sae_site
    from interplab.sae.providers import fast_provider
    from interplab.sae.steering import template_token_ids

    cfg = config or FeatureStatsConfig(**kw)
    if cfg.k <= 0 or cfg.n_bins <= 0 or cfg.hist_hi <= cfg.hist_lo:
        raise ConfigError("k and n_bins must be positive and hist_hi > hist_lo")
    sae_obj = load_sae(sae)
    site = sae_site(sae_obj, cfg.site)
    F = int(sae_obj.cfg.d_sae)
    k = cfg.k
    prov = fast_provider(model, samples, site=site, truncate=cfg.truncate, micro_batch=cfg.micro_batch,
                         shuffle=False)
    N = len(prov.samples)
    special = list(cfg.special_token_ids) if cfg.special_token_ids is not None else template_token_ids(model.tokenizer)
    sp = torch.tensor(special, dtype=torch.long) if special else torch.zeros(0, dtype=torch.long)
    edges = torch.linspace(cfg.hist_lo, cfg.hist_hi, cfg.n_bins + 1)

    fire = torch.zeros(F, dtype=torch.float64)
    act_sum = torch.zeros(F, dtype=torch.float64)
    mx = torch.zeros(F)
    top_v = torch.full((F, k), -float("inf"))
    top_s = torch.full((F, k), -1, dtype=torch.long)
    top_p = torch.zeros((F, k), dtype=torch.long)
    hist = torch.zeros(F, cfg.n_bins, dtype=torch.float64)
    sp_sum = torch.zeros(len(special), F, dtype=torch.float64)
    sp_cnt = torch.zeros(len(special), dtype=torch.float64)
    n_tok = 0
    sae_obj.eval()
    done = 0
    with torch.no_grad():
        for ch in prov.iter_chunks():
            f = _encode(sae_obj, ch.acts)
            L = f.shape[0]
            n_tok += L
            active = f > 0
            fire += active.sum(0).double()
            act_sum += f.clamp_min(0).sum(0).double()
            smax, sarg = f.max(0)
            mx = torch.maximum(mx, smax)
            # streaming top-k per feature by per-sample max
            cand_v = torch.cat([top_v, smax[:, None]], 1)
            cand_s = torch.cat([top_s, torch.full((F, 1), int(ch.sample[0]))], 1)
            cand_p = torch.cat([top_p, sarg[:, None]], 1)
            v, o = cand_v.topk(k, dim=1)
            top_v, top_s, top_p = v, cand_s.gather(1, o), cand_p.gather(1, o)
            # log10 histogram of active values (values outside the edges go to the end bins)
            lv = torch.log10(f.clamp_min(1e-30))
            b = torch.bucketize(lv, edges[1:-1])  # [L, F] bin index 0..n_bins-1
            hist.scatter_add_(1, b.T, active.T.double())
            if len(special):
                m = ch.token_ids[:, None] == sp[None, :]  # [L, S]
                has = m.any(0)
                if has.any():
                    vals = torch.where(m.T[:, :, None], f[None, :, :], torch.full((), -float("inf")))  # [S, L, F]
                    smx = vals.max(1).values  # [S, F]
                    sp_sum[has] += smx[has].double()
                    sp_cnt[has] += 1
            done += 1
            if progress is not None:
                progress(done, N)
    traces = _top_traces(model, sae_obj, prov.samples, top_s, top_v, site, cfg.micro_batch)
    ti, tv, bi, bv = logit_effects(sae_obj, model.unembedding()[0], cfg.n_logit_tokens)
    tok = model.tokenizer
    ids_needed = set(int(t) for s in prov.samples for t in s) | set(ti.flatten().tolist()) | set(bi.flatten().tolist()) | set(special)
    # decoded text, not the vocabulary entry: a byte-level BPE entry reads 'Ġword' / 'Ċ' for ' word' / newline
    token_strs = {i: tok.decode([i]) for i in ids_needed}
    return FeatureStats(
        config=cfg, density=(fire / max(n_tok, 1)).numpy(), max_act=mx.numpy(),
        mean_act=(act_sum / fire.clamp_min(1)).float().numpy(), top_values=top_v.numpy(),
        top_samples=top_s.numpy(), top_positions=top_p.numpy(), top_traces=traces.numpy(),
        hist_counts=hist.float().numpy(), hist_edges=edges.numpy(), logit_top_ids=ti.cpu().numpy(),
        logit_top_vals=tv.cpu().numpy(), logit_bottom_ids=bi.cpu().numpy(), logit_bottom_vals=bv.cpu().numpy(),
        special_ids=np.array(special, dtype=np.int64),
        special_scores=(sp_sum / sp_cnt.clamp_min(1)[:, None]).float().numpy(), special_counts=sp_cnt.numpy(),
        samples=[list(map(int, s)) for s in prov.samples], token_strs=token_strs, n_tokens=n_tok,
        sae_path=str(sae) if isinstance(sae, (str, Path)) else None, model_name=getattr(model, "name", None),
        site=site)
