"""Probe fitting, all layers at once: ridge (closed form) and one-hidden-layer MLP probes, the 70/15/15 split by
sequence, scores (variance-weighted R² / accuracy) and the shuffled-label control."""
from __future__ import annotations

import math

import numpy as np
import torch

from interplab.probes.pcfg.targets import ProbeData

__all__ = ["features", "split_sequences", "score", "fit_linear", "fit_mlp", "shuffle_within_token"]


def features(res: dict, layers, d: ProbeData, span: bool) -> torch.Tensor:
    """[n_layers, n_examples, d_feat]: h_t, or [h_t; h_i; h_t - h_i] for span targets."""
    H = torch.stack([res[l] for l in layers], 0)  # [Lyr, B, T, d]
    b, t = torch.as_tensor(d.b), torch.as_tensor(d.t)
    ht = H[:, b, t]
    if not span:
        return ht
    hi = H[:, b, torch.as_tensor(d.i)]
    return torch.cat([ht, hi, ht - hi], -1)


def split_sequences(b: np.ndarray, n_seq: int, seed: int):
    """70/15/15 split by sequence."""
    perm = np.random.default_rng(seed).permutation(n_seq)
    a, c = int(0.7 * n_seq), int(0.85 * n_seq)
    part = np.empty(n_seq, int)
    part[perm[:a]], part[perm[a:c]], part[perm[c:]] = 0, 1, 2
    p = part[b]
    return p == 0, p == 1, p == 2


def score(kind: str, pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per layer: variance-weighted R² (multi-output) or accuracy. pred [Lyr, n, k], y [n, k]."""
    if kind == "acc":
        return (pred.argmax(-1) == y.argmax(-1)[None]).double().mean(-1)
    pred = torch.nan_to_num(pred, nan=0.0, posinf=0.0, neginf=0.0)
    sse = ((pred - y[None]) ** 2).sum((1, 2))
    sst = ((y - y.mean(0, keepdim=True)) ** 2).sum().clamp_min(1e-12)
    return 1 - sse / sst


def fit_linear(X: torch.Tensor, Y: torch.Tensor, tr, va, te, kind, lambdas=(1e-3, 1e-2, 1e-1, 1, 10, 100)):
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
        # G + λI is symmetric positive definite, so a Cholesky solve is exact here; it also avoids the batched LU of
        # the oneMKL 2024.2 in torch 2.13's CPU wheel, which with 2 threads on an AMD EPYC fails on [5, 192, 192]
        # float64 systems ("Pivots given to lu_solve must all be greater or equal to 1", DLASWP parameter 6)
        W = torch.cholesky_solve(XtY, torch.linalg.cholesky(G + lam * n_tr * eye / 100.0))
        pv = X[:, va] @ W + ym
        pt = X[:, te] @ W + ym
        sv, st = score(kind, pv, Y[va]), score(kind, pt, Y[te])
        better = sv > best_val
        best_val = torch.where(better, sv, best_val)
        best_te = torch.where(better, st, best_te)
    return best_te


def fit_mlp(X: torch.Tensor, Y: torch.Tensor, tr, va, te, kind, *, hidden: int = 64, epochs: int = 120,
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
                    sv = score(kind, fwd(va).double(), Y[va].double())
                    st = score(kind, fwd(te).double(), Y[te].double())
                better = sv > best_val
                best_val = torch.where(better, sv, best_val)
                best_te = torch.where(better, st, best_te)
    return best_te


def shuffle_within_token(y: np.ndarray, tok: np.ndarray, seed: int) -> np.ndarray:
    """Control task (after Hewitt & Liang): targets permuted among examples that share the current token (and the
    bucket, applied by the caller), so whatever is predictable from token identity stays and structure goes."""
    rng = np.random.default_rng(seed)
    out = y.copy()
    for v in np.unique(tok):
        idx = np.nonzero(tok == v)[0]
        out[idx] = y[rng.permutation(idx)]
    return out
