"""Layer geometry: participation ratio, effective rank, a streaming covariance accumulator, and per-layer geometry of
two models on identical inputs (the "Terminal Expansion" analysis of hyperfitting; spec
methods/hyperfit_geometry.md §2.4).

Definitions (X in R^{N x d}, centred; lambda = eigenvalues of the sample covariance, lambda_i = sigma_i^2 / (N - 1)):

* participation ratio  PR = (sum lambda)^2 / sum lambda^2 = tr(C)^2 / ||C||_F^2   (no eigendecomposition needed)
* effective rank       erank = exp(H(p)), p = lambda / sum lambda  (Roy & Vetterli 2007; 0 log 0 = 0)
* standardised PR      PR of the correlation matrix (per-dimension standardisation)
* DeltaDim_l           PR_target,l - PR_base,l

`CovarianceAccumulator` keeps a float64 running mean and co-moment matrix (Chan et al.'s pairwise update), so a
dataset-scale covariance needs O(d^2) memory instead of storing N x d states; two accumulators merge exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from interplab.core.errors import ConfigError, DataError, InputError, ShapeError
from interplab.core.result import Result
from interplab.probes.hyperfit.inputs import context_prompts, generate_continuations, tokenize_texts

__all__ = [
    "participation_ratio", "effective_rank", "pr_from_spectrum", "erank_from_spectrum", "covariance_spectrum",
    "twonn_dimension", "pr_leave_one_out", "HEADLINE_ESTIMATOR", "CovarianceAccumulator",
    "PairedStatsAccumulator", "LayerGeometryConfig",
    "LayerGeometryResult", "compute_layer_geometry", "layer_geometry", "GeometryReportConfig", "GeometryReport",
    "geometry_report",
]


# ----------------------------------------------------------------------------------------------------------------
# spectra
# ----------------------------------------------------------------------------------------------------------------
def _as_2d_float64(X, name: str = "X") -> torch.Tensor:
    if isinstance(X, np.ndarray):
        X = torch.from_numpy(X)
    if not isinstance(X, torch.Tensor):
        try:
            X = torch.as_tensor(np.asarray(X))
        except Exception as exc:  # pragma: no cover - defensive
            raise InputError(f"{name} must be an array or tensor of shape [N, d], got {type(X).__name__}") from exc
    if X.ndim != 2:
        raise ShapeError(f"{name} must have shape [N, d] (N samples, d features); got shape {tuple(X.shape)}. "
                         "Flatten batch/position axes first, e.g. X.reshape(-1, X.shape[-1]).")
    if X.shape[0] < 2:
        raise ShapeError(f"{name} needs at least 2 samples (rows) to form a covariance; got {X.shape[0]}")
    if not torch.is_floating_point(X):
        X = X.to(torch.float64)
    return X.detach().to("cpu", torch.float64)


def pr_from_spectrum(lam) -> float:
    """Participation ratio (sum lambda)^2 / sum lambda^2 of a vector of (co)variance eigenvalues."""
    lam = torch.as_tensor(lam, dtype=torch.float64).flatten()
    if lam.numel() == 0:
        raise ShapeError("the spectrum is empty")
    lam = lam.clamp_min(0.0)  # tiny negative eigenvalues are round-off
    s2 = float((lam * lam).sum())
    if s2 == 0.0:
        return 0.0
    return float(lam.sum()) ** 2 / s2


def erank_from_spectrum(lam) -> float:
    """Entropy effective rank exp(H(lambda / sum lambda)) with 0 log 0 = 0."""
    lam = torch.as_tensor(lam, dtype=torch.float64).flatten().clamp_min(0.0)
    tot = float(lam.sum())
    if tot == 0.0:
        return 0.0
    p = lam / tot
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def covariance_spectrum(X, *, center: bool = True) -> torch.Tensor:
    """Eigenvalues (descending, float64) of the sample covariance of X [N, d], via the SVD of the centred data:
    lambda_i = sigma_i^2 / (N - 1)."""
    X = _as_2d_float64(X)
    if center:
        X = X - X.mean(0, keepdim=True)
    s = torch.linalg.svdvals(X)
    return (s * s) / (X.shape[0] - 1)


def participation_ratio(X, *, center: bool = True, standardize: bool = False) -> float:
    """Participation ratio of the rows of X [N, d]: tr(C)^2 / tr(C^2) with C the sample covariance.

    Equal to (sum lambda)^2 / sum lambda^2 over the covariance eigenvalues, but computed from C directly (exact, no
    eigendecomposition). Invariant to scale and to orthogonal rotations of the feature axes. `standardize=True`
    divides each dimension by its standard deviation first (PR of the correlation matrix; constant dimensions are
    dropped)."""
    X = _as_2d_float64(X)
    if center:
        X = X - X.mean(0, keepdim=True)
    N, d = X.shape
    if standardize:
        sd = X.pow(2).sum(0).div(N - 1).sqrt()
        keep = sd > 0
        X = X[:, keep] / sd[keep]
        d = X.shape[1]
    if d == 0:
        return 0.0
    # The smaller Gram matrix has the same non-zero eigenvalues.
    G = X.T @ X if d <= N else X @ X.T
    tr = float(torch.diagonal(G).sum())
    fro2 = float((G * G).sum())
    return 0.0 if fro2 == 0.0 else tr * tr / fro2


def effective_rank(X, *, center: bool = True) -> float:
    """Entropy effective rank exp(H(p)) of the rows of X [N, d], p = normalised covariance eigenvalues."""
    return erank_from_spectrum(covariance_spectrum(X, center=center))


def twonn_dimension(X, *, max_points: int = 5000, discard_fraction: float = 0.1, seed: int = 0) -> float:
    """TwoNN intrinsic dimension (Facco et al. 2017). With mu = r2 / r1 (second- over first-nearest-neighbour
    distance), the empirical CDF F satisfies -log(1 - F(mu)) = d log mu; d is the least-squares slope through the
    origin after discarding the largest `discard_fraction` of the mu (their tail is noisy). Uses at most `max_points`
    randomly subsampled rows (the pairwise distances are O(n^2))."""
    X = _as_2d_float64(X)
    if X.shape[0] < 3:
        raise ShapeError("TwoNN needs at least 3 points")
    if X.shape[0] > max_points:
        g = torch.Generator().manual_seed(seed)
        X = X[torch.randperm(X.shape[0], generator=g)[:max_points]]
    D = torch.cdist(X, X)
    D.fill_diagonal_(float("inf"))
    r, _ = D.topk(2, dim=1, largest=False)
    ok = r[:, 0] > 0  # duplicate points give r1 = 0
    mu = (r[ok, 1] / r[ok, 0]).sort().values
    n = mu.numel()
    F = torch.arange(1, n + 1, dtype=torch.float64) / n
    n_keep = max(2, int(math.floor(n * (1.0 - discard_fraction))))
    x = torch.log(mu[:n_keep])
    y = -torch.log1p(-F[:n_keep].clamp_max(1 - 1e-12))
    return float((x * y).sum() / (x * x).sum())


# The headline dimension estimator of the Terminal Expansion verdict (docs/hyperfit.md): PR of the
# correlation matrix, position 0 excluded. Raw PR on a real model is set by a few massive
# coordinates (SmolLM2's block 29: one coordinate carries ~20 % of the variance, raw PR 8.8 against
# 68 at block 28) and position 0 carries a massive activation (~9x the median token norm) that sets
# even the standardised PR; standardising gives every coordinate one unit of variance, and position
# 0 is dropped. Raw PR is reported beside it.
HEADLINE_ESTIMATOR = "pr_std"


# ----------------------------------------------------------------------------------------------------------------
# streaming statistics
# ----------------------------------------------------------------------------------------------------------------
def _rows(x, mask, d: int, groups: int | None = None) -> torch.Tensor:
    """Select the counted rows: [..., d] -> [n, d], or with groups [G, ..., d] -> [G, n, d] (one mask for all)."""
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(np.asarray(x))
    if x.shape[-1] != d:
        raise ShapeError(f"expected the last axis to have size d={d}, got shape {tuple(x.shape)}")
    if groups is not None and (x.ndim < 2 or x.shape[0] != groups):
        raise ShapeError(f"a grouped accumulator needs x of shape [{groups}, ..., {d}]; got {tuple(x.shape)}")
    lead = tuple(x.shape[1:-1]) if groups is not None else tuple(x.shape[:-1])
    if mask is not None:
        mask = torch.as_tensor(mask, dtype=torch.bool, device=x.device)
        if tuple(mask.shape) != lead:
            raise ShapeError(f"mask shape {tuple(mask.shape)} must equal the data's leading shape {lead}")
        x = x[:, mask] if groups is not None else x[mask]
    return x.reshape(groups, -1, d) if groups is not None else x.reshape(-1, d)


def _pr_of_cov(C: torch.Tensor, standardize: bool = False) -> torch.Tensor:
    """PR = tr(C)^2 / ||C||_F^2 for C [..., d, d] (batched). standardize: PR of the correlation matrix."""
    if standardize:
        sd = torch.diagonal(C, dim1=-2, dim2=-1).clamp_min(0).sqrt()
        inv = torch.where(sd > 0, 1.0 / sd.clamp_min(1e-300), torch.zeros_like(sd))
        C = C * inv[..., :, None] * inv[..., None, :]
    tr = torch.diagonal(C, dim1=-2, dim2=-1).sum(-1)
    fro2 = (C * C).sum((-2, -1))
    return torch.where(fro2 > 0, tr * tr / fro2.clamp_min(1e-300), torch.zeros_like(tr))


def pr_leave_one_out(C: torch.Tensor,
                     standardize: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """How much one coordinate sets the PR: for C [..., d, d], the largest relative change |PR_-j /
    PR - 1| over dropping one coordinate j, and that j ([...] float64, [...] long). Exact from C:
    dropping j removes C_jj from the trace and row + column j from the squared Frobenius norm. A
    massive dimension (one coordinate carrying a large share of the variance) moves the raw PR by a
    large factor; standardising (PR of the correlation matrix) gives every coordinate the same
    weight."""
    C = torch.as_tensor(C, dtype=torch.float64)
    if standardize:
        sd = torch.diagonal(C, dim1=-2, dim2=-1).clamp_min(0).sqrt()
        inv = torch.where(sd > 0, 1.0 / sd.clamp_min(1e-300), torch.zeros_like(sd))
        C = C * inv[..., :, None] * inv[..., None, :]
    diag = torch.diagonal(C, dim1=-2, dim2=-1)
    tr = diag.sum(-1, keepdim=True)
    fro2 = (C * C).sum((-2, -1))[..., None]
    tr_j = tr - diag
    fro2_j = fro2 - 2 * (C * C).sum(-1) + diag * diag
    pr = torch.where(fro2 > 0, tr * tr / fro2.clamp_min(1e-300), torch.zeros_like(tr))
    pr_j = torch.where(fro2_j > 0, tr_j * tr_j / fro2_j.clamp_min(1e-300), torch.zeros_like(tr_j))
    change = torch.where(pr > 0, (pr_j / pr.clamp_min(1e-300) - 1).abs(), torch.zeros_like(pr_j))
    best, j = change.max(-1)
    return best, j


class CovarianceAccumulator:
    """Running mean and covariance of d-dimensional rows in float64, O(d^2) memory, exactly mergeable.

    >>> acc = CovarianceAccumulator(d)
    >>> for batch in batches: acc.update(hidden[b, p, d], mask=real[b, p])
    >>> acc.participation_ratio(), acc.effective_rank(), acc.cov

    With `groups=G` it keeps G independent statistics updated by one batched op (e.g. every layer at once):
    `update(x[G, b, p, d], mask[b, p])`; then `mean` is [G, d], `cov` [G, d, d] and the PR / erank methods return
    [G] tensors.

    The update is Chan et al.'s pairwise combination: each chunk is centred on its own mean (numerically stable even
    when the mean is large relative to the spread) and merged with M2 += M2_chunk + delta delta^T n_a n_b / n.
    Statistics live on `device`."""

    def __init__(self, d: int, *, groups: int | None = None, device: str | torch.device | None = "cpu"):
        if int(d) <= 0:
            raise ConfigError(f"d must be a positive integer, got {d}")
        if groups is not None and int(groups) <= 0:
            raise ConfigError(f"groups must be a positive integer or None, got {groups}")
        self.d = int(d)
        self.groups = None if groups is None else int(groups)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.n = 0
        shape = () if self.groups is None else (self.groups,)
        self.mean = torch.zeros(*shape, self.d, dtype=torch.float64, device=self.device)
        self.m2 = torch.zeros(*shape, self.d, self.d, dtype=torch.float64, device=self.device)

    def __repr__(self) -> str:
        g = "" if self.groups is None else f", groups={self.groups}"
        return f"CovarianceAccumulator(d={self.d}{g}, n={self.n})"

    def update(self, x, mask=None) -> "CovarianceAccumulator":
        """Add rows: x [..., d] (grouped: [G, ..., d]) with an optional bool mask over the row axes (True = count
        this row, e.g. real non-BOS tokens; the same mask for every group)."""
        rows = _rows(x, mask, self.d, self.groups)
        nb = rows.shape[-2]
        if nb == 0:
            return self
        rows = rows.to(self.device, torch.float64)
        mb = rows.mean(-2)
        c = rows - mb.unsqueeze(-2)
        m2b = c.transpose(-1, -2) @ c
        self._combine(nb, mb, m2b)
        return self

    def _combine(self, nb: int, mb: torch.Tensor, m2b: torch.Tensor) -> None:
        na = self.n
        if na == 0:
            self.n, self.mean, self.m2 = nb, mb.clone(), m2b.clone()
            return
        n = na + nb
        delta = mb - self.mean
        self.mean = self.mean + delta * (nb / n)
        self.m2 = self.m2 + m2b + (delta.unsqueeze(-1) * delta.unsqueeze(-2)) * (na * nb / n)
        self.n = n

    def merge(self, other: "CovarianceAccumulator") -> "CovarianceAccumulator":
        """Fold another accumulator's rows into this one (in place); the result equals one pass over both."""
        if not isinstance(other, CovarianceAccumulator) or other.d != self.d or other.groups != self.groups:
            raise ShapeError(f"can only merge a CovarianceAccumulator with d={self.d}, groups={self.groups}")
        if other.n:
            self._combine(other.n, other.mean.to(self.device), other.m2.to(self.device))
        return self

    @property
    def cov(self) -> torch.Tensor:
        """Unbiased sample covariance [d, d] (grouped: [G, d, d]); divides by n - 1."""
        if self.n < 2:
            raise DataError(f"the covariance needs at least 2 rows; this accumulator has seen {self.n}")
        return self.m2 / (self.n - 1)

    def eigenvalues(self) -> torch.Tensor:
        """Covariance eigenvalues, descending, float64, clamped at 0 ([d] or [G, d])."""
        return torch.linalg.eigvalsh(self.cov).flip(-1).clamp_min(0.0)

    def participation_ratio(self, *, standardize: bool = False):
        """PR of the covariance (float; grouped: [G] tensor). standardize: PR of the correlation matrix (constant
        dimensions contribute nothing)."""
        pr = _pr_of_cov(self.cov, standardize)
        return float(pr) if self.groups is None else pr

    def effective_rank(self):
        lam = self.eigenvalues()
        p = lam / lam.sum(-1, keepdim=True).clamp_min(1e-300)
        h = -(p * torch.log(torch.where(p > 0, p, torch.ones_like(p)))).sum(-1)
        er = torch.where(lam.sum(-1) > 0, h.exp(), torch.zeros_like(h))
        return float(er) if self.groups is None else er

    def state_dict(self) -> dict[str, Any]:
        return {"d": self.d, "groups": self.groups, "n": self.n, "mean": self.mean.cpu(), "m2": self.m2.cpu()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any], device="cpu") -> "CovarianceAccumulator":
        acc = cls(int(state["d"]), groups=state.get("groups"), device=device)
        acc.n = int(state["n"])
        acc.mean = torch.as_tensor(state["mean"], dtype=torch.float64).to(acc.device).clone()
        acc.m2 = torch.as_tensor(state["m2"], dtype=torch.float64).to(acc.device).clone()
        return acc


class PairedStatsAccumulator:
    """Running means of cos(a_t, b_t) and ||a_t - b_t||_2 over paired rows of two models' states on identical inputs
    (plus the mean norms of each), in float64. With `groups=G` the inputs are [G, ..., d] and every statistic is a
    [G] tensor (one batched op for all layers)."""

    def __init__(self, groups: int | None = None):
        self.groups = groups
        self.n = 0
        z = 0.0 if groups is None else torch.zeros(groups, dtype=torch.float64)
        self.sum_cos, self.sum_l2, self.sum_norm_a, self.sum_norm_b = z, z, z, z

    def update(self, a, b, mask=None) -> "PairedStatsAccumulator":
        if tuple(a.shape) != tuple(b.shape):
            raise ShapeError(f"paired states must have equal shapes; got {tuple(a.shape)} and {tuple(b.shape)}")
        d = a.shape[-1]
        a = _rows(a, mask, d, self.groups).to(torch.float64)
        b = _rows(b, mask, d, self.groups).to(torch.float64)
        if a.shape[-2] == 0:
            return self
        na, nb = a.norm(dim=-1), b.norm(dim=-1)
        cos = (a * b).sum(-1) / (na * nb).clamp_min(1e-300)
        red = (lambda t: float(t.sum())) if self.groups is None else (lambda t: t.sum(-1).cpu())
        self.n += a.shape[-2]
        self.sum_cos = self.sum_cos + red(cos)
        self.sum_l2 = self.sum_l2 + red((a - b).norm(dim=-1))
        self.sum_norm_a = self.sum_norm_a + red(na)
        self.sum_norm_b = self.sum_norm_b + red(nb)
        return self

    def means(self) -> dict:
        if self.n == 0:
            raise DataError("no paired rows were accumulated")
        n = self.n
        return {"cos": self.sum_cos / n, "l2": self.sum_l2 / n, "norm_a": self.sum_norm_a / n,
                "norm_b": self.sum_norm_b / n}


# ----------------------------------------------------------------------------------------------------------------
# two models, every layer
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class LayerGeometryConfig:
    """How `compute_layer_geometry` / `layer_geometry` measured the two models.

    Fields:
        sites: site families to measure: "resid_post" (every block output, pre-final-norm, layer = block index),
            "final_norm" (output of the final norm, i.e. the unembedding input; reported at layer = n_layers - 1),
            "resid_pre" (block inputs; resid_pre.0 is the embedding output).
        exclude_bos: drop the first real position of every row (the BOS token when the tokenizer prepends one; the
            attention-sink position otherwise), whose massive activations dominate the covariance.
        batch_size: texts per forward pass.
        max_tokens: truncate every text to this many tokens (None = the model's context length).
        model_a, model_b: names of the two models (recorded for provenance; a = base, b = target).
        weights_mode: how the weights were loaded (interplab measures raw HF weights; recorded with the result).
    """

    sites: tuple[str, ...] = ("resid_post", "final_norm")
    exclude_bos: bool = True
    batch_size: int = 16
    max_tokens: int | None = None
    model_a: str = ""
    model_b: str = ""
    weights_mode: str = "raw"


_SITE_FAMILIES = ("resid_pre", "resid_post", "final_norm")


@dataclass
class LayerGeometryResult(Result):
    """Per-layer geometry of two models on identical inputs.

    `frame` has one row per (site, layer): layer, site, pr_a, pr_b, delta_pr (= DeltaDim = pr_b - pr_a), erank_a,
    erank_b, cos, l2 (mean cosine and mean L2 distance between the paired states), plus pr_std_a/pr_std_b
    (standardised PR), norm_a/norm_b (mean state norms) and n_tokens. `spectra_a/spectra_b` map "site.layer" to the
    descending covariance eigenvalues (for eigen-spectrum plots)."""

    config: LayerGeometryConfig
    frame: Any  # pandas.DataFrame
    spectra_a: dict[str, np.ndarray] = field(default_factory=dict)
    spectra_b: dict[str, np.ndarray] = field(default_factory=dict)

    def to_frame(self):
        return self.frame.copy()

    def delta_dim(self, site: str = "resid_post", layer: int = -1) -> float:
        """DeltaDim at one layer (default: the last one) of one site family."""
        df = self.frame[self.frame["site"] == site]
        if df.empty:
            raise DataError(f"site {site!r} was not measured; measured: {sorted(set(self.frame['site']))}")
        row = df.iloc[layer] if layer < 0 else df[df["layer"] == layer].iloc[0]
        return float(row["delta_pr"])


def _site_names(families: Sequence[str], n_layers: int) -> list[tuple[str, int, str]]:
    """(family, layer, canonical site name) for every requested family."""
    out = []
    for fam in families:
        if fam not in _SITE_FAMILIES:
            raise ConfigError(f"unknown site family {fam!r}; choose from {_SITE_FAMILIES}")
        if fam == "final_norm":
            out.append((fam, n_layers - 1, "final_norm"))
        else:
            out.extend((fam, layer, f"{fam}.{layer}") for layer in range(n_layers))
    return out


def _batches(ids: list[list[int]], batch_size: int) -> Iterable[list[list[int]]]:
    for i in range(0, len(ids), batch_size):
        yield ids[i:i + batch_size]


def _real_mask(batch, exclude_bos: bool) -> torch.Tensor:
    mask = batch.attention_mask.bool()
    if exclude_bos:
        mask = mask & (batch.position_ids != 0)
    return mask


def _check_pair(model_a, model_b, texts, max_tokens, batch_size) -> list[list[int]]:
    if model_a.n_layers != model_b.n_layers or model_a.d_model != model_b.d_model:
        raise ShapeError(f"the two models must share n_layers and d_model; got ({model_a.n_layers}, "
                         f"{model_a.d_model}) and ({model_b.n_layers}, {model_b.d_model})")
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    ids = tokenize_texts(model_a, texts, max_tokens)
    if ids != tokenize_texts(model_b, texts, max_tokens):
        raise InputError("the two models tokenize the texts differently; geometry needs identical inputs "
                         "(use a descendant that shares the base tokenizer)")
    return ids


@dataclass
class _PassStats:
    """One token set's statistics: both models' covariances and the paired cos / L2 (every site at
    once)."""

    acc_a: CovarianceAccumulator
    acc_b: CovarianceAccumulator
    paired: PairedStatsAccumulator


def _geometry_pass(model_a, model_b, ids, names, variants: Sequence[bool], batch_size: int,
                   progress=None, base_stats: dict | None = None) -> dict[bool, _PassStats]:
    """Stream both models once over `ids`, accumulating one token set per `variants` entry
    (exclude_bos True / False). base_stats: model_a's accumulators from an earlier pass over the
    same ids (a base measured against several targets), so they are not accumulated again."""
    d, G = model_a.d_model, len(names)
    out = {v: _PassStats(base_stats[v] if base_stats else CovarianceAccumulator(d, groups=G),
                         CovarianceAccumulator(d, groups=G), PairedStatsAccumulator(groups=G))
           for v in variants}
    chunks = list(_batches(ids, batch_size))
    with torch.no_grad():
        for i, chunk in enumerate(chunks):
            out_a = model_a.run(chunk, capture=names, logits=False)
            out_b = model_b.run(chunk, capture=names, logits=False)
            xa = torch.stack([out_a.cache[s].detach().to("cpu", torch.float64) for s in names])
            xb = torch.stack([out_b.cache[s].detach().to("cpu", torch.float64) for s in names])
            for v, st in out.items():
                mask = _real_mask(out_a.batch, v).cpu()
                if not base_stats:
                    st.acc_a.update(xa, mask)
                st.acc_b.update(xb, mask)
                st.paired.update(xa, xb, mask)
            if progress is not None:
                progress((i + 1) / len(chunks))
    return out


def _geometry_frame(st: _PassStats, site_list) -> tuple[Any, dict, dict]:
    import pandas as pd

    ea, eb = st.acc_a.eigenvalues(), st.acc_b.eigenvalues()
    pm = st.paired.means()
    ca, cb = st.acc_a.cov, st.acc_b.cov
    std_a, std_b = _pr_of_cov(ca, True), _pr_of_cov(cb, True)
    loo = {(k, std): pr_leave_one_out(c, std)
           for k, c in (("a", ca), ("b", cb)) for std in (False, True)}
    rows, spectra_a, spectra_b = [], {}, {}
    for g, (fam, layer, _s) in enumerate(site_list):
        pr_a, pr_b = pr_from_spectrum(ea[g]), pr_from_spectrum(eb[g])
        row = {
            "layer": layer, "site": fam, "pr_a": pr_a, "pr_b": pr_b, "delta_pr": pr_b - pr_a,
            "erank_a": erank_from_spectrum(ea[g]), "erank_b": erank_from_spectrum(eb[g]),
            "cos": float(pm["cos"][g]), "l2": float(pm["l2"][g]),
            "pr_std_a": float(std_a[g]), "pr_std_b": float(std_b[g]),
            "delta_pr_std": float(std_b[g] - std_a[g]),
            "norm_a": float(pm["norm_a"][g]), "norm_b": float(pm["norm_b"][g]),
            "n_tokens": st.acc_a.n,
        }
        for (k, std), (change, j) in loo.items():
            tag = "pr_std" if std else "pr"
            # the largest relative change over dropping one coordinate, and that coordinate
            row[f"{tag}_loo_{k}"] = float(change[g])
            row[f"{tag}_loo_dim_{k}"] = int(j[g])
        rows.append(row)
        spectra_a[f"{fam}.{layer}"] = ea[g].numpy()
        spectra_b[f"{fam}.{layer}"] = eb[g].numpy()
    return pd.DataFrame(rows), spectra_a, spectra_b


def _layer_results(model_a, model_b, texts, *, sites, variants, batch_size, max_tokens,
                   progress=None, base_stats=None) -> tuple[dict[bool, LayerGeometryResult], dict]:
    ids = _check_pair(model_a, model_b, texts, max_tokens, batch_size)
    site_list = _site_names(tuple(sites), model_a.n_layers)
    names = [s for _, _, s in site_list]
    stats = _geometry_pass(model_a, model_b, ids, names, variants, batch_size, progress, base_stats)
    out = {}
    for v, st in stats.items():
        frame, sa, sb = _geometry_frame(st, site_list)
        cfg = LayerGeometryConfig(sites=tuple(sites), exclude_bos=v, batch_size=batch_size,
                                  max_tokens=max_tokens, model_a=str(getattr(model_a, "name", "")),
                                  model_b=str(getattr(model_b, "name", "")))
        out[v] = LayerGeometryResult(cfg, frame, sa, sb)
    return out, {v: st.acc_a for v, st in stats.items()}


def compute_layer_geometry(model_a, model_b, texts: Sequence[str], *,
                           sites: Sequence[str] = ("resid_post", "final_norm"),
                           exclude_bos: bool = True, batch_size: int = 16,
                           max_tokens: int | None = None, progress=None) -> LayerGeometryResult:
    """Stream both models over identical teacher-forced inputs and measure every layer's PR,
    effective rank, standardised PR (the headline estimator: `HEADLINE_ESTIMATOR`), how far one
    coordinate moves each PR (`pr_leave_one_out`: columns pr_loo_* / pr_std_loo_*), and the mean
    cosine / L2 distance between the paired states. Padding positions are never counted; with
    `exclude_bos` the first real position of each row is dropped too. Memory is O(n_sites * d^2)."""
    res, _ = _layer_results(model_a, model_b, texts, sites=sites, variants=(bool(exclude_bos),),
                            batch_size=batch_size, max_tokens=max_tokens, progress=progress)
    return res[bool(exclude_bos)]


def layer_geometry(model_a, model_b, texts: Sequence[str], *, sites: Sequence[str] = ("resid_post", "final_norm"),
                   exclude_bos: bool = True, batch_size: int = 16, max_tokens: int | None = None):
    """Per-layer geometry DataFrame (layer, site, pr_a, pr_b, delta_pr, erank_a, erank_b, cos, l2, ...); see
    `compute_layer_geometry` for the result object with spectra, save/load and config."""
    return compute_layer_geometry(model_a, model_b, texts, sites=sites, exclude_bos=exclude_bos,
                                  batch_size=batch_size, max_tokens=max_tokens).to_frame()


# ----------------------------------------------------------------------------------------------------------------
# base vs several targets, three token sets
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class GeometryReportConfig:
    """batch_size: texts per forward pass; max_tokens: truncate teacher-forced texts (None = context); n_prompts /
    context_tokens / new_tokens: the target's greedy generations for the generated-token geometry (0 = skip)."""

    n_prompts: int = 100
    context_tokens: int = 32
    new_tokens: int = 96
    batch_size: int = 16
    max_tokens: int | None = 128


@dataclass
class GeometryReport:
    """frame: layer-geometry rows of every target x {teacher-forced without BOS, with BOS, generated tokens} (columns
    of LayerGeometryResult.frame plus target, tokens, bos). main: {target: LayerGeometryResult} of the teacher-forced
    no-BOS setting (save each with its own `.save`)."""

    frame: Any  # pandas.DataFrame
    main: dict[str, LayerGeometryResult] = field(default_factory=dict)

    def to_frame(self):
        return self.frame.copy()


def geometry_report(base, targets: dict, texts: Sequence[str],
                    cfg: GeometryReportConfig | None = None) -> GeometryReport:
    """Layer geometry of the base against every target: teacher-forced on `texts` without and with
    BOS (one pass for both; the base's statistics are accumulated once for all targets), and on the
    target's own greedy generations (prompt + generated tokens)."""
    import pandas as pd

    cfg = cfg or GeometryReportConfig()
    frames, main, base_stats = [], {}, None
    for name, m in targets.items():
        res, base_stats = _layer_results(base, m, texts, sites=("resid_post", "final_norm"),
                                         variants=(True, False), batch_size=cfg.batch_size,
                                         max_tokens=cfg.max_tokens, base_stats=base_stats)
        main[name] = res[True]
        for excluded in (True, False):
            frames.append(res[excluded].frame.assign(target=name, tokens="teacher_forced",
                                                     bos=not excluded))
        if cfg.n_prompts:
            prompts = context_prompts(m, texts, cfg.context_tokens, per_text=3)[:cfg.n_prompts]
            gens, _ = generate_continuations(m, prompts, max_new_tokens=cfg.new_tokens, batch_size=cfg.batch_size)
            seqs = [p + g for p, g in zip(prompts, gens)]
            res = compute_layer_geometry(base, m, seqs, exclude_bos=True, batch_size=cfg.batch_size)
            frames.append(res.frame.assign(target=name, tokens="generated", bos=False))
    return GeometryReport(pd.concat(frames, ignore_index=True), main)
