"""Steering baselines (spec §5 `draw_line_nopenalty`): the diffmean, PCA and logistic-probe directions, and one
batched scan of every direction × strength on a model."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from interplab.core.result import Result
from interplab.probes.stats import sem_halfwidth
from interplab.probes.crh.diffs import _read_site
from interplab.probes.crh.steering import _judge, steer_generate


def diffmean_direction(diffs) -> np.ndarray:
    """unit(mean d_i) (the repo's "mean-center" baseline is exactly this, B5)."""
    D = np.asarray(diffs, np.float64)
    m = D.mean(0)
    return m / np.linalg.norm(m)


def pca_direction(diffs, *, center: bool = False, orient: bool = True) -> np.ndarray:
    """Top principal direction of the diff matrix: uncentred SVD as in the repo (`center=False`); `orient=True`
    (fixed, B5) flips it so that ⟨u, mean d⟩ > 0 — the repo leaves the sign arbitrary."""
    D = np.asarray(diffs, np.float64)
    X = D - D.mean(0) if center else D
    w, V = np.linalg.eigh(X.T @ X) if X.shape[1] <= X.shape[0] else (None, None)
    if V is not None:
        u = V[:, -1]
    else:
        w, U = np.linalg.eigh(X @ X.T)
        u = X.T @ U[:, -1]
        u = u / np.linalg.norm(u)
    if orient and float(u @ D.mean(0)) < 0:
        u = -u
    return u


def probe_direction(acts_without, acts_with, *, steps: int = 200, lr: float = 0.1, seed: int = 0) -> np.ndarray:
    """Logistic-regression probe (with = 1, without = 0) on raw activations: bias, BCE, full-batch Adam (lr 0.1,
    200 steps) as in the repo; returns the unit weight vector."""
    import torch

    X = torch.as_tensor(np.concatenate([acts_without, acts_with], 0), dtype=torch.float32)
    y = torch.cat([torch.zeros(len(acts_without)), torch.ones(len(acts_with))])
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(X.shape[1], generator=g) * 0.01).requires_grad_(True)
    b = torch.zeros((), requires_grad=True)
    opt = torch.optim.Adam([w, b], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(X @ w + b, y)
        loss.backward()
        opt.step()
    u = w.detach().double().numpy()
    return u / np.linalg.norm(u)


@dataclass
class BaselineCurves(Result):
    """Baselines vs strength step (spec §5 `draw_line_nopenalty`).

    methods: method names; labels: [n_methods, n_samples, n_strengths]; strengths: [n_strengths]
    (absolute norms, per method the same grid scaled by `scales[m]`, recorded); directions:
    [n_methods, d]; texts: optional generated texts, flattened in (method, sample, strength) order;
    norms: [n_methods, n_strengths] the mean norm of the vectors each method actually added (a
    matched-norm control is checked against it, not against the grid)."""

    methods: list[str]
    labels: np.ndarray
    strengths: np.ndarray
    directions: np.ndarray
    config: dict = field(default_factory=dict)
    texts: list | None = None
    norms: np.ndarray | None = None

    def rates(self, label: int = 2) -> tuple[np.ndarray, np.ndarray]:
        """Mean and 1.96·SEM across samples of the `label` indicator: each [n_methods, n_strengths]."""
        hit = (self.labels == label).astype(np.float64)
        return hit.mean(1), sem_halfwidth(hit, axis=1)

    def to_frame(self):
        import pandas as pd

        rows = []
        m2, c2 = self.rates(2)
        m3, c3 = self.rates(3)
        for i, name in enumerate(self.methods):
            for k, L in enumerate(self.strengths):
                rows.append({"method": name, "step": k + 1, "strength": float(L), "concept_rate": m2[i, k],
                             "concept_ci": c2[i, k], "gibberish_rate": m3[i, k], "gibberish_ci": c3[i, k]})
        return pd.DataFrame(rows)


def baseline_scan(model, prompts: Sequence, directions: dict, *, layer: int, judge, strengths,
                  positions="prompt", site: str = "resid_post", max_new_tokens: int = 16, max_rows: int = 256,
                  greedy: bool = True, keep_texts: bool = False, progress=None) -> BaselineCurves:
    """Steer every prompt with u_m·L_k for each method direction u_m (unit-normalised here) and strength L_k, all
    methods in one batched run. Baseline protocol: `prompt` positions (prefill only), as in the repo's scripts."""
    names = list(directions)
    U = np.stack([np.asarray(directions[n], np.float64).ravel() for n in names])
    U = U / np.linalg.norm(U, axis=1, keepdims=True)
    L = np.asarray(strengths, np.float64).ravel()
    prompts = list(prompts)
    M, S, K = len(names), len(prompts), L.size
    V = U[:, None, None, :] * L[None, None, :, None]                              # [M, 1, K, d]
    V = np.broadcast_to(V, (M, S, K, U.shape[1])).reshape(M * S * K, -1)
    rows_p = [p for _ in range(M) for p in prompts for _ in range(K)]
    run = steer_generate(model, rows_p, V, site=_read_site(layer, site), positions=positions,
                         max_new_tokens=max_new_tokens, max_rows=max_rows, greedy=greedy, progress=progress)
    labels = _judge(judge, run.texts).reshape(M, S, K)
    norms = np.linalg.norm(V.reshape(M, S, K, -1), axis=-1).mean(1)
    return BaselineCurves(methods=names, labels=labels, strengths=L, directions=U,
                          config={"layer": layer, "positions": positions, "n_calls": run.n_calls,
                                  "max_new_tokens": max_new_tokens, "model": getattr(model, "name", "?")},
                          texts=run.texts if keep_texts else None, norms=norms)
