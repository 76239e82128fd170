"""DecodeShare (Shao et al., ICML 2026): a task-shared subspace of decode-time residual states.

Model-free part (this section): the shared-subspace estimator in two modes, its two significance nulls, leave-one-
task-out bases, the planted-factor generator and small statistics helpers. The model part (state collection under
the KV cache, forced-choice and generation scoring with decode-only edits) is further down and goes through
`LabModel.generate` / `LabModel.run` only.

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

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from interplab.errors import ConfigError, DataError, InputError, ResultsError, ShapeError
from interplab.probes.subspaces import (  # noqa: F401  (re-exported for convenience)
    angle_summary,
    haar_basis,
    orthonormalize,
    principal_angles,
    repair_vector,
    steering_overlap,
    subspace_overlap,
)

__all__ = [
    "SharedSubspaceConfig", "SharedSubspace", "shared_subspace", "NullResult", "null_permutation",
    "null_rotation", "loto_subspaces", "sensitivity_sweep", "PlantedFactors", "planted_factor_states", "match_state_counts",
    "bootstrap_ci", "paired_signflip_test", "steering_overlap", "repair_vector", "collect_decode_states",
    "collect_decode_states_multi", "collect_prefill_states", "ForcedChoiceScores", "score_forced_choice", "GenerationScores",
    "generate_exact_match", "stop_token_ids",
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
class SharedSubspace:
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

    def save(self, path) -> Path:
        from interplab.results.io import write_arrays, write_json

        path = Path(path)
        write_arrays(path / "shared_subspace.safetensors", {
            "basis": self.basis, "components": self.components, "explained": self.explained,
            "shares": self.shares, "task_variances": self.task_variances, "counts": self.counts,
            "shared_idx": np.asarray(self.shared_idx, dtype=np.int64)})
        write_json(path / "shared_subspace.json", {"k": self.k, "tasks": list(self.tasks), "n_rows": self.n_rows,
                                                  "m_used": self.m_used, "config": asdict(self.config),
                                                  "tau_used": self.tau,
                                                  "kind": "SharedSubspace"})
        return path

    @classmethod
    def load(cls, path) -> "SharedSubspace":
        from interplab.results.io import read_arrays, read_json

        path = Path(path)
        meta_p, arr_p = path / "shared_subspace.json", path / "shared_subspace.safetensors"
        if not meta_p.exists() or not arr_p.exists():
            raise ResultsError(f"{path} does not hold a saved SharedSubspace (need shared_subspace.json and "
                               "shared_subspace.safetensors); save one with SharedSubspace.save(dir)")
        meta, arr = read_json(meta_p), read_arrays(arr_p)
        return cls(basis=arr["basis"], components=arr["components"], explained=arr["explained"], k=int(meta["k"]),
                   shares=arr["shares"], task_variances=arr["task_variances"], counts=arr["counts"],
                   shared_idx=arr["shared_idx"], tasks=tuple(meta["tasks"]),
                   n_rows={k: int(v) for k, v in meta["n_rows"].items()}, m_used=int(meta["m_used"]),
                   config=SharedSubspaceConfig(**meta["config"]), tau_used=meta.get("tau_used"))


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
class NullResult:
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
# Small statistics helpers
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


def bootstrap_ci(values, *, B: int = 5000, level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(mean, lo, hi): percentile bootstrap CI of the mean of `values` (B resamples, vectorised)."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(B, x.size))
    means = x[idx].mean(axis=1)
    a = (1 - level) / 2
    return float(x.mean()), float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def paired_signflip_test(a, b, *, B: int = 10000, seed: int = 0) -> float:
    """Two-sided paired sign-flip test of mean(a - b) = 0; p = (c + 1) / (B + 1)."""
    diff = np.asarray(a, dtype=np.float64).reshape(-1) - np.asarray(b, dtype=np.float64).reshape(-1)
    if diff.size == 0:
        return float("nan")
    rng = np.random.default_rng(seed)
    obs = abs(diff.mean())
    signs = rng.choice(np.array([-1.0, 1.0]), size=(B, diff.size))
    null = np.abs((signs * diff).mean(axis=1))
    return float((np.sum(null >= obs - 1e-15) + 1) / (B + 1))


# --------------------------------------------------------------------------------------------------------------
# Model part: state collection and scoring (through LabModel only)
# --------------------------------------------------------------------------------------------------------------
DECODE_VARIANTS = ("plain", "boundary")


def _site(model, layer: int) -> str:
    if not isinstance(layer, (int, np.integer)) or not 0 <= int(layer) < model.n_layers:
        raise ConfigError(f"layer must be an integer in [0, {model.n_layers}); got {layer!r}")
    return f"resid_post.{int(layer)}"


def _chunks(seq: Sequence, size: int):
    if size < 1:
        raise ConfigError(f"batch_size must be >= 1; got {size}")
    for i in range(0, len(seq), size):
        yield seq[i:i + size]


def _subsample(x: np.ndarray, cap: int | None, rng: np.random.Generator) -> np.ndarray:
    if cap is None or len(x) <= cap:
        return x
    return x[np.sort(rng.choice(len(x), cap, replace=False))]


def _prompt_list(name: str, prompts) -> list:
    if isinstance(prompts, str) or not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise InputError(f"prompts of task {name!r} must be a non-empty list of strings or token-id lists")
    return list(prompts)


def collect_decode_states(model, prompts_by_task: Mapping[str, Sequence], *, layer: int, max_new_tokens: int,
                          variant: Literal["plain", "boundary"] = "plain", max_states_per_task: int | None = 20000,
                          seed: int = 0, batch_size: int = 16, edits: Sequence | None = None,
                          stop_tokens: Sequence[int] | None = None) -> dict[str, np.ndarray]:
    """Residual stream after block `layer` at every generated, non-EOS token of greedy KV-cached decoding.

    For each prompt the model generates up to `max_new_tokens` tokens g1..gK; the state of g_s is the one computed
    when g_s is fed back (the decode step that produces the logits of g_{s+1}), so one extra token is generated
    internally to give gK its state. Rows that emitted EOS are not collected from then on (the EOS token's own state
    is never kept; `GenerateOutput.decode_active`). variant="plain" keeps exactly these states (the reference H1
    runner); variant="boundary" also keeps the last prompt token's state, which the boundary loop runs as its first
    decode step (the reference calibration does not capture it). At most `max_states_per_task` states per task are
    kept, drawn at random with `seed`. `edits` (e.g. a SubspaceProjection) are applied during generation.
    `stop_tokens` (default: EOS plus <|im_end|> when the vocabulary has it) also end a row: the state of a stop
    token and everything after it is dropped, which matters for chat organisms that end turns with <|im_end|>.
    Returns task -> float64 array [n_states, d_model]."""
    out = collect_decode_states_multi(model, prompts_by_task, layers=[layer], max_new_tokens=max_new_tokens,
                                      variant=variant, max_states_per_task=max_states_per_task, seed=seed,
                                      batch_size=batch_size, edits=edits, stop_tokens=stop_tokens)
    return out[int(layer)]


def collect_decode_states_multi(model, prompts_by_task: Mapping[str, Sequence], *, layers: Sequence[int],
                                max_new_tokens: int, variant: Literal["plain", "boundary"] = "plain",
                                max_states_per_task: int | None = 20000, seed: int = 0, batch_size: int = 16,
                                edits: Sequence | None = None, stop_tokens: Sequence[int] | None = None
                                ) -> dict[int, dict[str, np.ndarray]]:
    """`collect_decode_states` for several layers from one generation pass: {layer: {task: [n, d]}}. The same
    (row, step) states are kept at every layer. A row also counts as finished at its first token in
    `stop_tokens` (default `stop_token_ids(model)`: EOS plus a chat end-of-turn token such as <|im_end|>)."""
    import torch
    sites = {int(l): _site(model, l) for l in layers}
    if not sites:
        raise ConfigError("layers must name at least one layer")
    if variant not in DECODE_VARIANTS:
        raise ConfigError(f"variant must be one of {DECODE_VARIANTS}; got {variant!r}")
    if max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be >= 1; got {max_new_tokens}")
    rng = np.random.default_rng(seed)
    stops = set(stop_tokens if stop_tokens is not None else stop_token_ids(model))
    out: dict[int, dict[str, np.ndarray]] = {l: {} for l in sites}
    for name, prompts in prompts_by_task.items():
        prompts = _prompt_list(name, prompts)
        parts: dict[int, list] = {l: [] for l in sites}
        for chunk in _chunks(prompts, batch_size):
            gen = model.generate(chunk, max_new_tokens=max_new_tokens + 1, capture=list(sites.values()), edits=edits)
            act = gen.decode_active
            if act is not None and act.numel():
                # also stop rows at a non-EOS stop token (e.g. <|im_end|> of a chat organism): the state of
                # new token s is kept only if no stop token occurs among new tokens 0..s
                new = gen.tokens[:, gen.batch.input_ids.shape[1]:][:, :act.shape[1]]
                is_stop = torch.isin(new, torch.as_tensor(sorted(stops), device=new.device))
                act = act & (is_stop.long().cumsum(1) == 0).to(act.device)
            for l, site in sites.items():
                if variant == "boundary":
                    parts[l].append(gen.prefill_cache.last(site).detach().double().cpu().numpy())
                if act is not None and act.numel():
                    x = gen.decode_cache[site]
                    parts[l].append(x[act.to(x.device)].detach().double().cpu().numpy())
        n = sum(len(p) for p in parts[next(iter(sites))])
        keep = None
        if max_states_per_task is not None and n > max_states_per_task:
            keep = np.sort(rng.choice(n, max_states_per_task, replace=False))
        for l in sites:
            x = np.concatenate(parts[l], 0) if parts[l] else np.zeros((0, model.d_model))
            out[l][str(name)] = x if keep is None else x[keep]
    return out


def collect_prefill_states(model, prompts_by_task: Mapping[str, Sequence], *, layer: int,
                           max_states_per_task: int | None = 20000, seed: int = 0, batch_size: int = 32,
                           edits: Sequence | None = None) -> dict[str, np.ndarray]:
    """Residual stream after block `layer` at each prompt's last token (one state per prompt, from one uncached
    forward). Use `match_state_counts(decode, prefill)` to equalise counts with a decode set."""
    site = _site(model, layer)
    rng = np.random.default_rng(seed)
    out = {}
    for name, prompts in prompts_by_task.items():
        prompts = _prompt_list(name, prompts)
        parts = [model.run(chunk, capture=[site], edits=edits, logits=False).cache.last(site)
                 .detach().double().cpu().numpy() for chunk in _chunks(prompts, batch_size)]
        out[str(name)] = _subsample(np.concatenate(parts, 0), max_states_per_task, rng)
    return out


def _encode_prompt(model, p) -> list[int]:
    if isinstance(p, str):
        ids = model.tokenizer(p)["input_ids"]
    else:
        ids = [int(t) for t in p]
    if not ids:
        raise InputError("empty prompt")
    return list(ids)


def _is_candidate(c) -> bool:
    return isinstance(c, str) or (isinstance(c, (list, tuple)) and len(c) > 0
                                  and all(isinstance(t, (int, np.integer)) for t in c))


def _encode_words(model, text) -> list[int]:
    if isinstance(text, str):
        return list(model.tokenizer(text, add_special_tokens=False)["input_ids"]) if text.strip() else []
    return [int(t) for t in text]


@dataclass
class ForcedChoiceScores:
    """Teacher-forced candidate scores: logprobs [n, C] (sum over each candidate's tokens), pred [n] (argmax),
    gold [n] (-1 when unknown), correct [n] bool, and the edit budget (forwards / positions edited)."""
    logprobs: np.ndarray
    pred: np.ndarray
    gold: np.ndarray
    correct: np.ndarray
    n_edited: int = 0

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if len(self.correct) else float("nan")

    def margin(self) -> np.ndarray:
        """gold log-prob minus the best wrong candidate's."""
        lp = self.logprobs.copy()
        g = lp[np.arange(len(lp)), self.gold]
        lp[np.arange(len(lp)), self.gold] = -np.inf
        return g - lp.max(1)

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"example": np.arange(len(self.pred)), "pred": self.pred, "gold": self.gold,
                             "correct": self.correct, "gold_logprob": self.logprobs[np.arange(len(self.pred)),
                                                                                      np.maximum(self.gold, 0)]})


def score_forced_choice(model, prompts: Sequence, candidates: Sequence, gold: Sequence[int] | None = None, *,
                        edits: Sequence | None = None, answer_prefix: str | Sequence[int] | None = None,
                        batch_size: int = 64) -> ForcedChoiceScores:
    """Forced choice by teacher-forced candidate log-probs.

    prompts: strings (tokenised with the model's special tokens) or token-id lists. candidates: one list of
    candidate continuations shared by all prompts, or one list per prompt (strings or token-id lists; multi-token
    candidates score the sum of their token log-probs). answer_prefix: teacher-forced before every candidate and not
    scored (e.g. "ans"). Edits are given in generation terms (phases/positions relative to the prompt) and are
    re-targeted with `teacher_forced`, so a decode-only edit touches the answer prefix and candidate tokens (as in
    the reference loop) but no prompt token; the uncached forward over prompt + candidate computes exactly what a
    KV-cached teacher-forced loop computes (tested)."""
    import torch

    from interplab.interventions.projection import teacher_forced

    prompts = list(prompts)
    if not prompts:
        raise InputError("score_forced_choice needs at least one prompt")
    candidates = list(candidates)
    if candidates and all(_is_candidate(c) for c in candidates):
        cands = [candidates] * len(prompts)  # one candidate list shared by every prompt
    else:
        cands = [list(c) for c in candidates]
    if len(cands) != len(prompts):
        raise ShapeError(f"{len(cands)} candidate lists for {len(prompts)} prompts")
    C = len(cands[0])
    if C < 1 or any(len(c) != C for c in cands):
        raise ShapeError("every prompt needs the same (non-zero) number of candidates")
    pre = _encode_words(model, answer_prefix) if answer_prefix is not None else []
    rows, core, start = [], [], []
    for p, cs in zip(prompts, cands):
        pid = _encode_prompt(model, p)
        for c in cs:
            cid = _encode_words(model, c)
            if not cid:
                raise InputError(f"candidate {c!r} encodes to no tokens")
            rows.append(pid + pre + cid)
            core.append(len(pid))
            start.append(len(pid) + len(pre))
    edits = list(edits or [])
    scores = np.empty(len(rows))
    n_before = [getattr(e, "n_edited", 0) for e in edits]
    for i0 in range(0, len(rows), batch_size):
        sl = slice(i0, i0 + batch_size)
        chunk = rows[sl]
        wrapped = [teacher_forced(e, core[sl]) for e in edits]
        out = model.run(chunk, edits=wrapped, logits=True)
        lp = torch.log_softmax(out.logits.to(torch.float64), -1)
        W = lp.shape[1]
        for j, r in enumerate(chunk):
            L, s0 = len(r), start[i0 + j]
            cols = torch.arange(W - L + s0, W, device=lp.device)
            toks = torch.as_tensor(r[s0:], device=lp.device)
            scores[i0 + j] = float(lp[j, cols - 1, toks].sum())
    logprobs = scores.reshape(len(prompts), C)
    pred = logprobs.argmax(1)
    g = np.full(len(prompts), -1) if gold is None else np.asarray(gold, dtype=np.int64).reshape(-1)
    if g.shape[0] != len(prompts):
        raise ShapeError(f"gold has {g.shape[0]} entries for {len(prompts)} prompts")
    n_edited = sum(getattr(e, "n_edited", 0) - b for e, b in zip(edits, n_before))
    return ForcedChoiceScores(logprobs, pred, g, (pred == g) & (g >= 0), int(n_edited))


@dataclass
class GenerationScores:
    """Free greedy generation scored by exact match of the tokens before the first stop token.

    tokens: generated ids per example (up to and including the stop token); texts: decoded answers; correct [n];
    stopped [n] (a stop token was emitted); lengths [n] (tokens before the stop)."""
    tokens: list[list[int]]
    texts: list[str]
    correct: np.ndarray
    stopped: np.ndarray
    lengths: np.ndarray
    n_edited: int = 0

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if len(self.correct) else float("nan")

    @property
    def stop_rate(self) -> float:
        return float(self.stopped.mean()) if len(self.stopped) else float("nan")

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"example": np.arange(len(self.texts)), "text": self.texts, "correct": self.correct,
                             "stopped": self.stopped, "length": self.lengths})


def stop_token_ids(model) -> list[int]:
    """The model's stop tokens: `LabModel.stop_token_ids` (EOS plus the generation config's eos ids) when present,
    else EOS; plus the chat end-of-turn token <|im_end|> when the vocabulary has one."""
    ids: list[int] = []
    st = getattr(model, "stop_token_ids", None)
    if st is not None:
        ids = [int(t) for t in (st.tolist() if hasattr(st, "tolist") else st)]
    elif model.eos_token_id is not None:
        ids = [int(model.eos_token_id)]
    conv = getattr(model.tokenizer, "convert_tokens_to_ids", None)
    im_end = conv("<|im_end|>") if conv is not None else None
    unk = getattr(model.tokenizer, "unk_token_id", None)
    if isinstance(im_end, int) and im_end != unk and im_end not in ids:
        ids.append(im_end)
    return ids


def generate_exact_match(model, prompts: Sequence, answers: Sequence, *, max_new_tokens: int,
                         edits: Sequence | None = None, batch_size: int = 16,
                         stop_tokens: Sequence[int] | None = None) -> GenerationScores:
    """Greedy KV-cached generation with `edits`; an example is correct when the tokens before the first stop token
    (EOS, or <|im_end|> for chat organisms) equal the answer's tokens exactly and a stop token was emitted.
    Generation continues past <|im_end|> when it is not the tokenizer's EOS, but only the part before it is scored."""
    prompts, answers = list(prompts), list(answers)
    if len(prompts) != len(answers):
        raise ShapeError(f"{len(prompts)} prompts but {len(answers)} answers")
    stops = set(stop_tokens if stop_tokens is not None else stop_token_ids(model))
    edits = list(edits or [])
    n_before = [getattr(e, "n_edited", 0) for e in edits]
    toks_all, texts, correct, stopped, lengths = [], [], [], [], []
    for i0 in range(0, len(prompts), batch_size):
        chunk = prompts[i0:i0 + batch_size]
        gen = model.generate([_encode_prompt(model, p) for p in chunk], max_new_tokens=max_new_tokens, edits=edits)
        for j, new in enumerate(gen.new_tokens):
            cut = next((i for i, t in enumerate(new) if t in stops), None)
            body = new if cut is None else new[:cut]
            ans = _encode_words(model, answers[i0 + j])
            toks_all.append(list(new))
            texts.append(model.tokenizer.decode(body, skip_special_tokens=False).strip())
            stopped.append(cut is not None)
            lengths.append(len(body))
            correct.append(cut is not None and body == ans)
    n_edited = sum(getattr(e, "n_edited", 0) - b for e, b in zip(edits, n_before))
    return GenerationScores(toks_all, texts, np.asarray(correct, bool), np.asarray(stopped, bool),
                            np.asarray(lengths, np.int64), int(n_edited))
