"""Rank analyses of a target (hyperfitted) model against its base (spec methods/hyperfit_geometry.md §2.3, §4.4).

rank_t(v) = 1 + #{u : z_t,u > z_t,v} with ties broken by lower token id first. Teacher-forced top-1 agreement; Kendall
tau-b between base and target logits on the base's (and the target's) top-50 tokens of each position; per-token rank
change Delta r_t(v) = rank_base,t(v) - rank_target,t(v) (> 0: the target promotes v), its mean and its standard
deviation across contexts (context dependence); along the target's greedy generations, the base model's rank of every
chosen token given the same prefix, binned {1, 2-10, 11-200, >200}; override rate = P(rank > 1).

* Static vocabulary reweighting. delta_v = mean_t(l_target,t,v - l_base,t,v) on log-softmax values l for the top-K
  tokens by mean rank change, 0 elsewhere (apply with interplab.interventions.logit_bias.StaticLogitBias).
* Logit lens on the last layers: ln_final(resid_post_l) W_U (+ b_U) of the target model at each overriding step; the
  first layer at which the chosen token enters the top-k.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from interplab.core.errors import ConfigError, DataError, InputError, ShapeError
from interplab.core.result import Result
from interplab.probes.hyperfit.inputs import context_prompts, generate_continuations, teacher_forced_logits

__all__ = [
    "token_ranks", "full_ranks", "kendall_tau_b", "topk_kendall_tau", "rank_bins", "RANK_BINS",
    "TeacherForcedComparison", "compare_teacher_forced", "static_delta", "logit_lens", "base_ranks_of",
    "RankReorderingConfig", "RankReorderingResult", "rank_reordering", "base_scores_of", "text_nll",
    "DELTA_REFERENCES",
]

RANK_BINS = ("1", "2-10", "11-200", ">200")


def token_ranks(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Rank (1 = top) of token ids[...] under logits[..., V]; ties broken by lower token id first."""
    if logits.shape[:-1] != ids.shape:
        raise ShapeError(f"ids shape {tuple(ids.shape)} must equal logits.shape[:-1] {tuple(logits.shape[:-1])}")
    zv = logits.gather(-1, ids[..., None].long())
    vocab = torch.arange(logits.shape[-1], device=logits.device)
    higher = (logits > zv).sum(-1)
    tied_before = ((logits == zv) & (vocab < ids[..., None])).sum(-1)
    return 1 + higher + tied_before


def full_ranks(logits: torch.Tensor) -> torch.Tensor:
    """Ranks of every token: [..., V] long, 1 = argmax, ties broken by lower token id first."""
    order = torch.sort(logits, dim=-1, descending=True, stable=True).indices
    ranks = torch.empty_like(order)
    ar = torch.arange(1, logits.shape[-1] + 1, device=logits.device).expand_as(order)
    ranks.scatter_(-1, order, ar)
    return ranks


def kendall_tau_b(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Kendall tau-b between a[..., n] and b[..., n] along the last axis (scipy.stats.kendalltau's default)."""
    if a.shape != b.shape:
        raise ShapeError(f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    n = a.shape[-1]
    sa = torch.sign(a[..., :, None] - a[..., None, :])
    sb = torch.sign(b[..., :, None] - b[..., None, :])
    iu = torch.triu_indices(n, n, 1, device=a.device)
    sa, sb = sa[..., iu[0], iu[1]], sb[..., iu[0], iu[1]]
    num = (sa * sb).sum(-1).to(torch.float64)
    den = ((sa != 0).sum(-1).to(torch.float64) * (sb != 0).sum(-1).to(torch.float64)).sqrt()
    return torch.where(den > 0, num / den.clamp_min(1e-300), torch.full_like(num, float("nan")))


def topk_kendall_tau(z_ref: torch.Tensor, z_other: torch.Tensor, k: int = 50) -> torch.Tensor:
    """Per-position Kendall tau-b between two logit vectors restricted to z_ref's top-k tokens: [N]."""
    k = min(k, z_ref.shape[-1])
    idx = z_ref.topk(k, dim=-1).indices
    return kendall_tau_b(z_ref.gather(-1, idx), z_other.gather(-1, idx))


def rank_bins(ranks) -> dict[str, int]:
    """Counts of ranks in the bins {1, 2-10, 11-200, >200}."""
    r = torch.as_tensor(ranks).flatten()
    return {"1": int((r == 1).sum()), "2-10": int(((r >= 2) & (r <= 10)).sum()),
            "11-200": int(((r >= 11) & (r <= 200)).sum()), ">200": int((r > 200).sum())}


class TeacherForcedComparison:
    """Streaming statistics of paired teacher-forced logits (base vs target) over positions, float64 on the CPU:
    entropies, NLL of the true next token, top-1 agreement, Kendall tau on top-k, and per-token rank-change and
    log-softmax-change sums (mean and variance across contexts). Memory O(V)."""

    def __init__(self, vocab: int, tau_k: int = 50, chunk: int = 256):
        self.V, self.tau_k, self.chunk = int(vocab), int(tau_k), int(chunk)
        self.n = 0
        self.sums = {k: 0.0 for k in ("h_base", "h_target", "nll_base", "nll_target", "top1", "tau_base",
                                       "tau_target")}
        self.dr_sum = torch.zeros(self.V, dtype=torch.float64)
        self.dr_sq = torch.zeros(self.V, dtype=torch.float64)
        self.dl_sum = torch.zeros(self.V, dtype=torch.float64)

    def update(self, zb: torch.Tensor, zt: torch.Tensor, nxt: torch.Tensor | None = None) -> None:
        if zb.shape != zt.shape or zb.ndim != 2 or zb.shape[1] != self.V:
            raise ShapeError(f"paired logits must both be [N, {self.V}]; got {tuple(zb.shape)}, {tuple(zt.shape)}")
        for s in range(0, zb.shape[0], self.chunk):
            a, b = zb[s:s + self.chunk].to(torch.float64), zt[s:s + self.chunk].to(torch.float64)
            la, lb = torch.log_softmax(a, -1), torch.log_softmax(b, -1)
            self.n += a.shape[0]
            S = self.sums
            S["h_base"] += float(-(la.exp() * la).sum())
            S["h_target"] += float(-(lb.exp() * lb).sum())
            if nxt is not None:
                y = nxt[s:s + self.chunk].to(a.device)[:, None]
                S["nll_base"] += float(-la.gather(-1, y).sum())
                S["nll_target"] += float(-lb.gather(-1, y).sum())
            S["top1"] += float((a.argmax(-1) == b.argmax(-1)).sum())
            S["tau_base"] += float(topk_kendall_tau(a, b, self.tau_k).nan_to_num(0.0).sum())
            S["tau_target"] += float(topk_kendall_tau(b, a, self.tau_k).nan_to_num(0.0).sum())
            dr = (full_ranks(a) - full_ranks(b)).to(torch.float64)
            self.dr_sum += dr.sum(0).cpu()
            self.dr_sq += (dr * dr).sum(0).cpu()
            self.dl_sum += (lb - la).sum(0).cpu()

    def summary(self) -> dict[str, float]:
        if self.n == 0:
            raise DataError("no positions were accumulated")
        n = self.n
        out = {k: v / n for k, v in self.sums.items()}
        out["top1_agreement"] = out.pop("top1")
        out["n_positions"] = n
        std = self.dr_std()
        out["rank_change_std_mean"] = float(std.mean())
        out["rank_change_var_mean"] = float((std ** 2).mean())
        return out

    def dr_mean(self) -> torch.Tensor:
        return self.dr_sum / max(self.n, 1)

    def dr_std(self) -> torch.Tensor:
        n = max(self.n, 1)
        var = (self.dr_sq / n - self.dr_mean() ** 2).clamp_min(0.0)
        return var.sqrt()

    def dl_mean(self) -> torch.Tensor:
        return self.dl_sum / max(self.n, 1)


def compare_teacher_forced(model_base, model_target, texts: Sequence[str], *, batch_size: int = 16,
                           max_tokens: int | None = None, tau_k: int = 50) -> TeacherForcedComparison:
    """Run both models teacher-forced over `texts` and accumulate a TeacherForcedComparison."""
    acc = TeacherForcedComparison(model_base.d_vocab, tau_k)
    for zb, zt, nxt in teacher_forced_logits(model_base, model_target, texts, batch_size, max_tokens):
        acc.update(zb.cpu(), zt.cpu(), nxt.cpu())
    if acc.n == 0:
        raise InputError("the texts produced no teacher-forced positions (every text needs >= 2 tokens)")
    return acc


DELTA_REFERENCES = ("vocab_mean", "log_softmax")


def static_delta(comparison: TeacherForcedComparison, top_k: int = 500, *,
                 reference: str = "vocab_mean") -> torch.Tensor:
    """Static reweighting vector delta [V]: the mean log-probability change (target - base) of the
    top-K tokens by mean rank change (most promoted by the target), 0 elsewhere.

    reference: what a change is measured against, since logits are defined only up to a per-position
    shift and delta is 0 off the top-K. "vocab_mean" (default): the change minus its mean over the
    vocabulary, so a token the target promotes relative to the typical token gets delta > 0.
    "log_softmax": the raw mean log-softmax change (the spec's §2.2 literal reading, used by the
    runs before issue 46). A hyperfitted model's sharpening lowers the log-softmax of nearly every
    token below its top few, so under "log_softmax" the most promoted tokens get delta < 0 (on
    text-hyperfit all 500 are negative): the injection then *demotes* them, and on SmolLM2 it left
    every greedy generation token-identical at alpha up to 2."""
    if top_k < 1:
        raise ConfigError(f"top_k must be >= 1, got {top_k}")
    if reference not in DELTA_REFERENCES:
        raise ConfigError(f"reference must be one of {DELTA_REFERENCES}, got {reference!r}")
    k = min(top_k, comparison.V)
    idx = comparison.dr_mean().topk(k).indices
    change = comparison.dl_mean()
    if reference == "vocab_mean":
        # = the mean over positions of (each position's change - its vocabulary mean)
        change = change - change.mean()
    delta = torch.zeros(comparison.V, dtype=torch.float32)
    delta[idx] = change[idx].float()
    return delta


def logit_lens(model, resid: torch.Tensor) -> torch.Tensor:
    """ln_final(resid) W_U + b_U with the model's own final norm (raw HF weights)."""
    norm = model.final_norm_module
    with torch.no_grad():
        return model.unembed(norm(resid.to(next(norm.parameters()).device)))


def base_ranks_of(base, prompts: list[list[int]], gens: list[list[int]], batch_size: int = 32,
                  exclude_eos: bool = True) -> np.ndarray:
    """Base-model rank of every generated token given the same prefix: [n_prompts, n_new] (teacher-forced). With
    `exclude_eos` the EOS logit is removed first, matching generations whose length was pinned by suppressing EOS."""
    return base_scores_of(base, prompts, gens, batch_size, exclude_eos)[0]


def _eos_free(base, z: torch.Tensor, exclude_eos: bool) -> torch.Tensor:
    if exclude_eos and getattr(base, "eos_token_id", None) is not None:
        z[..., base.eos_token_id] = float("-inf")
    return z


def base_scores_of(base, prompts: list[list[int]], gens: list[list[int]], batch_size: int = 32,
                   exclude_eos: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """One teacher-forced pass of the base over prompt + generation: (ranks [n_prompts, n_new] as
    `base_ranks_of`, nll [n_prompts]: each generation's mean negative log-likelihood per token under
    the base, in nats; with `exclude_eos` over the vocabulary without EOS, as the pinned-length
    generations were drawn)."""
    ranks, nll = [], []
    for i in range(0, len(prompts), batch_size):
        P = [len(p) for p in prompts[i:i + batch_size]]
        G = [len(g) for g in gens[i:i + batch_size]]
        if len(set(P)) != 1 or len(set(G)) != 1:
            raise InputError("base_ranks_of needs equal prompt lengths and equal generation lengths per batch")
        p, g = P[0], G[0]
        seqs = [a + b for a, b in zip(prompts[i:i + batch_size], gens[i:i + batch_size])]
        with torch.no_grad():
            z = _eos_free(base, base.run(seqs).logits[:, p - 1:p - 1 + g].float(), exclude_eos)
        ids = torch.tensor([s[p:] for s in seqs], device=z.device)
        ranks.append(token_ranks(z, ids).cpu())
        lp = torch.log_softmax(z.double(), -1).gather(-1, ids[..., None])[..., 0]
        nll.append((-lp.mean(-1)).cpu())
    return torch.cat(ranks).numpy(), torch.cat(nll).numpy()


def text_nll(model, texts: Sequence[str], *, batch_size: int = 16, max_tokens: int | None = None,
             exclude_eos: bool = True) -> np.ndarray:
    """Each text's mean negative log-likelihood per predicted token under `model` (nats; [n_texts];
    NaN for a text of one token), teacher-forced; with `exclude_eos` over the vocabulary without
    EOS. The reference a generated reply's NLL is held to: how likely the model finds human-written
    text."""
    from interplab.probes.hyperfit.inputs import tokenize_texts

    ids = tokenize_texts(model, texts, max_tokens)
    out = []
    for i in range(0, len(ids), batch_size):
        chunk = ids[i:i + batch_size]
        with torch.no_grad():
            res = model.run(chunk, logits=True)
        z = _eos_free(model, res.logits[:, :-1].float(), exclude_eos)
        mask = res.batch.attention_mask.bool()
        pred = (mask[:, :-1] & mask[:, 1:]).to(z.device)
        nxt = res.batch.input_ids[:, 1:].to(z.device)
        lp = torch.log_softmax(z.double(), -1).gather(-1, nxt[..., None])[..., 0]
        n = pred.sum(-1)
        tot = (-lp * pred).sum(-1)
        nan = torch.full_like(tot, float("nan"))
        out.append(torch.where(n > 0, tot / n.clamp_min(1), nan).cpu())
    return torch.cat(out).numpy()


@dataclass
class RankReorderingConfig:
    """Fields: context_tokens (prompt length taken from each held-out text), max_new_tokens (greedy tokens the
    target generates), tau_k (top-k set for Kendall tau), lens_layers (how many final layers the logit lens scans),
    lens_k (top-k threshold for "entered"), static_k (K for the static delta), batch_size, max_tokens (teacher-forcing
    truncation), prompts_per_text / max_prompts (context windows per prompt text, cap on prompts),
    model_base/model_target (names)."""

    context_tokens: int = 32
    max_new_tokens: int = 96
    tau_k: int = 50
    lens_layers: int = 5
    lens_k: int = 10
    static_k: int = 500
    batch_size: int = 16
    max_tokens: int | None = None
    prompts_per_text: int = 1
    max_prompts: int | None = None
    model_base: str = ""
    model_target: str = ""


@dataclass
class RankReorderingResult(Result):
    """Rank reordering of a target (hyperfitted) model relative to its base.

    summary: override_rate, top1_agreement (teacher-forced), tau_base/tau_target (Kendall tau-b on the base's /
        target's top-k), h_base/h_target (mean entropy), nll_base/nll_target, rank_change_std_mean / _var_mean
        (context dependence), n_steps, frac_rank_gt10_of_overrides, frac_rank_gt200_of_overrides.
    histogram: counts over RANK_BINS of the base rank of each token the target chose greedily.
    base_ranks / step_index / chosen: per generated step (flattened over prompts).
    dr_mean / dr_std / dl_mean: per-token mean and std of the rank change and mean log-softmax change ([V]).
    lens_entry: for every overriding step, the first of the last `lens_layers` layers (absolute index) at which the
        chosen token is in the target's logit-lens top-`lens_k` (-1: never before the output).
    generations: the target's greedy generations (token ids), for the token view."""

    config: RankReorderingConfig
    summary: dict
    histogram: dict
    base_ranks: np.ndarray
    step_index: np.ndarray
    chosen: np.ndarray
    dr_mean: np.ndarray
    dr_std: np.ndarray
    dl_mean: np.ndarray
    lens_entry: np.ndarray
    generations: list = field(default_factory=list)

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([{"metric": k, "value": v} for k, v in self.summary.items()])

    def histogram_frame(self):
        import pandas as pd

        tot = max(sum(self.histogram.values()), 1)
        return pd.DataFrame({"bin": list(RANK_BINS), "count": [self.histogram[b] for b in RANK_BINS],
                             "fraction": [self.histogram[b] / tot for b in RANK_BINS]})

    def token_frame(self, tokenizer=None):
        """Per-token context dependence (mean and std of the rank change), for the scatter figure."""
        import pandas as pd

        df = pd.DataFrame({"token_id": np.arange(self.dr_mean.size), "dr_mean": self.dr_mean, "dr_std": self.dr_std,
                           "dl_mean": self.dl_mean})
        if tokenizer is not None:
            df["token"] = [tokenizer.convert_ids_to_tokens(int(i)) for i in df["token_id"]]
        return df


def rank_reordering(model_base, model_target, prompts: Sequence[str], *, texts: Sequence[str] | None = None,
                    config: RankReorderingConfig | None = None, **overrides) -> RankReorderingResult:
    """Rank reordering analyses (a)-(e) of spec §2.3.

    `prompts` are held-out texts: their first `context_tokens` tokens seed the target's greedy generations (pinned
    to `max_new_tokens` by suppressing EOS, so base ranks and logit-lens ranks are taken with EOS excluded too); the
    teacher-forced statistics use `texts` (default: the full prompts)."""
    cfg = config or RankReorderingConfig()
    for k, v in overrides.items():
        if not hasattr(cfg, k):
            raise ConfigError(f"unknown RankReorderingConfig field {k!r}")
        setattr(cfg, k, v)
    cfg.model_base = str(getattr(model_base, "name", ""))
    cfg.model_target = str(getattr(model_target, "name", ""))
    # (a, c, d) teacher-forced
    comp = compare_teacher_forced(model_base, model_target, list(texts if texts is not None else prompts),
                                  batch_size=cfg.batch_size, max_tokens=cfg.max_tokens, tau_k=cfg.tau_k)
    summary = comp.summary()
    # (b) along the target's greedy generations
    ctx = context_prompts(model_target, prompts, cfg.context_tokens, per_text=cfg.prompts_per_text)
    ctx = ctx[:cfg.max_prompts] if cfg.max_prompts else ctx
    gens, _ = generate_continuations(model_target, ctx, max_new_tokens=cfg.max_new_tokens,
                                     batch_size=cfg.batch_size)
    L = model_target.n_layers
    lens_layers = list(range(max(0, L - cfg.lens_layers), L))
    eos = getattr(model_base, "eos_token_id", None)
    ranks, steps, chosen, entries = [], [], [], []
    for i in range(0, len(ctx), cfg.batch_size):
        seqs = [c + g for c, g in zip(ctx[i:i + cfg.batch_size], gens[i:i + cfg.batch_size])]
        P = len(ctx[0])
        n_new = cfg.max_new_tokens
        with torch.no_grad():
            out_b = model_base.run(seqs, logits=True)
            out_t = model_target.run(seqs, logits=False, capture=[f"resid_post.{l}" for l in lens_layers])
        # every sequence has the same length (fixed context, pinned generation), so no padding here
        zb = out_b.logits[:, P - 1:P - 1 + n_new].float()
        if eos is not None:  # generations were pinned by suppressing EOS: rank among the tokens that could be chosen
            zb[..., eos] = float("-inf")
        y = out_b.batch.input_ids[:, P:P + n_new]
        r = token_ranks(zb, y)
        ranks.append(r.flatten().cpu())
        steps.append(torch.arange(n_new).expand_as(r).flatten())
        chosen.append(y.flatten().cpu())
        over = r > 1
        entry = torch.full_like(r, -1)
        for l in reversed(lens_layers):  # earliest layer wins: scan from the last one down
            h = out_t.cache[f"resid_post.{l}"][:, P - 1:P - 1 + n_new]
            zl = logit_lens(model_target, h).float()
            if eos is not None:
                zl[..., eos] = float("-inf")
            rl = token_ranks(zl, y)
            entry = torch.where(rl <= cfg.lens_k, torch.full_like(entry, l), entry)
        entries.append(entry[over].cpu())
    base_ranks = torch.cat(ranks)
    hist = rank_bins(base_ranks)
    n_steps = int(base_ranks.numel())
    n_over = int((base_ranks > 1).sum())
    summary.update({
        "override_rate": n_over / max(n_steps, 1), "n_steps": n_steps,
        "frac_rank_gt10_of_overrides": float((base_ranks > 10).sum()) / max(n_over, 1),
        "frac_rank_gt200_of_overrides": float((base_ranks > 200).sum()) / max(n_over, 1),
    })
    return RankReorderingResult(cfg, summary, hist, base_ranks.numpy(), torch.cat(steps).numpy(),
                                torch.cat(chosen).numpy(), comp.dr_mean().numpy(), comp.dr_std().numpy(),
                                comp.dl_mean().numpy(), torch.cat(entries).numpy(), [list(g) for g in gens])
