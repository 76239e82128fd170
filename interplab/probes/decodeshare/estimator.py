"""DecodeShare (Shao et al., ICML 2026): a task-shared subspace of decode-time residual states.

Model-free part (this section): the shared-subspace estimator in two modes, its two significance nulls, leave-one-
task-out bases, the planted-factor generator and small statistics helpers. The model part (state collection under
the KV cache, forced-choice and generation scoring with decode-only edits) is in
`interplab.probes.decodeshare.model` and goes through `LabModel.generate` / `LabModel.run` only.

Estimator, `mode="paper"` (Algorithm 1 of the paper; the default). For tasks t with states X_t [n_t, d]:
  1. centre each X_t on its own mean (``center``), 2. subsample every task to n = min_t n_t (``balance``),
  3. SVD of the stacked rows X~ = U S V^T, 4. k = smallest m with sum_{i<=m} s_i^2 / sum s^2 >= rho, Q = V[:, :k],
  5. per task, v_{t,i} = Var((X~_t Q)[:, i]) and shares r_{t,i} = v_{t,i} / sum_j v_{t,j} (rows sum to 1),
  6. S = {i : #{t : r_{t,i} >= tau} >= m}, 7. basis Q_S = Q[:, S].
`mode="repo"` reproduces the reference code's `compute_cross_task_subspace` + `find_fully_shared_basis_improved`
path: global centring and per-feature z-scoring (divide by the pooled per-dimension std D) before the PCA, k from
the z-scored explained variance (capped at min(N-1, d, max_dim)), shares computed in z-space with a strict
r > tau, and the basis returned as the QR of the back-mapped columns D * v_i (orthonormal in raw space, unlike
the reference code, whose columns are only normalised).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from interplab.core.errors import ConfigError, DataError, InputError, ShapeError
from interplab.core.result import Result
from interplab.core.shapes import orthonormalize
from interplab.probes.decodeshare.subspaces import haar_basis

__all__ = [
    "SharedSubspaceConfig", "SharedSubspace", "shared_subspace", "NullResult", "null_permutation",
    "null_rotation", "loto_subspaces", "sensitivity_sweep", "PlantedFactors", "planted_factor_states",
    "match_state_counts",
]

ESTIMATOR_MODES = ("paper", "repo")


# --------------------------------------------------------------------------------------------------------------
# Estimator
# --------------------------------------------------------------------------------------------------------------
@dataclass
class SharedSubspaceConfig:
    """Settings of the shared-subspace estimator (spec section 2).

    rho: fraction of pooled variance the PCA keeps (k = smallest m reaching it); paper default 0.95.
    tau: per-task variance-share threshold for a component to count as "used" by a task; paper default 1e-3.
    m: number of tasks that must use a component for it to be shared; None = all tasks (the configs' default).
    mode: "paper" (Algorithm 1: raw, task-centred, balanced, orthonormal V) or "repo" (reference-code estimator:
        z-scored PCA, strict share threshold, back-mapped columns then QR). Recorded in every output.
    balance: subsample every task to the smallest task's count (seeded by `seed`) before the pooled PCA.
    center: centre each task on its own mean before the PCA (otherwise only the pooled mean is removed, so
        between-task mean differences enter the components, as in the reference LOTO / H3-decode runs).
    max_dim: repo mode only: cap on the number of PCA components (the reference default is 4096).
    seed: seed of the balancing subsample.
    empty_fallback_m: if S is empty with `m`, retry once with this m (the reference code silently falls back to
        m=2; here it is opt-in and recorded as `m_used`). None = return an empty basis.
    tau_k: [interplab extension] if set, use the dimensionless threshold of the paper's tables instead of `tau`:
        tau = tau_k / k once k is known (the paper's tau = 1e-3 at k ~ 3000 is tau_k ~ 3, i.e. "at least ~3x the
        uniform share 1/k"). At toy scale (k ~ 10-100) tau = 1e-3 is far below 1/k and marks every component as
        used by every task. The threshold actually used is `SharedSubspace.tau`.
    """
    rho: float = 0.95
    tau: float = 1e-3
    m: int | None = None
    mode: str = "paper"
    balance: bool = True
    center: bool = True
    max_dim: int = 4096
    seed: int = 0
    empty_fallback_m: int | None = None
    tau_k: float | None = None

    def validate(self, n_tasks: int) -> None:
        if self.mode not in ESTIMATOR_MODES:
            raise ConfigError(f"mode must be one of {ESTIMATOR_MODES}; got {self.mode!r}")
        if not 0.0 < self.rho <= 1.0:
            raise ConfigError(f"rho must be in (0, 1]; got {self.rho}")
        if not 0.0 < self.tau < 1.0:
            raise ConfigError(f"tau must be in (0, 1); got {self.tau}")
        for name in ("m", "empty_fallback_m"):
            v = getattr(self, name)
            if v is not None and not 1 <= v <= n_tasks:
                raise ConfigError(f"{name} must be between 1 and the number of tasks ({n_tasks}); got {v}")
        if self.max_dim < 1:
            raise ConfigError(f"max_dim must be >= 1; got {self.max_dim}")
        if self.tau_k is not None and not self.tau_k > 0:
            raise ConfigError(f"tau_k must be > 0 (or None); got {self.tau_k}")


@dataclass
class SharedSubspace(Result):
    """Result of `shared_subspace`.

    basis [d, k_s]: orthonormal basis of the shared subspace Q_S (k_s = len(shared_idx), may be 0).
    components [d, k]: orthonormal pooled-PCA basis Q (in repo mode: QR of the back-mapped columns).
    explained [r]: explained-variance ratio of every pooled component (r = rank), in the estimator's space.
    k: number of pooled components kept (rho rule).
    shares [T, k]: per-task variance shares r_{t,i} (each row sums to 1).
    task_variances [T, k]: v_{t,i}, the per-task variance of each component (estimator's space).
    counts [k]: #{t : r_{t,i} >= tau} (strict > in repo mode).
    shared_idx: indices into the k components that are shared.
    tasks: task names, the row order of `shares`; n_rows: rows each task contributed to the pooled PCA
        (row provenance; a LOTO basis has no rows from its held-out task).
    m_used: the m that produced `shared_idx` (differs from config.m only through `empty_fallback_m`).
    config: the SharedSubspaceConfig that produced it.
    """
    basis: np.ndarray
    components: np.ndarray
    explained: np.ndarray
    k: int
    shares: np.ndarray
    task_variances: np.ndarray
    counts: np.ndarray
    shared_idx: np.ndarray
    tasks: tuple[str, ...]
    n_rows: dict[str, int]
    m_used: int
    config: SharedSubspaceConfig = field(default_factory=SharedSubspaceConfig)
    tau_used: float | None = None

    @property
    def tau(self) -> float:
        """The share threshold actually applied (config.tau, or config.tau_k / k)."""
        return float(self.tau_used if self.tau_used is not None else self.config.tau)

    @property
    def k_s(self) -> int:
        """|S|, the dimension of the shared subspace."""
        return int(len(self.shared_idx))

    @property
    def d(self) -> int:
        return int(self.components.shape[0])

    @property
    def mode(self) -> str:
        return self.config.mode

    @property
    def bound(self) -> float:
        """Lemma A.3: |S| <= |T| / (m tau)."""
        return len(self.tasks) / (self.m_used * self.tau)

    def pooled_variance(self) -> np.ndarray:
        """Mean over tasks of each component's variance (used by the variance-matched control)."""
        return self.task_variances.mean(axis=0)

    def summary(self) -> dict:
        return {"mode": self.mode, "k": self.k, "k_s": self.k_s, "d": self.d, "n_tasks": len(self.tasks),
                "m": self.m_used, "tau": self.tau, "rho": self.config.rho, "bound": self.bound,
                "n_rows": dict(self.n_rows)}

    def to_frame(self):
        """Tidy table: one row per (task, component) with share, variance, count and whether it is shared."""
        import pandas as pd

        T, k = self.shares.shape
        shared = np.zeros(k, dtype=bool)
        shared[self.shared_idx] = True
        return pd.DataFrame({
            "task": np.repeat(np.asarray(self.tasks, dtype=object), k),
            "component": np.tile(np.arange(k), T),
            "share": self.shares.reshape(-1),
            "variance": self.task_variances.reshape(-1),
            "count": np.tile(self.counts, T),
            "shared": np.tile(shared, T),
            "explained": np.tile(self.explained[:k], T),
            "mode": self.mode,
        })


def _as_states(states_by_task: Mapping[str, Any]) -> tuple[list[str], list[np.ndarray]]:
    if not isinstance(states_by_task, Mapping) or not states_by_task:
        raise InputError("states_by_task must be a non-empty dict task name -> array [n, d]")
    names, arrs, d = [], [], None
    for name, x in states_by_task.items():
        a = np.asarray(x.detach().cpu().numpy() if hasattr(x, "detach") else x, dtype=np.float64)
        if a.ndim != 2:
            raise ShapeError(f"states of task {name!r} must be [n, d]; got shape {a.shape}")
        if a.shape[0] < 2:
            raise InputError(f"task {name!r} has {a.shape[0]} state(s); need at least 2 to estimate variances")
        if d is None:
            d = a.shape[1]
        elif a.shape[1] != d:
            raise ShapeError(f"task {name!r} has d = {a.shape[1]} but earlier tasks have d = {d}")
        if not np.isfinite(a).all():
            raise DataError(f"states of task {name!r} contain NaN or inf")
        names.append(str(name))
        arrs.append(a)
    if len(names) < 2:
        raise InputError(f"a shared subspace needs at least 2 tasks; got {len(names)}")
    return names, arrs


def _prepare(arrs: list[np.ndarray], cfg: SharedSubspaceConfig, rng: np.random.Generator) -> list[np.ndarray]:
    out = [a - a.mean(axis=0, keepdims=True) if cfg.center else a for a in arrs]
    if cfg.balance:
        n = min(a.shape[0] for a in out)
        out = [a if a.shape[0] == n else a[np.sort(rng.choice(a.shape[0], n, replace=False))] for a in out]
    return out


def _k_from_ratio(ratio: np.ndarray, rho: float, cap: int) -> int:
    cum = np.cumsum(ratio)
    hit = np.nonzero(cum >= rho - 1e-12)[0]
    k = int(hit[0]) + 1 if hit.size else len(ratio)
    return max(1, min(k, cap))


def _svd(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Singular values and V^T of X (thin SVD) in float64. Done in torch: its LAPACK path is several times faster
    than numpy's OpenBLAS one for these tall-thin matrices and respects `torch.set_num_threads`."""
    import torch

    _, s, vt = torch.linalg.svd(torch.from_numpy(np.ascontiguousarray(X, dtype=np.float64)), full_matrices=False)
    return s.numpy(), vt.numpy()


def _estimate(arrs: list[np.ndarray], cfg: SharedSubspaceConfig, m: int, fallback_m: int | None,
              rng: np.random.Generator) -> dict:
    """Core estimator on prepared inputs; returns the arrays of a SharedSubspace."""
    xs = _prepare(arrs, cfg, rng)
    sizes = [a.shape[0] for a in xs]
    X = np.concatenate(xs, axis=0)
    if not cfg.center:
        X = X - X.mean(axis=0, keepdims=True)
    d = X.shape[1]
    if cfg.mode == "repo":
        X = X - X.mean(axis=0, keepdims=True)
        D = X.std(axis=0)
        D = np.where(D > 0, D, 1.0)
        Xs = X / D
    else:
        D = None
        Xs = X
    s, vt = _svd(Xs)
    var = s ** 2
    total = var.sum()
    if total <= 0:
        raise DataError("all states are identical after centring; there is no variance to decompose")
    ratio = var / total
    cap = min(X.shape[0] - 1, d, cfg.max_dim) if cfg.mode == "repo" else min(X.shape[0], d)
    k = _k_from_ratio(ratio, cfg.rho, cap)
    V = vt[:k].T  # [d, k], orthonormal in the estimator's space
    bounds = np.cumsum([0] + sizes)
    Z = Xs @ V
    tv = np.stack([Z[bounds[i]:bounds[i + 1]].var(axis=0) for i in range(len(xs))])  # [T, k]
    rs = tv.sum(axis=1, keepdims=True)
    shares = np.divide(tv, rs, out=np.zeros_like(tv), where=rs > 0)
    tau = cfg.tau_k / k if cfg.tau_k else cfg.tau
    counts = (shares > tau).sum(0) if cfg.mode == "repo" else (shares >= tau).sum(0)
    m_used = m
    sidx = np.nonzero(counts >= m)[0]
    if sidx.size == 0 and fallback_m is not None:
        m_used = fallback_m
        sidx = np.nonzero(counts >= fallback_m)[0]
    if cfg.mode == "repo":
        cols = V * D[:, None]
        cols = cols / np.linalg.norm(cols, axis=0, keepdims=True)
        components = orthonormalize(cols)
        basis = orthonormalize(cols[:, sidx]) if sidx.size else np.zeros((d, 0))
    else:
        components = np.ascontiguousarray(V)
        basis = np.ascontiguousarray(V[:, sidx])
    return dict(basis=basis, components=components, explained=ratio, k=k, shares=shares, task_variances=tv,
                counts=counts.astype(np.int64), shared_idx=sidx.astype(np.int64), sizes=sizes, m_used=m_used,
                tau=tau)


def shared_subspace(states_by_task: Mapping[str, Any], *, rho: float = 0.95, tau: float = 1e-3,
                    m: int | None = None, mode: Literal["paper", "repo"] = "paper", balance: bool = True,
                    center: bool = True, max_dim: int = 4096, seed: int = 0,
                    empty_fallback_m: int | None = None, tau_k: float | None = None) -> SharedSubspace:
    """Estimate the task-shared subspace of `states_by_task` (task -> [n_t, d]); see the module docstring and
    `SharedSubspaceConfig` for the parameters. Returns a `SharedSubspace` (its basis may be empty: check `.k_s`)."""
    cfg = SharedSubspaceConfig(rho=rho, tau=tau, m=m, mode=mode, balance=balance, center=center,
                               max_dim=max_dim, seed=seed, empty_fallback_m=empty_fallback_m, tau_k=tau_k)
    return _shared_subspace_cfg(states_by_task, cfg)


def _shared_subspace_cfg(states_by_task, cfg: SharedSubspaceConfig) -> SharedSubspace:
    names, arrs = _as_states(states_by_task)
    cfg.validate(len(names))
    m = cfg.m if cfg.m is not None else len(names)
    r = _estimate(arrs, cfg, m, cfg.empty_fallback_m, np.random.default_rng(cfg.seed))
    return SharedSubspace(basis=r["basis"], components=r["components"], explained=r["explained"], k=r["k"],
                          shares=r["shares"], task_variances=r["task_variances"], counts=r["counts"],
                          shared_idx=r["shared_idx"], tasks=tuple(names),
                          n_rows=dict(zip(names, (int(s) for s in r["sizes"]))), m_used=int(r["m_used"]),
                          config=cfg, tau_used=float(r["tau"]))


def sensitivity_sweep(states_by_task: Mapping[str, Any], *, taus: Sequence[float] = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2,
                                                                                 3e-2, 1e-1),
                      rhos: Sequence[float] = (0.8, 0.85, 0.9, 0.95, 0.99), rho: float = 0.95, tau: float = 1e-3,
                      **kwargs):
    """|S| and k over a grid of tau (at `rho`) and rho (at `tau`): a tidy DataFrame with columns
    rho, tau, k, k_s, bound (Lemma A.3). One pooled PCA per rho; the tau sweep only recounts shares."""
    import pandas as pd

    kwargs.pop("tau_k", None)  # the sweep is over absolute tau; tau * k is reported as a column
    rows = []
    for r in sorted(set(map(float, rhos)) | {float(rho)}):
        ss = shared_subspace(states_by_task, rho=r, tau=tau, **kwargs)
        strict = ss.config.mode == "repo"
        grid = sorted(set(map(float, taus)) | {float(tau)}) if np.isclose(r, rho) else [float(tau)]
        for t in grid:
            used = ss.shares > t if strict else ss.shares >= t
            ks = int(((used.sum(0)) >= ss.m_used).sum())
            rows.append({"rho": r, "tau": t, "tau_k": t * ss.k, "k": ss.k, "k_s": ks,
                         "bound": len(ss.tasks) / (ss.m_used * t), "mode": ss.mode})
    df = pd.DataFrame(rows)
    df.attrs.update(rho=float(rho), tau=float(tau))
    return df


# --------------------------------------------------------------------------------------------------------------
# Significance nulls
# --------------------------------------------------------------------------------------------------------------
@dataclass
class NullResult(Result):
    """A null distribution of |S|: observed |S|, the B null values, and p = (#{null >= obs} + 1) / (B + 1)."""
    kind: str
    observed: int
    null: np.ndarray
    p: float
    B: int
    seed: int

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"kind": self.kind, "trial": np.arange(self.B), "null_size": self.null,
                             "observed": self.observed, "p": self.p})


def _pvalue(null: np.ndarray, observed: int) -> float:
    return float((np.sum(null >= observed) + 1) / (len(null) + 1))


def null_permutation(ss: SharedSubspace, *, B: int = 2000, seed: int = 0, chunk: int = 256) -> NullResult:
    """Null-1: permute each task's share vector independently over the k components, recount |S| (B trials).

    The smallest attainable p is 1/(B+1)."""
    if B < 1:
        raise ConfigError(f"B must be >= 1; got {B}")
    rng = np.random.default_rng(seed)
    sh = ss.shares
    T, k = sh.shape
    strict = ss.config.mode == "repo"
    null = np.empty(B, dtype=np.int64)
    for start in range(0, B, chunk):
        b = min(chunk, B - start)
        perm = rng.random((b, T, k)).argsort(axis=-1)
        p = np.take_along_axis(np.broadcast_to(sh, (b, T, k)), perm, axis=-1)
        used = p > ss.tau if strict else p >= ss.tau
        null[start:start + b] = (used.sum(axis=1) >= ss.m_used).sum(axis=1)
    return NullResult("permutation", ss.k_s, null, _pvalue(null, ss.k_s), B, seed)


def null_rotation(states_by_task: Mapping[str, Any], ss: SharedSubspace, *, B: int = 100,
                  seed: int = 0) -> NullResult:
    """Null-2: per task, apply an independent random signed permutation of the d coordinates (an orthogonal map),
    then redo the whole estimator (centring, pooled PCA, shares, S) with `ss.config`; B trials."""
    if B < 1:
        raise ConfigError(f"B must be >= 1; got {B}")
    names, arrs = _as_states(states_by_task)
    if tuple(names) != tuple(ss.tasks):
        raise InputError(f"states_by_task has tasks {names} but the subspace was estimated on {list(ss.tasks)}")
    cfg = ss.config
    rng = np.random.default_rng(seed)
    d = arrs[0].shape[1]
    null = np.empty(B, dtype=np.int64)
    for b in range(B):
        rot = []
        for a in arrs:
            perm = rng.permutation(d)
            sign = rng.choice(np.array([-1.0, 1.0]), size=d)
            rot.append(a[:, perm] * sign)
        r = _estimate(rot, cfg, ss.m_used, None, np.random.default_rng(cfg.seed + 1 + b))
        null[b] = len(r["shared_idx"])
    return NullResult("rotation", ss.k_s, null, _pvalue(null, ss.k_s), B, seed)


# --------------------------------------------------------------------------------------------------------------
# Leave-one-task-out
# --------------------------------------------------------------------------------------------------------------
def loto_subspaces(states_by_task: Mapping[str, Any], **kwargs) -> dict[str, SharedSubspace]:
    """For every task t, the shared subspace estimated from all *other* tasks (keyword arguments as for
    `shared_subspace`; m=None means all remaining tasks). Each result's `.tasks` / `.n_rows` record which rows
    went in; the held-out task contributes none."""
    names = list(states_by_task)
    if len(names) < 3:
        raise InputError(f"leave-one-task-out needs at least 3 tasks (2 remain per fold); got {len(names)}")
    out = {}
    for t in names:
        rest = {n: states_by_task[n] for n in names if n != t}
        out[t] = shared_subspace(rest, **kwargs)
        assert t not in out[t].n_rows
    return out


# --------------------------------------------------------------------------------------------------------------
# Planted-factor generator (spec section 7)
# --------------------------------------------------------------------------------------------------------------
@dataclass
class PlantedFactors:
    """Synthetic states X_t = Z_s A_s^T diag-scaled per task + Z_t B_t^T + sigma E, with the true bases."""
    states: dict[str, np.ndarray]
    shared_basis: np.ndarray            # A_s [d, r_s] (orthonormal); empty when shared=False
    task_bases: dict[str, np.ndarray]   # B_t [d, r_t] (orthonormal)


def planted_factor_states(*, n_tasks: int = 5, n_per_task: int | Sequence[int] = 400, d: int = 32,
                          r_shared: int = 3, r_task: int = 2, sigma: float = 0.02, shared: bool = True,
                          shared_scale: tuple[float, float] = (1.5, 2.5), task_scale: tuple[float, float] = (0.8, 1.6),
                          orthogonal: bool = True, seed: int = 0) -> PlantedFactors:
    """Planted-factor states with a known shared subspace.

    Every task uses the shared factor A_s with its own per-column scales ~ U(shared_scale) and a private factor
    B_t with scales ~ U(task_scale), plus isotropic noise sigma. With `orthogonal` (default) all factor columns are
    mutually orthogonal (one Haar draw split into blocks), so the pooled PCA can separate them; with `shared=False`
    there is no shared factor and the estimator should find |S| = 0. Defaults keep the noise share of a component
    (sigma^2 / per-task variance, ~1e-4) well below tau = 1e-3."""
    rng = np.random.default_rng(seed)
    rs = r_shared if shared else 0
    need = rs + n_tasks * r_task
    if orthogonal and need > d:
        raise ConfigError(f"{need} orthogonal factor columns do not fit in d = {d}")
    sizes = [int(n_per_task)] * n_tasks if np.isscalar(n_per_task) else [int(n) for n in n_per_task]
    if len(sizes) != n_tasks:
        raise ConfigError(f"n_per_task has {len(sizes)} entries for {n_tasks} tasks")
    if orthogonal:
        F = haar_basis(d, need, seed=int(rng.integers(2 ** 31)))
        A = F[:, :rs]
        Bs = [F[:, rs + t * r_task: rs + (t + 1) * r_task] for t in range(n_tasks)]
    else:
        A = haar_basis(d, rs, seed=int(rng.integers(2 ** 31)))
        Bs = [haar_basis(d, r_task, seed=int(rng.integers(2 ** 31))) for _ in range(n_tasks)]
    states, task_bases = {}, {}
    for t in range(n_tasks):
        n = sizes[t]
        x = sigma * rng.standard_normal((n, d))
        if rs:
            sc = rng.uniform(*shared_scale, size=rs)
            x += (rng.standard_normal((n, rs)) * sc) @ A.T
        if r_task:
            sc = rng.uniform(*task_scale, size=r_task)
            x += (rng.standard_normal((n, r_task)) * sc) @ Bs[t].T
        x += rng.standard_normal(d)  # a task-specific offset (removed by task centring)
        states[f"task{t}"] = x
        task_bases[f"task{t}"] = Bs[t]
    return PlantedFactors(states, A, task_bases)


# --------------------------------------------------------------------------------------------------------------
# Count matching
# --------------------------------------------------------------------------------------------------------------
def match_state_counts(a: Mapping[str, Any], b: Mapping[str, Any], *, seed: int = 0
                       ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Subsample two task -> states dicts so each task has the same number of rows in both (min of the two)."""
    if set(a) != set(b):
        raise InputError(f"the two state sets have different tasks: {sorted(a)} vs {sorted(b)}")
    rng = np.random.default_rng(seed)
    oa, ob = {}, {}
    for t in a:
        xa, xb = np.asarray(a[t]), np.asarray(b[t])
        n = min(len(xa), len(xb))
        oa[t] = xa if len(xa) == n else xa[np.sort(rng.choice(len(xa), n, replace=False))]
        ob[t] = xb if len(xb) == n else xb[np.sort(rng.choice(len(xb), n, replace=False))]
    return oa, ob
