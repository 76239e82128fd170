"""PCFG distribution match and layer-wise parse probes (spec ../shared/methods/pcfg_parse.md §2.5–2.6, §5).

- `pcfg_kl(model, g, n_sequences, seed)`: per-position KL(p_G ‖ q_θ) and TV over the V terminals + EOS, excess NLL,
  the grammar entropy-rate floor, and unigram / bigram baselines counted from grammar samples.
- `parse_probes(model, g, targets=[...], probe="linear"|"mlp", seed)`: held-out quality of probes that read
  prefix-conditional parse quantities from the residual stream, per (layer, target, span-length bucket), with
  random-init and shuffled-label controls, and the local-to-global statistic l*(ℓ).

``model`` is an `interplab.LabModel` (any backend) or a plain Hugging Face causal LM (`nn.Module`); its tokenizer
must contain the grammar's terminal names as tokens plus BOS/EOS (the zoo's PCFG organisms do). The model's
distribution is its full softmax read at the terminal and EOS ids, *not* renormalised: mass on other tokens counts as
error (so E[excess NLL] = E[KL] exactly).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from interplab.core.errors import InputError
from interplab.grammar import PCFG, next_token_logprobs, prefix, prefix_span_posteriors

__all__ = ["pcfg_kl", "parse_probes", "kl_summary", "model_next_logprobs", "grammar_vocab", "to_model_ids",
           "sample_eval_set", "ngram_baselines", "attention_offset_mass", "local_to_global", "lstar_slope",
           "PROBE_TARGETS"]


# ------------------------------------------------------------------------------------------------ model plumbing
def _tokenizer(model):
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise InputError("pcfg probes need model.tokenizer (a LabModel) or pass tokenizer=... for a bare HF model.")
    return tok


def grammar_vocab(g: PCFG, tokenizer) -> dict:
    """Model token ids for the grammar: {"terminals": LongTensor [V], "eos", "bos", "pad"}. Raises `InputError`
    when a terminal is not a single token of the tokenizer."""
    vocab = tokenizer.get_vocab()
    missing = [t for t in g.terminals if t not in vocab]
    if missing:
        raise InputError(f"the model's tokenizer lacks grammar terminals {missing[:5]}; train the model on this grammar "
                         "(interplab.zoo.recipes.pcfg builds a word tokenizer from g.terminals).")
    if tokenizer.bos_token_id is None or tokenizer.eos_token_id is None:
        raise InputError("the tokenizer needs BOS and EOS tokens.")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return {"terminals": torch.tensor([vocab[t] for t in g.terminals], dtype=torch.long),
            "eos": int(tokenizer.eos_token_id), "bos": int(tokenizer.bos_token_id), "pad": int(pad)}


def to_model_ids(g: PCFG, tokens: torch.Tensor, lengths: torch.Tensor, gv: dict, *, eos: bool = True):
    """Grammar tokens [B, n] -> right-padded model ids [B, n+2] = BOS w_1..w_len EOS PAD..., and the attention mask.
    Position p (0-based) of the model input holds BOS for p = 0 and w_p otherwise; the prediction made there is
    compared with p_G(· | w≤p)."""
    B, n = tokens.shape
    ids = torch.full((B, n + 2), gv["pad"], dtype=torch.long)
    ids[:, 0] = gv["bos"]
    pos = torch.arange(n)[None]
    real = pos < lengths[:, None]
    mapped = gv["terminals"][tokens.clamp(0, g.V - 1)]
    ids[:, 1:n + 1] = torch.where(real, mapped, torch.full_like(mapped, gv["pad"]))
    att = torch.zeros(B, n + 2, dtype=torch.long)
    att[:, 0] = 1
    att[:, 1:n + 1] = real.long()
    if eos:
        ids[torch.arange(B), lengths + 1] = gv["eos"]
        att[torch.arange(B), lengths + 1] = 1
    return ids, att


def _max_len_for(model, max_len: int | None) -> int:
    """Longest grammar string the model can read: BOS + string + EOS must fit its context (default 64)."""
    n_ctx = getattr(model, "n_ctx", None)
    if n_ctx is None:
        n_ctx = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    cap = int(n_ctx) - 2 if n_ctx else 64
    return min(max_len or 64, cap)


def _is_labmodel(model) -> bool:
    return hasattr(model, "run") and hasattr(model, "n_layers") and hasattr(model, "hf_model")


def _hf_layers(hf):
    base = getattr(hf, "model", None) or getattr(hf, "transformer", None)
    layers = getattr(base, "layers", None) or getattr(base, "h", None)
    if layers is None:
        raise InputError("cannot find the decoder layers of this HF model; pass a LabModel instead.")
    return base, layers


@torch.no_grad()
def _forward(model, ids: torch.Tensor, att: torch.Tensor, layers: Sequence[int] = (), *, logits: bool = True,
             patterns: Sequence[int] = ()):
    """Run a right-padded batch. Returns (logits [B,T,Vm] or None, {layer: resid [B,T,d]} with layer -1 the
    embedding (resid_pre.0), {layer: attention pattern [B,h,T,T]}), all indexed by absolute position."""
    lengths = att.sum(1)
    if _is_labmodel(model):
        rows = [ids[b, :int(lengths[b])].tolist() for b in range(ids.shape[0])]
        sites = [("resid_pre.0" if l < 0 else f"resid_post.{l}") for l in layers]
        sites += [f"attn_pattern.{l}" for l in patterns]
        out = model.run(rows, capture=sites, logits=logits)
        W = out.batch.input_ids.shape[1]
        T = ids.shape[1]
        off = (W - out.batch.lengths.cpu())[:, None]
        cols = (off + torch.arange(T)[None]).clamp(max=W - 1)

        def realign(x):
            x = x.detach().float().cpu()
            return torch.gather(x, 1, cols.reshape(*cols.shape, 1).expand(*cols.shape, x.shape[2]))

        lg = realign(out.logits) if logits else None
        res = {l: realign(out.cache["resid_pre.0" if l < 0 else f"resid_post.{l}"]) for l in layers}
        pats = {}
        for l in patterns:
            p = out.cache[f"attn_pattern.{l}"].detach().float().cpu()  # [B,h,W,W]
            B, H = p.shape[:2]
            q = cols[:, None, :, None].expand(B, H, T, W)
            p = torch.gather(p, 2, q)
            k = cols[:, None, None, :].expand(B, H, T, T)
            pats[l] = torch.gather(p, 3, k)
        return lg, res, pats
    # a bare HF module: right padding is exact for a causal model (pads only follow real tokens)
    hf = model
    res: dict = {}
    hooks = []
    if layers:
        base, blocks = _hf_layers(hf)
        emb = base.embed_tokens if hasattr(base, "embed_tokens") else base.wte

        def mk(l):
            def hook(mod, inp, out):
                res[l] = (out[0] if isinstance(out, tuple) else out).detach().float().cpu()
            return hook
        for l in layers:
            hooks.append((emb if l < 0 else blocks[l]).register_forward_hook(mk(l)))
    prev_impl = None
    if patterns and getattr(getattr(hf, "config", None), "_attn_implementation", "eager") != "eager":
        prev_impl = hf.config._attn_implementation
        hf.set_attn_implementation("eager")  # sdpa cannot return attention probabilities
    try:
        out = hf(input_ids=ids, attention_mask=att, output_attentions=bool(patterns))
    finally:
        for h in hooks:
            h.remove()
        if prev_impl is not None:
            hf.set_attn_implementation(prev_impl)
    pats = {l: out.attentions[l].float().cpu() for l in patterns} if patterns else {}
    return out.logits.float().cpu(), res, pats


@torch.no_grad()
def model_next_logprobs(model, g: PCFG, tokens, lengths, *, tokenizer=None, batch_size: int = 64) -> torch.Tensor:
    """log q_θ(v | w≤p) at p = 0..n over the V terminals + EOS: [B, n+1, V+1] (float64, not renormalised)."""
    tok = tokenizer or _tokenizer(model)
    gv = grammar_vocab(g, tok)
    cols = torch.cat([gv["terminals"], torch.tensor([gv["eos"]])])
    outs = []
    for s in range(0, tokens.shape[0], batch_size):
        t, L = tokens[s:s + batch_size], lengths[s:s + batch_size]
        ids, att = to_model_ids(g, t, L, gv)
        lg, _, _ = _forward(model, ids, att)
        lp = torch.log_softmax(lg.double(), -1)
        outs.append(lp[:, :t.shape[1] + 1][..., cols])
    return torch.cat(outs, 0)


# ------------------------------------------------------------------------------------------------ evaluation data
def sample_eval_set(g: PCFG, n: int, seed: int, max_len: int | None = None):
    """Held-out grammar samples (tokens, lengths, trees). Long strings are truncated (exact prefixes), never
    re-sampled; truncated rows have no EOS step."""
    max_len = max_len or 64
    toks, trees = g.sample(n, seed=seed, max_len=max_len, on_long="truncate")
    lengths = torch.tensor([t.length for t in trees], dtype=torch.long)
    return toks, lengths, trees


def ngram_baselines(g: PCFG, n_samples: int = 20000, seed: int = 10_101, alpha: float = 0.01,
                    max_len: int = 64) -> dict:
    """Unigram and bigram next-token models over V+1 symbols (EOS last), counted from grammar samples with add-α
    smoothing. Bigram contexts: BOS (index V+1) or the previous terminal. Returns {"unigram": [V+1] log-probs,
    "bigram": [V+2, V+1] log-probs}."""
    toks, trees = g.sample(n_samples, seed=seed, max_len=max_len, on_long="truncate")
    V = g.V
    uni = np.full(V + 1, alpha)
    bi = np.full((V + 2, V + 1), alpha)
    for b, tr in enumerate(trees):
        seq = toks[b, :tr.length].tolist() + ([] if tr.truncated else [V])
        prev = V + 1
        for x in seq:
            uni[x] += 1
            bi[prev, x] += 1
            prev = x
    return {"unigram": torch.tensor(np.log(uni / uni.sum())), "bigram": torch.tensor(np.log(bi / bi.sum(1, keepdims=True)))}


def _kl_rows(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """KL(p‖q) per row over the last dim (p, q log-probabilities; terms with p = 0 contribute 0)."""
    p = logp.exp()
    diff = torch.where(p > 0, logp - logq, torch.zeros_like(logp))
    return (p * diff).sum(-1)


def pcfg_kl(model, g: PCFG, n_sequences: int = 512, seed: int = 0, *, max_len: int | None = None,
            batch_size: int = 64, baselines: bool = True, n_baseline: int = 20000, tokenizer=None,
            eval_set=None) -> pd.DataFrame:
    """Distribution match of ``model`` to grammar ``g`` on ``n_sequences`` held-out samples (seed ``seed``).

    Returns one row per position p (p = 0 is BOS → first token) with columns: ``position``, ``n`` (sequences
    reaching p), ``kl`` and ``kl_se`` (mean and standard error of KL(p_G ‖ q_θ) in nats), ``tv`` (½Σ|p_G − q_θ|
    plus the model's mass on non-grammar tokens), ``excess_nll`` (mean −log q_θ(w) + log p_G(w) at the sampled
    next symbol), ``entropy`` (mean −log p_G(w): the loss floor), ``nll_model``, and with ``baselines`` the KL of the
    unigram and bigram baselines (``kl_unigram``, ``kl_bigram``). ``df.attrs["summary"]`` (see `kl_summary`) holds
    the per-token averages averaged per sequence first (kl, kl_se, tv, entropy_rate, nll_model, kl_unigram,
    kl_bigram), and pooled over tokens: kl_token and excess_nll (its unbiased estimate) with excess_nll_se, the
    standard error of their difference."""
    if n_sequences < 1:
        raise InputError("n_sequences must be >= 1.")
    if eval_set is None:
        toks, lengths, trees = sample_eval_set(g, n_sequences, seed, _max_len_for(model, max_len))
    else:
        toks, lengths, trees = eval_set
    trunc = torch.tensor([t.truncated for t in trees]) if trees is not None else torch.zeros(len(lengths), dtype=torch.bool)
    g64 = g.to(torch.float64)
    logp = next_token_logprobs(g64, toks, lengths)  # [B, n+1, V+1]
    logq = model_next_logprobs(model, g, toks, lengths, tokenizer=tokenizer, batch_size=batch_size)
    B, n1, _ = logp.shape
    pos = torch.arange(n1)[None]
    # a truncated row has no observed continuation at p = len (and its EOS step is unknown): mask p = len there
    valid = (pos < lengths[:, None]) | ((pos == lengths[:, None]) & ~trunc[:, None])
    kl = _kl_rows(logp, logq)
    p = logp.exp()
    q = logq.exp()
    tv = 0.5 * ((p - q).abs().sum(-1) + (1 - q.sum(-1)).clamp_min(0))
    nxt = torch.cat([toks.clamp(0, g.V - 1), torch.zeros(B, 1, dtype=torch.long)], 1)[:, :n1]
    nxt = torch.where(pos == lengths[:, None], torch.full_like(nxt, g.V), nxt)
    lp_obs = logp.gather(2, nxt[..., None])[..., 0]
    lq_obs = logq.gather(2, nxt[..., None])[..., 0]
    cols = {"kl": kl, "tv": tv, "excess_nll": lp_obs - lq_obs, "entropy": -lp_obs, "nll_model": -lq_obs}
    if baselines:
        bl = ngram_baselines(g, n_baseline, max_len=_max_len_for(model, max_len))
        uni = bl["unigram"].expand(B, n1, g.V + 1)
        prev = torch.cat([torch.full((B, 1), g.V + 1), toks.clamp(0, g.V - 1)], 1)[:, :n1]
        bi = bl["bigram"][prev]
        cols["kl_unigram"] = _kl_rows(logp, uni)
        cols["kl_bigram"] = _kl_rows(logp, bi)
    vf = valid.double()
    cnt = vf.sum(0)
    rows = {"position": np.arange(n1), "n": cnt.numpy().astype(int)}
    for k, v in cols.items():
        v = torch.where(valid, v, torch.zeros_like(v))
        mean = v.sum(0) / cnt.clamp_min(1)
        rows[k] = mean.numpy()
        if k in ("kl", "excess_nll"):
            var = ((v - mean[None]) ** 2 * vf).sum(0) / (cnt - 1).clamp_min(1)
            rows[k + "_se"] = (var / cnt.clamp_min(1)).sqrt().numpy()
    df = pd.DataFrame(rows)
    df = df[df["n"] > 0].reset_index(drop=True)
    # per-token averages, averaged per sequence first (spec §2.5) ...
    summ = {}
    ntok = vf.sum(1).clamp_min(1)
    for k, v in cols.items():
        per_seq = torch.where(valid, v, torch.zeros_like(v)).sum(1) / ntok
        summ[k] = float(per_seq.mean())
        if k == "kl":
            summ[k + "_se"] = float(per_seq.std() / math.sqrt(B)) if B > 1 else float("nan")
    # ... and pooled over all tokens: the excess NLL is an unbiased estimate of the pooled KL (the per-sequence
    # average is not, because a sequence's length depends on its tokens)
    N = float(vf.sum())
    kl_tok = float((kl * vf).sum()) / N
    ex = torch.where(valid, cols["excess_nll"], torch.zeros_like(kl))
    summ["kl_token"] = kl_tok
    summ["excess_nll"] = float(ex.sum()) / N
    diff = (ex - kl * vf).sum(1)
    summ["excess_nll_se"] = float(math.sqrt(B * float(diff.var())) / N) if B > 1 else float("nan")
    summ["entropy_rate"] = summ.pop("entropy")
    summ["n_sequences"] = int(B)
    summ["n_tokens"] = int(vf.sum())
    df.attrs["summary"] = summ
    df.attrs["grammar"] = g.name
    return df


def kl_summary(df: pd.DataFrame) -> dict:
    """The summary of a `pcfg_kl` frame: kl, kl_se, tv, entropy_rate, nll_model, kl_unigram, kl_bigram (per-token,
    averaged per sequence), kl_token / excess_nll / excess_nll_se (pooled over tokens), n_sequences, n_tokens."""
    return dict(df.attrs.get("summary", {}))


# ------------------------------------------------------------------------------------------------ probe targets
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


def _bucket_label(k: int) -> str:
    lo, hi = 2 ** k, 2 ** (k + 1) - 1
    return str(lo) if lo == hi else f"{lo}-{hi}"


@dataclass
class _ProbeData:
    """Examples for one target: (row b, position t, start i or -1), target matrix, bucket id, token at t."""

    b: np.ndarray
    t: np.ndarray
    i: np.ndarray
    y: np.ndarray
    bucket: np.ndarray
    kind: str  # "r2" | "acc"
    tok: np.ndarray


def _build_targets(g: PCFG, toks, lengths, trees, targets, *, cap_per_bucket: int, rng) -> dict[str, _ProbeData]:
    from interplab.grammar import span_marginals

    g64 = g.to(torch.float64)
    pre = prefix(g64, toks, lengths)
    B, n = toks.shape
    keep_nt = torch.tensor(~g.auxiliary)
    out: dict[str, _ProbeData] = {}
    L = lengths.numpy()
    tok_np = toks.numpy()

    def tokat(bb, tt):
        return np.where(tt > 0, tok_np[bb, np.maximum(tt - 1, 0)], g.V + 1)  # BOS id at t = 0

    span_needed = {t for t in targets if PROBE_TARGETS[t][0] == "span"}
    if span_needed:
        post = prefix_span_posteriors(g64, toks, lengths, pre=pre).exp()[..., keep_nt]  # [B, i, t, A]
        dense = pre.chart.dense()[..., keep_nt]  # log β [B, i, j, A]
        mu = span_marginals(g64, toks, lengths)[..., keep_nt] if "marginal" in targets else None
        bi, ii, ti = torch.nonzero(post.sum(-1) > 1e-3, as_tuple=True)  # possible constituents (i, t]
        ell = (ti - ii).numpy()
        bk = np.array([_bucket_of(x) for x in ell])
        sel = []
        for k in np.unique(bk):
            idx = np.nonzero(bk == k)[0]
            if len(idx) > cap_per_bucket:
                idx = rng.choice(idx, cap_per_bucket, replace=False)
            sel.append(np.sort(idx))
        sel = np.concatenate(sel) if sel else np.zeros(0, int)
        bs, is_, ts = bi.numpy()[sel], ii.numpy()[sel], ti.numpy()[sel]
        if "span_posterior" in targets:
            out["span_posterior"] = _ProbeData(bs, ts, is_, post[bs, is_, ts].numpy(), bk[sel], "r2", tokat(bs, ts))
        if "inside" in targets:
            lb = dense[bs, is_, ts]
            y = torch.softmax(torch.where(torch.isfinite(lb), lb, torch.full_like(lb, -1e30)), -1).numpy()
            out["inside"] = _ProbeData(bs, ts, is_, y, bk[sel], "r2", tokat(bs, ts))
        if "marginal" in targets:
            # full-sentence marginals are defined for t <= length only (all selected spans satisfy it)
            out["marginal"] = _ProbeData(bs, ts, is_, mu[bs, is_, ts].numpy(), bk[sel], "r2", tokat(bs, ts))
        if "gold_label" in targets:
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
            sel = []
            for k in np.unique(rows[:, 4]):
                idx = np.nonzero(rows[:, 4] == k)[0]
                if len(idx) > cap_per_bucket:
                    idx = rng.choice(idx, cap_per_bucket, replace=False)
                sel.append(np.sort(idx))
            rows = rows[np.concatenate(sel)] if sel else rows
            out["gold_label"] = _ProbeData(rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4], "acc",
                                           tokat(rows[:, 0], rows[:, 1]))
    pos_needed = [t for t in targets if PROBE_TARGETS[t][0] == "position"]
    if pos_needed:
        bt = [(b, t) for b in range(B) for t in range(1, int(L[b]) + 1)]  # BOS excluded from regression targets
        bt = np.array(bt, dtype=np.int64).reshape(-1, 2)
        if "pending" in targets:  # nothing pending after a complete fixed-length sentence: drop those positions
            alive = torch.isfinite(pre.log_F[bt[:, 0], bt[:, 1]]).any(-1).numpy()
            bt = bt[alive]
        if len(bt) > 4 * cap_per_bucket:
            bt = bt[np.sort(rng.choice(len(bt), 4 * cap_per_bucket, replace=False))]
        bb, tt = bt[:, 0], bt[:, 1]
        if "pending" in targets:
            F = pre.log_F[bb, tt]
            out["pending"] = _ProbeData(bb, tt, -np.ones_like(tt), torch.softmax(F, -1).numpy(), np.full(len(tt), -1),
                                        "r2", tokat(bb, tt))
        if "next_token" in targets:
            nt = pre.next_token_logprobs()[bb, tt].exp().numpy()
            out["next_token"] = _ProbeData(bb, tt, -np.ones_like(tt), nt, np.full(len(tt), -1), "r2", tokat(bb, tt))
    return out


def _features(res: dict, layers, d: _ProbeData, span: bool) -> torch.Tensor:
    """[n_layers, n_examples, d_feat]: h_t, or [h_t; h_i; h_t - h_i] for span targets."""
    H = torch.stack([res[l] for l in layers], 0)  # [Lyr, B, T, d]
    b, t = torch.as_tensor(d.b), torch.as_tensor(d.t)
    ht = H[:, b, t]
    if not span:
        return ht
    hi = H[:, b, torch.as_tensor(d.i)]
    return torch.cat([ht, hi, ht - hi], -1)


def _split(b: np.ndarray, n_seq: int, seed: int):
    """70/15/15 split by sequence."""
    perm = np.random.default_rng(seed).permutation(n_seq)
    a, c = int(0.7 * n_seq), int(0.85 * n_seq)
    part = np.empty(n_seq, int)
    part[perm[:a]], part[perm[a:c]], part[perm[c:]] = 0, 1, 2
    p = part[b]
    return p == 0, p == 1, p == 2


def _score(kind: str, pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per layer: variance-weighted R² (multi-output) or accuracy. pred [Lyr, n, k], y [n, k]."""
    if kind == "acc":
        return (pred.argmax(-1) == y.argmax(-1)[None]).double().mean(-1)
    pred = torch.nan_to_num(pred, nan=0.0, posinf=0.0, neginf=0.0)
    sse = ((pred - y[None]) ** 2).sum((1, 2))
    sst = ((y - y.mean(0, keepdim=True)) ** 2).sum().clamp_min(1e-12)
    return 1 - sse / sst


def _fit_linear(X: torch.Tensor, Y: torch.Tensor, tr, va, te, kind, lambdas=(1e-3, 1e-2, 1e-1, 1, 10, 100)):
    """Ridge probes for all layers at once (batched solve); λ picked per layer on the validation split.
    Features are centred and scaled per dimension with training statistics. Returns test scores [Lyr]."""
    X = X.double()
    Y = Y.double()
    mu, sd = X[:, tr].mean(1, keepdim=True), X[:, tr].std(1, keepdim=True).clamp_min(1e-6)
    X = (X - mu) / sd
    ym = Y[tr].mean(0, keepdim=True)
    Xtr, Ytr = X[:, tr], Y[tr] - ym
    G = Xtr.transpose(1, 2) @ Xtr  # [Lyr, d, d]
    XtY = Xtr.transpose(1, 2) @ Ytr  # [Lyr, d, k]
    n_tr = Xtr.shape[1]
    eye = torch.eye(G.shape[-1], dtype=G.dtype)
    best_val = torch.full((X.shape[0],), -float("inf"), dtype=torch.float64)
    best_te = torch.zeros(X.shape[0], dtype=torch.float64)
    for lam in lambdas:
        W = torch.linalg.solve(G + lam * n_tr * eye / 100.0, XtY)
        pv = X[:, va] @ W + ym
        pt = X[:, te] @ W + ym
        sv, st = _score(kind, pv, Y[va]), _score(kind, pt, Y[te])
        better = sv > best_val
        best_val = torch.where(better, sv, best_val)
        best_te = torch.where(better, st, best_te)
    return best_te


def _fit_mlp(X: torch.Tensor, Y: torch.Tensor, tr, va, te, kind, *, hidden: int = 64, epochs: int = 120,
             lr: float = 3e-3, wd: float = 1e-4, seed: int = 0):
    """1-hidden-layer MLP probes for all layers at once (batched matmuls), full-batch Adam; the epoch with the
    best validation score is kept. Soft targets use squared error (R²); labels use cross-entropy (accuracy)."""
    X = X.float()
    Y = Y.float()
    mu, sd = X[:, tr].mean(1, keepdim=True), X[:, tr].std(1, keepdim=True).clamp_min(1e-6)
    X = (X - mu) / sd
    Lyr, n, d = X.shape
    k = Y.shape[1]
    gen = torch.Generator().manual_seed(seed)
    W1 = (torch.randn(Lyr, d, hidden, generator=gen) / math.sqrt(d)).requires_grad_()
    b1 = torch.zeros(Lyr, 1, hidden, requires_grad=True)
    W2 = (torch.randn(Lyr, hidden, k, generator=gen) / math.sqrt(hidden)).requires_grad_()
    b2 = Y[tr].mean(0).reshape(1, 1, k).repeat(Lyr, 1, 1).clone().requires_grad_()
    opt = torch.optim.Adam([W1, b1, W2, b2], lr=lr, weight_decay=wd)

    def fwd(idx):
        return torch.relu(X[:, idx] @ W1 + b1) @ W2 + b2

    best_val = torch.full((Lyr,), -float("inf"), dtype=torch.float64)
    best_te = torch.zeros(Lyr, dtype=torch.float64)
    with torch.enable_grad():
        for ep in range(epochs):
            out = fwd(tr)
            if kind == "acc":
                loss = torch.nn.functional.cross_entropy(out.reshape(-1, k), Y[tr].argmax(-1).repeat(Lyr))
            else:
                loss = ((out - Y[tr][None]) ** 2).mean()
            opt.zero_grad()
            (loss * Lyr).backward()
            opt.step()
            if ep % 10 == 9 or ep == epochs - 1:
                with torch.no_grad():
                    sv = _score(kind, fwd(va).double(), Y[va].double())
                    st = _score(kind, fwd(te).double(), Y[te].double())
                better = sv > best_val
                best_val = torch.where(better, sv, best_val)
                best_te = torch.where(better, st, best_te)
    return best_te


def _shuffle_within_token(y: np.ndarray, tok: np.ndarray, seed: int) -> np.ndarray:
    """Control task (after Hewitt & Liang): targets permuted among examples that share the current token (and the
    bucket, applied by the caller), so whatever is predictable from token identity stays and structure goes."""
    rng = np.random.default_rng(seed)
    out = y.copy()
    for v in np.unique(tok):
        idx = np.nonzero(tok == v)[0]
        out[idx] = y[rng.permutation(idx)]
    return out


def _random_init_like(model):
    from transformers import AutoModelForCausalLM

    hf = model.hf_model if _is_labmodel(model) else model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(12345)
        rnd = AutoModelForCausalLM.from_config(hf.config)
    rnd.eval()
    return rnd


def _n_layers(model) -> int:
    return model.n_layers if _is_labmodel(model) else model.config.num_hidden_layers


@torch.no_grad()
def _collect(model, g, toks, lengths, layers, tokenizer, batch_size=64):
    gv = grammar_vocab(g, tokenizer)
    acc = {l: [] for l in layers}
    for s in range(0, toks.shape[0], batch_size):
        ids, att = to_model_ids(g, toks[s:s + batch_size], lengths[s:s + batch_size], gv)
        _, res, _ = _forward(model, ids, att, layers, logits=False) if _is_labmodel(model) else \
            _forward(model, ids, att, layers)
        for l in layers:
            acc[l].append(res[l])
    return {l: torch.cat(v, 0) for l, v in acc.items()}


def parse_probes(model, g: PCFG, *, targets: Sequence[str] = ("span_posterior", "inside", "gold_label", "pending",
                                                                "next_token"),
                 probe: str = "linear", seed: int = 0, n_sequences: int = 400, layers: Sequence[int] | None = None,
                 controls: bool = True, n_seeds: int = 1, cap_per_bucket: int = 3000, max_len: int | None = None,
                 tokenizer=None, eval_set=None) -> pd.DataFrame:
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
    if probe not in ("linear", "mlp"):
        raise InputError("probe must be 'linear' or 'mlp'.")
    bad = [t for t in targets if t not in PROBE_TARGETS]
    if bad:
        raise InputError(f"unknown probe targets {bad}; choose from {sorted(PROBE_TARGETS)}.")
    tok = tokenizer or _tokenizer(model)
    n_layers = _n_layers(model)
    layers = list(range(-1, n_layers)) if layers is None else list(layers)
    if any(l < -1 or l >= n_layers for l in layers):
        raise InputError(f"layers must lie in -1..{n_layers - 1}.")
    if eval_set is None:
        toks, lengths, trees = sample_eval_set(g, n_sequences, seed + 31_337, _max_len_for(model, max_len))
    else:
        toks, lengths, trees = eval_set
    rng = np.random.default_rng(seed)
    data = _build_targets(g, toks, lengths, trees, list(targets), cap_per_bucket=cap_per_bucket, rng=rng)
    models = {"trained": model}
    if controls:
        models["random_init"] = _random_init_like(model)
    feats = {name: _collect(m, g, toks, lengths, layers, tok) for name, m in models.items()}
    rows = []
    fit = _fit_linear if probe == "linear" else _fit_mlp
    for tname, d in data.items():
        span = PROBE_TARGETS[tname][0] == "span"
        Y = d.y
        if d.kind == "acc":
            classes, yi = np.unique(Y, return_inverse=True)
            Y = np.eye(len(classes))[yi]
        Y = torch.as_tensor(np.asarray(Y, dtype=np.float64))
        for k in np.unique(d.bucket):
            m = d.bucket == k
            if m.sum() < 30:
                continue
            sub = _ProbeData(d.b[m], d.t[m], d.i[m], None, d.bucket[m], d.kind, d.tok[m])
            Yk = Y[torch.as_tensor(m)]
            if float(((Yk - Yk.mean(0, keepdim=True)) ** 2).sum()) < 1e-10:
                continue  # a constant target (e.g. the root span of a fixed-length grammar): nothing to probe
            scores = {}
            for name in models:
                X = _features(feats[name], layers, sub, span)
                per_seed = []
                for s in range(n_seeds):
                    tr, va, te = _split(sub.b, toks.shape[0], seed + 101 * s)
                    if tr.sum() < 10 or va.sum() < 3 or te.sum() < 3:
                        continue
                    kw = {"seed": seed + s} if probe == "mlp" else {}
                    per_seed.append(fit(X, Yk, tr, va, te, d.kind, **kw))
                    if name == "trained" and controls and s == 0:
                        Ysh = torch.as_tensor(_shuffle_within_token(Yk.numpy(), sub.tok, seed + 7))
                        scores["shuffled"] = fit(X, Ysh, tr, va, te, d.kind, **kw)
                if per_seed:
                    scores[name] = torch.stack(per_seed, 0)
            if "trained" not in scores:
                continue
            tr_scores = scores["trained"]
            for li, l in enumerate(layers):
                row = {"layer": l, "target": tname, "bucket": "all" if k < 0 else _bucket_label(int(k)),
                       "span_len_lo": int(2 ** k) if k >= 0 else 0, "metric": d.kind,
                       "score": float(tr_scores[:, li].mean()),
                       "score_std": float(tr_scores[:, li].std()) if tr_scores.shape[0] > 1 else float("nan"),
                       "n_examples": int(m.sum()), "probe": probe, "seed": seed}
                if controls:
                    row["score_random_init"] = float(scores["random_init"][:, li].mean()) if "random_init" in scores else float("nan")
                    row["score_shuffled"] = float(scores["shuffled"][li]) if "shuffled" in scores else float("nan")
                    row["selectivity"] = row["score"] - row["score_shuffled"]
                rows.append(row)
    df = pd.DataFrame(rows)
    if len(df):
        lstar = local_to_global(df)
        df = df.merge(lstar[["target", "bucket", "l_star"]], on=["target", "bucket"], how="left")
    df.attrs["grammar"] = g.name
    df.attrs["layers"] = layers
    return df


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


def lstar_slope(lstar: pd.DataFrame, target: str) -> dict:
    """Least-squares slope of l*(ℓ) against log2 ℓ for one target, with a normal-approximation 95% CI."""
    d = lstar[(lstar["target"] == target) & lstar["log2_len"].notna()]
    if len(d) < 2:
        return {"slope": float("nan"), "ci95": float("nan"), "n": len(d)}
    x, y = d["log2_len"].to_numpy(float), d["l_star"].to_numpy(float)
    A = np.stack([x, np.ones_like(x)], 1)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = y - A @ coef
    dof = max(1, len(x) - 2)
    s2 = float(resid @ resid) / dof
    var = s2 / max(1e-12, float(((x - x.mean()) ** 2).sum()))
    return {"slope": float(coef[0]), "intercept": float(coef[1]), "ci95": 1.96 * math.sqrt(var), "n": len(d)}


@torch.no_grad()
def attention_offset_mass(model, g: PCFG, n_sequences: int = 128, seed: int = 0, *, max_k: int | None = None,
                          tokenizer=None, max_len: int | None = None) -> pd.DataFrame:
    """Mean attention mass a query puts on the key at relative offset 2^(k-1) (k = 1..max_k), per layer and head
    (construction mirror, spec §5.4), over real query positions q >= offset. Also ``mass_aligned``: the same
    restricted to queries at the end of an aligned dyadic block of size 2^k (q ≡ 0 mod 2^k in grammar positions,
    i.e. model index q). Columns layer, head, k, offset, mass, mass_aligned, uniform (the mass a uniform causal
    pattern would give)."""
    tok = tokenizer or _tokenizer(model)
    gv = grammar_vocab(g, tok)
    toks, lengths, _ = sample_eval_set(g, n_sequences, seed + 4242, _max_len_for(model, max_len))
    ids, att = to_model_ids(g, toks, lengths, gv)
    n_layers = _n_layers(model)
    _, _, pats = _forward(model, ids, att, (), logits=True, patterns=list(range(n_layers)))
    T = ids.shape[1]
    max_k = max_k or max(1, int(math.floor(math.log2(max(1, int(lengths.max()))))))
    real = att.bool()
    rows = []
    q = torch.arange(T)
    for l in range(n_layers):
        P = pats[l]  # [B, H, T, T]
        H = P.shape[1]
        for k in range(1, max_k + 1):
            off = 2 ** (k - 1)
            qs = q[off:]
            vals = P[:, :, qs, qs - off]  # [B, H, nq]
            m = real[:, off:]  # query real
            mass = (vals * m[:, None]).sum((0, 2)) / m.sum().clamp_min(1)
            al = m & ((qs % (2 ** k)) == 0)[None]
            mass_al = (vals * al[:, None]).sum((0, 2)) / al.sum().clamp_min(1)
            uni = float(((1.0 / (qs + 1).double())[None] * m).sum() / m.sum().clamp_min(1))
            for h in range(H):
                rows.append({"layer": l, "head": h, "k": k, "offset": off, "mass": float(mass[h]),
                             "mass_aligned": float(mass_al[h]), "uniform": uni})
    return pd.DataFrame(rows)
