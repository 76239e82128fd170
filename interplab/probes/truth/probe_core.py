"""Model-free core of the Truth-Score probes: cross-validation folds and all L x H (x folds) logistic probes trained
as one batched tensor program.

Recipe (TruthProbe `probing/probe_*_series.py`, spec truth_scores.md §2.2): per fold, fresh zero-initialised
W [L,H,D] and B [L,H]; logit_{i,l,h} = <X_{i,l,h}, W_{l,h}> + B_{l,h}; BCE-with-logits averaged over (batch, L, H);
one AdamW (lr 1e-2, wd 1e-3, default betas/eps); 200 epochs of mini-batches of 512 in fold order (no reshuffle);
prediction 1[sigma(logit) > 0.5]; S_{l,h} = mean over folds of held-out accuracy. Beside accuracy every fit also
returns the held-out ROC AUC of the margins and the balanced accuracy (both 0.5 at chance for any class ratio, where
accuracy's chance is the majority rate) and each row's held-out margin.

Here every (fold, layer, head) probe is one column of a batched matmul: X is laid out [L*H, N, D] and [L*H, D, N], the weights
[L*H, F, D], and each step is two `bmm`s plus an elementwise AdamW update written out explicitly (identical to
`torch.optim.AdamW`'s formula) so that folds whose mini-batch schedule is shorter simply skip a step. The folds'
losses are independent sums, so this is exactly F separate optimisers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from interplab.core.errors import ConfigError, InputError, ShapeError

FOLD_KINDS = ("kfold", "stratified")
SOLVERS = ("adamw", "lbfgs")


def kfold_splits(n: int, n_splits: int = 5, seed: int = 42, shuffle: bool = True) -> list[tuple[np.ndarray, np.ndarray]]:
    """The folds of scikit-learn's `KFold(n_splits, shuffle=True, random_state=seed)`, reimplemented exactly.

    Returns [(train_idx, test_idx)] with both sorted ascending (as scikit-learn yields them); the first n % n_splits
    test folds are one sample larger. Not stratified (the repo's choice)."""
    if n_splits < 2:
        raise ConfigError(f"folds must be >= 2, got {n_splits}")
    if n < n_splits:
        raise InputError(f"need at least {n_splits} samples for {n_splits}-fold cross-validation, got {n}")
    idx = np.arange(n)
    if shuffle:
        np.random.RandomState(seed).shuffle(idx)
    sizes = np.full(n_splits, n // n_splits, dtype=int)
    sizes[: n % n_splits] += 1
    out, cur = [], 0
    for size in sizes:
        test_mask = np.zeros(n, dtype=bool)
        test_mask[idx[cur:cur + size]] = True
        out.append((np.flatnonzero(~test_mask), np.flatnonzero(test_mask)))
        cur += size
    return out


def stratified_splits(y: np.ndarray, n_splits: int = 5, seed: int = 42) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified folds: each class is shuffled (RandomState(seed)) and dealt round-robin to the folds, so every
    fold's class balance matches the data to within one sample. (interplab's own; not scikit-learn's exact split.)"""
    y = np.asarray(y)
    n = len(y)
    if n < n_splits:
        raise InputError(f"need at least {n_splits} samples for {n_splits}-fold cross-validation, got {n}")
    rng = np.random.RandomState(seed)
    fold_of = np.empty(n, dtype=int)
    offset = 0
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        rng.shuffle(members)
        fold_of[members] = (np.arange(len(members)) + offset) % n_splits
        offset += len(members)
    return [(np.flatnonzero(fold_of != f), np.flatnonzero(fold_of == f)) for f in range(n_splits)]


def make_folds(y: np.ndarray, folds: int | Sequence = 5, fold_kind: str = "kfold", seed: int = 42):
    """Folds from a count (kfold/stratified) or an explicit list of (train_idx, test_idx) pairs."""
    n = len(y)
    if not isinstance(folds, (int, np.integer)):
        splits = [(np.sort(np.asarray(tr, dtype=int)), np.sort(np.asarray(te, dtype=int))) for tr, te in folds]
        for tr, te in splits:
            if len(te) == 0 or len(tr) == 0 or np.intersect1d(tr, te).size or tr.max(initial=-1) >= n or te.max() >= n:
                raise InputError("explicit folds must be disjoint, non-empty (train, test) index arrays within range")
        return splits
    if fold_kind == "kfold":
        return kfold_splits(n, int(folds), seed)
    if fold_kind == "stratified":
        return stratified_splits(y, int(folds), seed)
    raise ConfigError(f"fold_kind must be one of {FOLD_KINDS}, got {fold_kind!r}")


@dataclass
class ProbeFit:
    """Raw output of `fit_head_probes` (arrays are numpy, [F, L, H] unless noted)."""

    accuracy: np.ndarray
    precision: np.ndarray
    recall: np.ndarray
    f1: np.ndarray
    n_val: np.ndarray            # [F]
    folds: list                  # [(train_idx, test_idx)]
    loss_curve: np.ndarray       # [n_steps] mean training loss over (folds, L, H) before each step
    weights: torch.Tensor | None = None  # [F, L, H, D] when return_weights
    bias: torch.Tensor | None = None     # [F, L, H]
    auroc: np.ndarray | None = None              # [F, L, H] held-out ROC AUC of the margins (NaN: one class)
    balanced_accuracy: np.ndarray | None = None  # [F, L, H] mean of held-out TPR and TNR (NaN: one class)
    heldout_margin: np.ndarray | None = None     # [N, L, H] float32: each row's margin in the fold holding it out


def _batch_plan(folds, batch_size: int, n: int):
    """Per mini-batch index b: the union of rows any fold uses, a [U, F] weight (1/batch size of that fold, 0
    otherwise) and a [F] mask of folds that take an optimiser step at b."""
    n_batches = [max(1, math.ceil(len(tr) / batch_size)) for tr, _ in folds]
    plan = []
    for b in range(max(n_batches)):
        members = [tr[b * batch_size:(b + 1) * batch_size] for tr, _ in folds]
        union = np.unique(np.concatenate(members))
        pos = {int(i): j for j, i in enumerate(union)}
        w = np.zeros((len(union), len(folds)))
        for f, mem in enumerate(members):
            if len(mem):
                w[[pos[int(i)] for i in mem], f] = 1.0 / len(mem)
        active = np.array([len(m) > 0 for m in members])
        plan.append((union, w, active))
    return plan


def _train_chunk(Xn, batch_plan, sign_all, y_np, val, loss_scale, epochs, lr, weight_decay, betas, eps, device,
                 dtype):
    """Train and evaluate the probes of a block of heads, Xn [n_heads_in_block, N, D]; all folds at once."""
    LH, N, D = Xn.shape
    F = val.shape[0]
    plan = []
    for union, w, active in batch_plan:
        if len(union) == N:
            xn = Xn
        else:
            xn = Xn[:, torch.as_tensor(union, device=device)].contiguous()
        plan.append((xn, xn.transpose(1, 2).contiguous(), sign_all[torch.as_tensor(union, device=device)][None, :],
                     torch.as_tensor(w.T * loss_scale, device=device, dtype=dtype),      # [F, U]
                     torch.as_tensor(active, device=device)[:, None], bool(active.all())))

    W = torch.zeros(LH, F, D, device=device, dtype=dtype)
    B = torch.zeros(LH, F, 1, device=device, dtype=dtype)
    mW, vW = torch.zeros_like(W), torch.zeros_like(W)
    mB, vB = torch.zeros_like(B), torch.zeros_like(B)
    t = torch.zeros(F, 1, device=device, dtype=dtype)
    b1, b2 = betas
    losses = []
    for _ in range(epochs):
        for xn, xt, sign, wt, active, all_active in plan:
            z = torch.baddbmm(B, W, xt)                       # [LH, F, U]
            sz = sign * z                                     # = -margin; symmetric under y -> 1-y, z -> -z
            losses.append((torch.nn.functional.softplus(sz) * wt).sum() / F)
            r = sign * torch.sigmoid(sz) * wt                 # dLoss/dz = (sigmoid(z) - y) / (n_b L H)
            gW = torch.bmm(r, xn)                             # [LH, F, D]
            gB = r.sum(2, keepdim=True)                       # [LH, F, 1]
            t = t + active.to(dtype)
            tt = torch.where(active, t, torch.ones_like(t))
            step_size = lr / (1 - b1 ** tt)                   # [F, 1]
            bc2_sqrt = torch.sqrt(1 - b2 ** tt)
            for P, g, m, v in ((W, gW, mW, vW), (B, gB, mB, vB)):
                if all_active:  # torch.optim.AdamW's update, with a per-fold step size
                    P.mul_(1 - lr * weight_decay)
                    m.lerp_(g, 1 - b1)
                    v.mul_(b2).addcmul_(g, g, value=1 - b2)
                    P.sub_((m / ((v.sqrt() / bc2_sqrt) + eps)) * step_size)
                else:           # folds without a batch at this index keep params and moments unchanged
                    newP = P * (1 - lr * weight_decay)
                    newm = torch.lerp(m, g, 1 - b1)
                    newv = v * b2 + (1 - b2) * g * g
                    newP = newP - (newm / ((newv.sqrt() / bc2_sqrt) + eps)) * step_size
                    P.copy_(torch.where(active, newP, P))
                    m.copy_(torch.where(active, newm, m))
                    v.copy_(torch.where(active, newv, v))

    z = torch.baddbmm(B, W, Xn.transpose(1, 2))              # [LH, F, N]
    return (W, B, *_held_out_metrics(z, y_np, val), torch.stack(losses))


def _held_out_auroc(z, yb, val):
    """[LH, F] ROC AUC of the held-out margins z [LH, F, N] (labels yb [N] bool, val [F, N]): P(margin of a
    positive > margin of a negative) + ½ P(tie), by sorted search (n log n); NaN in a fold without both classes.
    Threshold-free and 0.5 for an uninformative probe at any class ratio."""
    LH, F, _ = z.shape
    out = torch.full((LH, F), float("nan"), dtype=torch.float64, device=z.device)
    for f in range(F):
        pos, neg = val[f] & yb, val[f] & ~yb
        n_pos, n_neg = int(pos.sum()), int(neg.sum())
        if n_pos == 0 or n_neg == 0:
            continue
        zn = z[:, f, neg].sort(-1).values.contiguous()
        zp = z[:, f, pos].contiguous()
        below = torch.searchsorted(zn, zp, right=False) + torch.searchsorted(zn, zp, right=True)  # 2·lt + ties
        out[:, f] = below.sum(-1).to(torch.float64) / (2.0 * n_pos * n_neg)
    return out


def _held_out_metrics(z, y_np, val):
    """Accuracy, precision, recall, F1, n_val [1, F], balanced accuracy, ROC AUC ([LH, F] each unless noted) of
    margins z [LH, F, N] on the held-out rows, and each row's held-out margin [LH, N] (mean over the folds that hold
    it out; NaN for a row no fold holds out)."""
    device = z.device
    pred = z > 0                                              # == sigmoid(z) > 0.5, exactly symmetric under flips
    y1 = torch.as_tensor(y_np, device=device).bool()
    yb = y1[None, None, :]
    val3 = val[None]
    n_val = val3.sum(2).to(torch.float64)                     # [1, F]
    correct = ((pred == yb) & val3).sum(2).to(torch.float64)  # [LH, F]
    tp = (pred & yb & val3).sum(2).to(torch.float64)
    tn = (~pred & ~yb & val3).sum(2).to(torch.float64)
    pp = (pred & val3).sum(2).to(torch.float64)
    ap = (yb & val3).sum(2).to(torch.float64)
    an = (~yb & val3).sum(2).to(torch.float64)
    acc = correct / n_val
    prec = torch.where(pp > 0, tp / pp.clamp(min=1), torch.zeros_like(tp))
    rec = torch.where(ap > 0, tp / ap.clamp(min=1), torch.zeros_like(tp))
    f1 = torch.where(prec + rec > 0, 2 * prec * rec / (prec + rec).clamp(min=1e-300), torch.zeros_like(tp))
    nan = torch.full_like(tp, float("nan"))
    bal = torch.where((ap > 0) & (an > 0), (tp / ap.clamp(min=1) + tn / an.clamp(min=1)) / 2, nan)
    auc = _held_out_auroc(z, y1, val)
    held = val.to(z.dtype)                                    # [F, N]
    cnt = held.sum(0)
    margin = (z * held[None]).sum(1) / cnt.clamp(min=1)       # [LH, N]
    margin = torch.where(cnt[None] > 0, margin, torch.full_like(margin, float("nan")))
    return acc, prec, rec, f1, n_val, bal, auc, margin


def _lbfgs_chunk(Xn, y_np, val, C, tol, max_iter):
    """The fast solver on a block of heads; same return layout as `_train_chunk` (loss curve: final objective)."""
    from interplab.probes.truth.probe_lbfgs import lbfgs_logistic

    y_t = torch.as_tensor(y_np, device=Xn.device)
    theta, z, n_iter = lbfgs_logistic(Xn, y_t, ~val, C=C, tol=tol, max_iter=max_iter)
    W = theta[..., :-1].contiguous()
    B = theta[..., -1:].contiguous()
    return (W, B, *_held_out_metrics(z, y_np, val), n_iter.to(Xn.dtype).max().reshape(1))


def fit_head_probes(X, y, *, folds: int | Sequence = 5, fold_kind: str = "kfold", epochs: int = 200,
                    lr: float = 1e-2, weight_decay: float = 1e-3, batch_size: int = 512, seed: int = 42,
                    betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, device=None, dtype=None,
                    return_weights: bool = False, head_chunk: int | None = None, solver: str = "adamw",
                    C: float = 1.0, tol: float = 1e-4, max_iter: int = 100) -> ProbeFit:
    """Train every (fold, layer, head) logistic probe at once; see the module docstring for the recipe.

    X: [N, L, H, D] activations (numpy or torch; no standardisation). y: [N] labels in {0, 1}.
    folds: number of CV folds (split by `fold_kind` with `seed`) or explicit [(train_idx, test_idx)] pairs.
    device/dtype: where and in which precision to train (default: X's device, float32 unless X is float64).
    head_chunk: heads per block (default: as many as fit ~24 MB, cache-friendly on CPU). Blocks are independent
        (disjoint parameters), so the result does not depend on it; every block is one batched program.
    solver: "adamw" (the authors' recipe above; epochs/lr/weight_decay/batch_size/betas/eps apply) or "lbfgs" (the
        L2-regularised logistic optimum of scikit-learn's `LogisticRegression(C=C)`, solved by a batched L-BFGS to
        tol/max_iter; see `probe_lbfgs`). With "lbfgs" the loss curve holds one number: the most iterations any
        problem used.
    """
    if solver not in SOLVERS:
        raise ConfigError(f"solver must be one of {SOLVERS}, got {solver!r}")
    X = torch.as_tensor(X)
    if X.ndim != 4:
        raise ShapeError(f"activations must be [n_samples, n_layers, n_heads, d_head], got shape {tuple(X.shape)}")
    y_np = np.asarray(y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else y)
    if y_np.ndim != 1 or len(y_np) != X.shape[0]:
        raise ShapeError(f"labels must be [n_samples={X.shape[0]}], got shape {y_np.shape}")
    if not np.isin(y_np, (0, 1)).all():
        raise InputError("labels must be 0/1 (1 = context-supported/gold, 0 = hallucinated)")
    if epochs < 1 or batch_size < 1 or lr <= 0:
        raise ConfigError(f"need epochs >= 1, batch_size >= 1, lr > 0; got {epochs}, {batch_size}, {lr}")
    y_np = y_np.astype(np.int64)
    splits = make_folds(y_np, folds, fold_kind, seed)
    N, L, H, D = X.shape
    F, LH = len(splits), L * H
    if dtype is None:
        dtype = torch.float64 if X.dtype == torch.float64 else torch.float32
    device = torch.device(device) if device is not None else X.device
    # Two layouts of the same data, [L*H, N, D] and [L*H, D, N], so both matmuls of a step are
    # [F, K] @ [K, wide] (F = folds on the narrow side): ~3x faster than [N, D] @ [D, F] on CPU BLAS.
    Xn = X.to(device=device, dtype=dtype).reshape(N, LH, D).transpose(0, 1).contiguous()
    sign_all = torch.as_tensor(1 - 2 * y_np, device=device, dtype=dtype)  # +1 for y=0, -1 for y=1
    loss_scale = 1.0 / LH  # the repo averages the loss over (batch, L, H)

    batch_plan = _batch_plan(splits, batch_size, N)
    val = torch.zeros(F, N, dtype=torch.bool, device=device)
    for f, (_, te) in enumerate(splits):
        val[f, torch.as_tensor(te, device=device)] = True
    if head_chunk is None:
        if device.type == "cpu":  # keep one block's two layouts within ~24 MB (last-level-cache sized)
            head_chunk = max(1, min(LH, (24 << 20) // (2 * N * D * Xn.element_size())))
        else:
            head_chunk = LH
    if head_chunk < 1:
        raise ConfigError(f"head_chunk must be >= 1, got {head_chunk}")
    if solver == "lbfgs":
        results = [_lbfgs_chunk(Xn[c0:c0 + head_chunk], y_np, val, C, tol, max_iter)
                   for c0 in range(0, LH, head_chunk)]
    else:
        results = [_train_chunk(Xn[c0:c0 + head_chunk], batch_plan, sign_all, y_np, val, loss_scale, epochs, lr,
                                weight_decay, betas, eps, device, dtype)
                   for c0 in range(0, LH, head_chunk)]
    W = torch.cat([r[0] for r in results])
    B = torch.cat([r[1] for r in results])
    acc, prec, rec, f1 = (torch.cat([r[i] for r in results]) for i in range(2, 6))
    n_val = results[0][6]
    bal, auc, margin = (torch.cat([r[i] for r in results]) for i in range(7, 10))
    if solver == "lbfgs":
        losses = torch.stack([r[10] for r in results]).amax(0)
    else:
        losses = torch.stack([r[10] for r in results]).sum(0)

    def fl(a):  # [LH, F] -> [F, L, H]
        return a.T.reshape(F, L, H).cpu().numpy()

    return ProbeFit(
        accuracy=fl(acc), precision=fl(prec), recall=fl(rec), f1=fl(f1),
        n_val=n_val[0].cpu().numpy().astype(int), folds=splits, loss_curve=losses.cpu().numpy(),
        weights=W.transpose(0, 1).reshape(F, L, H, D).cpu() if return_weights else None,
        bias=B[:, :, 0].T.reshape(F, L, H).cpu() if return_weights else None,
        auroc=fl(auc), balanced_accuracy=fl(bal),
        heldout_margin=margin.T.reshape(N, L, H).to(torch.float32).cpu().numpy(),
    )
