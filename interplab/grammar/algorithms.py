"""Batched log-space parsing algorithms on padded batches (spec §2.2–2.4, §2.7).

All functions take ``tokens`` [B, n] (grammar terminal ids; anything at positions >= length is ignored) and
``lengths`` [B]. They compute in the grammar's dtype (float64 for tests, float32 allowed) with shifted
exp/matmul/log contractions, so memory per width is O(B·n·N²) and no (B, n, w, N, N) tensor is built.
Impossible strings give -inf, never NaN.

Chart layout: ``Chart.widths[w]`` is [B, n-w+1, N] with entry [b, i, A] = log β[A, i, i+w] (the span (i, i+w]).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from interplab.core.errors import InputError, ShapeError
from interplab.grammar.pcfg import PCFG, Tree

__all__ = ["Chart", "inside", "log_prob", "viterbi", "prefix", "PrefixResult", "prefix_log_prob",
           "next_token_logprobs", "prefix_span_posteriors", "span_marginals", "ViterbiResult", "NEG_INF"]

NEG_INF = float("-inf")


def _finite_or_zero(m: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isfinite(m), m, torch.zeros_like(m))


def _log(x: torch.Tensor) -> torch.Tensor:
    return torch.log(x)  # log(0) = -inf, no warning in torch


def _check(g: PCFG, tokens, lengths):
    tokens = torch.as_tensor(tokens)
    if tokens.ndim == 1:
        tokens = tokens[None]
    if tokens.ndim != 2:
        raise ShapeError(f"tokens must be [B, n]; got {tuple(tokens.shape)}.")
    B, n = tokens.shape
    if lengths is None:
        lengths = g.lengths_of(tokens)
    lengths = torch.as_tensor(lengths, dtype=torch.long).flatten()
    if lengths.shape != (B,):
        raise ShapeError(f"lengths must be [B={B}]; got {tuple(lengths.shape)}.")
    if n == 0 or (lengths < 1).any() or (lengths > n).any():
        raise InputError(f"every length must lie in 1..n={n} (got {lengths.tolist()[:8]}...). Empty strings have "
                         "probability 0 in CNF; use next_token_logprobs to get P(EOS) at the empty prefix.")
    valid = torch.arange(n)[None, :] < lengths[:, None]
    tok = tokens.long()
    bad = valid & ((tok < 0) | (tok >= g.V))
    if bad.any():
        raise InputError(f"token ids must be terminal ids 0..{g.V - 1} at positions < length; found "
                         f"{tok[bad][:5].tolist()}.")
    tok = torch.where(valid, tok, torch.zeros_like(tok))
    return tok, lengths, valid


def _logmatmul(a: torch.Tensor, b_prob: torch.Tensor) -> torch.Tensor:
    """log(exp(a) @ b) with a shift per row of ``a`` (last dim contracted); b is in probability space."""
    m = _finite_or_zero(a.amax(-1, keepdim=True))
    return _log(torch.exp(a - m) @ b_prob) + m


def _combine_splits(Lft: torch.Tensor, Rgt: torch.Tensor, R2t: torch.Tensor, *,
                    differentiable: bool = False) -> torch.Tensor:
    """One CKY cell update for a batch of spans (spec §2.7): log β[X] = log Σ_s Σ_{Y,Z} R[X,Y,Z]·exp(Lft[s,Y] +
    Rgt[s,Z]). ``Lft``/``Rgt`` are [B, m, S, N] log inside vectors of the left/right parts of the S candidate
    splits of each of the m spans; ``R2t`` is R reshaped to [N², N]. A shifted exp–einsum–matmul–log contraction
    (memory O(B·m·N²)); all-(−inf) inputs give −inf, never NaN. Shared by `inside` (S = w−1 splits per width) and
    `interplab.grammar.dyadic.dyadic_inside` (S = 1: the middle split of an aligned block)."""
    B, m, _, N = Lft.shape
    mL = _finite_or_zero(Lft.detach().amax(dim=(2, 3), keepdim=True))
    mR = _finite_or_zero(Rgt.detach().amax(dim=(2, 3), keepdim=True))
    P = torch.einsum("bijy,bijz->biyz", torch.exp(Lft - mL), torch.exp(Rgt - mR))  # [B, m, N, N]
    shift = (mL + mR).reshape(B, m, 1)
    prod = P.reshape(B, m, N * N) @ R2t
    if differentiable:  # no inf gradients from log(0)
        prod = prod.clamp_min(torch.finfo(prod.dtype).tiny)
    return _log(prod) + shift


@dataclass
class Chart:
    """Inside chart in diagonal storage; ``widths[w]`` is [B, n-w+1, N] (``widths[0]`` is None)."""

    widths: list
    lengths: torch.Tensor

    @property
    def n(self) -> int:
        return len(self.widths) - 1

    def span(self, i: int, j: int) -> torch.Tensor:
        """log β[b, :, i, j] as [B, N]."""
        return self.widths[j - i][:, i]

    def ending_at(self, p: int) -> torch.Tensor:
        """[B, p, N] with [b, i] = log β[:, i, p] for i = 0..p-1."""
        return torch.stack([self.widths[p - i][:, i] for i in range(p)], dim=1)

    def dense(self) -> torch.Tensor:
        """[B, n+1, n+1, N] with [b, i, j] = log β[:, i, j] (-inf where j <= i)."""
        B, _, N = self.widths[1].shape
        n = self.n
        out = torch.full((B, n + 1, n + 1, N), NEG_INF, dtype=self.widths[1].dtype)
        for w in range(1, n + 1):
            idx = torch.arange(n - w + 1)
            out[:, idx, idx + w] = self.widths[w]
        return out


def inside(g: PCFG, tokens, lengths=None, *, span_potentials: torch.Tensor | None = None) -> Chart:
    """Log inside chart log β (spec §2.2, §2.7). ``span_potentials`` (optional, [B, n+1, n+1, N]) is added to
    every chart entry; its gradient of `log_prob` gives span marginals (used by `span_marginals`)."""
    tok, lengths, _ = _check(g, tokens, lengths)
    B, n = tok.shape
    N = g.N
    logLx = _log(g.lexical)
    R2t = g.binary.reshape(N, N * N).T.contiguous()  # [N², N]
    widths: list = [None, logLx.T[tok]]  # [B, n, N]
    if span_potentials is not None:
        idx = torch.arange(n)
        widths[1] = widths[1] + span_potentials[:, idx, idx + 1]
    for w in range(2, n + 1):
        m = n - w + 1
        Lft = torch.stack([widths[j][:, :m] for j in range(1, w)], dim=2)  # [B, m, w-1, N]
        Rgt = torch.stack([widths[w - j][:, j:j + m] for j in range(1, w)], dim=2)
        cur = _combine_splits(Lft, Rgt, R2t, differentiable=span_potentials is not None)
        if span_potentials is not None:
            idx = torch.arange(m)
            cur = cur + span_potentials[:, idx, idx + w]
        widths.append(cur)
    return Chart(widths, lengths)


def _root_logprob(g: PCFG, beta_spans: torch.Tensor) -> torch.Tensor:
    """log Σ_A root[A] β[A] over the last dim."""
    return _logmatmul(beta_spans, g.root.to(beta_spans.dtype)[:, None])[..., 0]


def log_prob(g: PCFG, tokens, lengths=None, *, chart: Chart | None = None) -> torch.Tensor:
    """log P(w) = log Σ_A root[A] β[A, 0, len] per sequence, [B]."""
    if chart is None:
        chart = inside(g, tokens, lengths)
    lengths = chart.lengths
    full = torch.stack([chart.widths[int(L)][b, 0] for b, L in enumerate(lengths.tolist())])  # [B, N]
    return _root_logprob(g, full)


@dataclass
class ViterbiResult:
    """Best parse per sequence: ``log_prob`` [B] and ``trees`` (list of `Tree`, None where impossible)."""

    log_prob: torch.Tensor
    trees: list


def viterbi(g: PCFG, tokens, lengths=None) -> ViterbiResult:
    """Most probable derivation (max-plus version of `inside`, with backpointers)."""
    tok, lengths, _ = _check(g, tokens, lengths)
    B, n = tok.shape
    N = g.N
    logR = _log(g.binary).reshape(1, 1, N, N * N)
    logLx = _log(g.lexical)
    best: list = [None, logLx.T[tok]]
    bps: list = [None, None]  # [B, m, N] split offset j, and rule index y*N+z
    for w in range(2, n + 1):
        m = n - w + 1
        cur = torch.full((B, m, N), NEG_INF, dtype=g.dtype)
        bj = torch.zeros((B, m, N), dtype=torch.long)
        brule = torch.zeros((B, m, N), dtype=torch.long)
        for j in range(1, w):
            pair = (best[j][:, :m, :, None] + best[w - j][:, j:j + m, None, :]).reshape(B, m, 1, N * N)
            val, arg = (pair + logR).max(dim=-1)  # [B, m, N]
            better = val > cur
            cur = torch.where(better, val, cur)
            bj = torch.where(better, torch.full_like(bj, j), bj)
            brule = torch.where(better, arg, brule)
        best.append(cur)
        bps.append((bj, brule))
    logroot = _log(g.root)
    trees, lps = [], []
    for b in range(B):
        L = int(lengths[b])
        scores = best[L][b, 0] + logroot
        A = int(scores.argmax())
        lp = float(scores[A])
        lps.append(lp)
        if lp == NEG_INF:
            trees.append(None)
            continue
        spans, parent = [], []
        stack = [(0, L, A, 0, -1)]
        while stack:
            i, k, X, d, par = stack.pop()
            idx = len(spans)
            spans.append([i, k, X, d])
            parent.append(par)
            w = k - i
            if w == 1:
                continue
            bj, brule = bps[w]
            j = int(bj[b, i, X])
            Y, Z = divmod(int(brule[b, i, X]), N)
            stack.append((i + j, k, Z, d + 1, idx))
            stack.append((i, i + j, Y, d + 1, idx))
        import numpy as np
        trees.append(Tree(np.asarray(spans, dtype=np.int64), np.asarray(parent, dtype=np.int64), lp, L))
    return ViterbiResult(torch.tensor(lps, dtype=g.dtype), trees)


@dataclass
class PrefixResult:
    """Output of `prefix` (all log-space; p indexes prefix length 0..n):

    ``log_F`` [B, n+1, N] pending-demand vectors; ``log_S`` [B, n+1, V] next-token scores log PP(w≤p v);
    ``log_eos`` [B, n+1] log β_root[0, p] (-inf at p=0); ``log_pp`` [B, n+1] log PP(w≤p) (0 at p=0);
    ``valid`` [B, n+1] bool, p <= length. Entries with p > length are -inf."""

    log_F: torch.Tensor
    log_S: torch.Tensor
    log_eos: torch.Tensor
    log_pp: torch.Tensor
    valid: torch.Tensor
    chart: Chart

    def next_token_logprobs(self) -> torch.Tensor:
        """[B, n+1, V+1]: log p_G(v | w≤p) for the V terminals, last column EOS. -inf rows where p > length or
        where the prefix itself is impossible."""
        scores = torch.cat([self.log_S, self.log_eos[..., None]], dim=-1)
        pp = self.log_pp[..., None]
        ok = torch.isfinite(pp)
        out = torch.where(ok, scores - torch.where(ok, pp, torch.zeros_like(pp)), torch.full_like(scores, NEG_INF))
        return torch.where(self.valid[..., None], out, torch.full_like(out, NEG_INF))


def prefix(g: PCFG, tokens, lengths=None, *, chart: Chart | None = None, check: bool = True,
           check_tol: float | None = None) -> PrefixResult:
    """Forward pending-demand pass (spec §2.4): F_0 = root, F_p[Z] = Σ_{i<p} Σ_{X,Y} F_i[X] D[X,Y,Z] β[Y,i,p];
    scores S_p = F_p · EL; EOS_p = root · β[:,0,p]; PP(w≤p) = S_{p-1}[w_p]. With ``check`` asserts the identity
    Σ_v S_p[v] + EOS_p = PP(w≤p) where PP > 0 (tolerance 1e-8 in float64, 1e-3 in float32, relative in log space)."""
    tok, lengths, _ = _check(g, tokens, lengths)
    if chart is None:
        chart = inside(g, tok, lengths)
    B, n = tok.shape
    N, V = g.N, g.V
    cl = g.closure()
    D2 = cl["D"].reshape(N, N * N).to(g.dtype)
    EL = cl["EL"].to(g.dtype)
    logroot = _log(g.root)
    log_F = [logroot.expand(B, N)]
    Gs = []
    for p in range(1, n + 1):
        Gs.append(_logmatmul(log_F[p - 1], D2).reshape(B, N, N))  # G_{p-1}[b, Y, Z]
        G = torch.stack(Gs, dim=1)  # [B, p, N, N]
        beta = chart.ending_at(p)  # [B, p, N], [b,i,Y] = log β[Y, i, p]
        mG = _finite_or_zero(G.amax(dim=(1, 2, 3), keepdim=True))
        mb = _finite_or_zero(beta.amax(dim=(1, 2), keepdim=True))
        F = torch.einsum("biyz,biy->bz", torch.exp(G - mG), torch.exp(beta - mb))
        log_F.append(_log(F) + mG.reshape(B, 1) + mb.reshape(B, 1))
    log_F = torch.stack(log_F, dim=1)  # [B, n+1, N]
    log_S = _logmatmul(log_F, EL)  # [B, n+1, V]
    eos = [torch.full((B,), NEG_INF, dtype=g.dtype)]
    for p in range(1, n + 1):
        eos.append(_root_logprob(g, chart.widths[p][:, 0]))
    log_eos = torch.stack(eos, dim=1)
    pp = [torch.zeros(B, dtype=g.dtype)]
    for p in range(1, n + 1):
        pp.append(log_S[:, p - 1].gather(1, tok[:, p - 1:p])[:, 0])
    log_pp = torch.stack(pp, dim=1)
    valid = torch.arange(n + 1)[None, :] <= lengths[:, None]
    if check:
        total = torch.logsumexp(torch.cat([log_S, log_eos[..., None]], -1), -1)
        fin = valid & torch.isfinite(log_pp)
        tol = check_tol if check_tol is not None else (1e-8 if g.dtype == torch.float64 else 1e-3)
        err = (total - log_pp).abs()[fin]
        if err.numel() and float(err.max()) > tol:
            raise AssertionError(f"prefix identity Σ_v S_p[v] + EOS_p = PP violated (max log err {float(err.max()):.3g}); "
                                 "the grammar may be nearly non-tight or the dtype too coarse.")
    neg = torch.full_like(log_pp, NEG_INF)
    log_pp = torch.where(valid, log_pp, neg)
    log_eos = torch.where(valid, log_eos, neg)
    log_S = torch.where(valid[..., None], log_S, torch.full_like(log_S, NEG_INF))
    log_F = torch.where(valid[..., None], log_F, torch.full_like(log_F, NEG_INF))
    return PrefixResult(log_F, log_S, log_eos, log_pp, valid, chart)


def prefix_log_prob(g: PCFG, tokens, lengths=None) -> torch.Tensor:
    """log PP(w≤p) for p = 0..n, [B, n+1] (0 at p = 0, -inf for p > length)."""
    return prefix(g, tokens, lengths).log_pp


def next_token_logprobs(g: PCFG, tokens, lengths=None, *, check: bool = True) -> torch.Tensor:
    """log p_G(· | w≤p) for p = 0..n over the V terminals and EOS (last column): [B, n+1, V+1]."""
    return prefix(g, tokens, lengths, check=check).next_token_logprobs()


def prefix_span_posteriors(g: PCFG, tokens, lengths=None, *, pre: PrefixResult | None = None) -> torch.Tensor:
    """log P(A spans (i, t] | w≤t) = log[(F_i E)[A] β[A, i, t] / PP(w≤t)] as [B, n+1 (i), n+1 (t), N]
    (-inf where i >= t or t > length)."""
    if pre is None:
        pre = prefix(g, tokens, lengths)
    chart = pre.chart
    E = g.closure()["E"].to(g.dtype)
    logFE = _logmatmul(pre.log_F, E)  # [B, n+1, N]
    dense = chart.dense()  # [B, n+1, n+1, N]
    pp = pre.log_pp  # [B, n+1]
    out = logFE[:, :, None, :] + dense - torch.where(torch.isfinite(pp), pp, torch.zeros_like(pp))[:, None, :, None]
    ok = (torch.isfinite(pp) & pre.valid)[:, None, :, None] & torch.isfinite(logFE)[:, :, None, :]
    return torch.where(ok & torch.isfinite(dense), out, torch.full_like(out, NEG_INF))


def span_marginals(g: PCFG, tokens, lengths=None) -> torch.Tensor:
    """Full-sentence span marginals μ(A, i, j) = out·β / P(w) as [B, n+1, n+1, N] (probability space; zero where
    j > length or j <= i), via the gradient of log P(w) with respect to additive span potentials."""
    tok, lengths, _ = _check(g, tokens, lengths)
    B, n = tok.shape
    u = torch.zeros(B, n + 1, n + 1, g.N, dtype=g.dtype, requires_grad=True)
    with torch.enable_grad():
        ch = inside(g, tok, lengths, span_potentials=u)
        full = torch.stack([ch.widths[int(L)][b, 0] for b, L in enumerate(lengths.tolist())])
        lp = torch.logsumexp(full + _log(g.root), dim=-1)
        ok = torch.isfinite(lp)
        if not ok.any():
            return torch.zeros(B, n + 1, n + 1, g.N, dtype=g.dtype)
        (grad,) = torch.autograd.grad(lp[ok].sum(), u)
    grad = torch.nan_to_num(grad, nan=0.0)
    return grad.detach()
